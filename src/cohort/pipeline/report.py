"""The evaluation report: Markdown with PNG charts (matplotlib, Agg backend), written on the driver.

Only small aggregates are collected to the driver: one row per assignor, plus the groups the
report lists by name (all of them for small fleets, the largest margins otherwise).
"""

from __future__ import annotations

import math
from pathlib import Path

LIST_ALL_GROUPS_UP_TO = 50
TOP_GROUPS = 20


def _fmt(value, digits=1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _charts(charts: Path, rows: list[dict]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    charts.mkdir(parents=True, exist_ok=True)
    names = [r["assignor"] for r in rows]
    made = []

    fig, ax = plt.subplots(figsize=(6, 3.5))
    outright = [r["groups_won_outright"] or 0 for r in rows]
    ties = [(r["groups_won"] or 0) - (r["groups_won_outright"] or 0) for r in rows]
    ax.bar(names, outright, label="won outright")
    ax.bar(names, ties, bottom=outright, label="won on a tie-break")
    ax.set_ylabel("groups")
    ax.set_title("Groups won (lowest average max member lag)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(charts / "wins.png", dpi=100)
    plt.close(fig)
    made.append(("Groups won per assignor", "charts/wins.png"))

    fig, ax = plt.subplots(figsize=(7, 3.8))
    labels = ["mean"] + [f"p{int(q * 100)}" for q in (0.5, 0.9, 0.99)]
    width = 0.8 / max(len(rows), 1)
    for i, r in enumerate(rows):
        quantiles = list(r["max_member_lag_quantiles"] or [])
        values = [r["avg_max_member_lag"] or 0] + [float(v) for v in quantiles]
        ax.bar([x + i * width for x in range(len(values))], values, width=width, label=r["assignor"])
    ax.set_xticks([x + width * (len(rows) - 1) / 2 for x in range(len(labels))], labels)
    ax.set_yscale("log")
    ax.set_ylabel("max member lag (messages)")
    ax.set_title("Max member lag per group and sample")
    ax.legend()
    fig.tight_layout()
    fig.savefig(charts / "max_member_lag.png", dpi=100)
    plt.close(fig)
    made.append(("Max member lag (mean and quantiles over group samples)", "charts/max_member_lag.png"))

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    left.bar(names, [r["avg_moved"] or 0 for r in rows])
    left.set_title("Partitions moved per sample")
    right.bar(names, [r["avg_partition_skew"] or 0 for r in rows])
    right.set_title("Partition-count skew (max - min)")
    fig.tight_layout()
    fig.savefig(charts / "moves_skew.png", dpi=100)
    plt.close(fig)
    made.append(("Stability and balance", "charts/moves_skew.png"))
    return made


def write_report(spark, out: Path, assignors: list[str], scores, winners, overall) -> dict:
    """Write OUT/report.md and OUT/charts/*.png; returns the headline facts."""
    from pyspark.sql import functions as F

    rows = [r.asDict() for r in overall.collect()]
    rows.sort(key=lambda r: assignors.index(r["assignor"]) if r["assignor"] in assignors else len(assignors))
    n_groups = winners.count()
    scored = [r for r in rows if r["avg_max_member_lag"] is not None]
    ranking = sorted(scored, key=lambda r: (r["avg_max_member_lag"], r["assignor"]))
    facts = {"groups": n_groups, "assignors": rows, "winner": None, "margin": None, "runner_up": None}
    lines = ["# Assignor evaluation", ""]
    if not ranking:
        lines += ["No group had members in the samples, so nothing was scored.", ""]
    else:
        best = ranking[0]
        facts["winner"] = best["assignor"]
        lines += [f"{n_groups:,} groups, {best['group_samples']:,} group samples per assignor.", "", "## Overall", ""]
        if len(ranking) > 1:
            second = ranking[1]
            margin = 1 - best["avg_max_member_lag"] / second["avg_max_member_lag"] if second["avg_max_member_lag"] else 0.0
            facts["margin"], facts["runner_up"] = margin, second["assignor"]
            lines.append(
                f"**{best['assignor']}** wins overall: its average max member lag is "
                f"{_fmt(best['avg_max_member_lag'])}, {_pct(margin)} below the runner-up **{second['assignor']}** "
                f"({_fmt(second['avg_max_member_lag'])}). It wins {best['groups_won']:,} of {n_groups:,} groups "
                f"({best['groups_won_outright']:,} outright, the rest on a tie-break: fewer moves, then lower skew)."
            )
        else:
            lines.append(f"Only **{best['assignor']}** was evaluated.")
        lines += [
            "",
            "| assignor | groups won | won outright | avg margin when won | avg max member lag | p50 | p90 | p99 "
            "| avg mean member lag | avg skew | max skew | moved per sample | rack-local | errors |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            q = list(r["max_member_lag_quantiles"] or [None] * 3)
            lines.append(
                f"| {r['assignor']} | {r['groups_won']:,} | {r['groups_won_outright']:,} | {_pct(r['avg_margin_when_won'])} "
                f"| {_fmt(r['avg_max_member_lag'])} | {_fmt(q[0])} | {_fmt(q[1])} | {_fmt(q[2])} "
                f"| {_fmt(r['avg_mean_member_lag'])} | {_fmt(r['avg_partition_skew'], 2)} | {_fmt(r['max_partition_skew'])} "
                f"| {_fmt(r['avg_moved'], 2)} | {_pct(r['avg_rack_local_fraction'])} | {r['errors'] or 0:,} |"
            )
        lines += [
            "",
            "Max member lag is the lag of the most loaded member in a group at one sample: the consumer that",
            "falls behind first. The margin is how much lower the winner's average is than the runner-up's.",
            "Moves count partitions whose owner changed since the previous sample (at a group's first sample:",
            "since the owners recorded in it, i.e. the cost of switching to that assignor).",
            "",
        ]
        for title, path in _charts(out / "charts", rows):
            lines += [f"![{title}]({path})", ""]

        listed = winners.orderBy(F.col("margin").desc(), "group_id")
        if n_groups > LIST_ALL_GROUPS_UP_TO:
            listed = listed.limit(TOP_GROUPS)
            heading = f"## Per group: the {TOP_GROUPS} largest margins (all groups: `group_winners/`)"
        else:
            heading = "## Per group (also in `group_winners/`)"
        lines += [heading, "", "| group | winner | avg max member lag | runner-up | its avg max member lag | margin |",
                  "|---|---|---:|---|---:|---:|"]
        for g in listed.collect():
            lines.append(
                f"| {g['group_id']} | {g['winner']} | {_fmt(g['winner_max_member_lag'])} | {g['runner_up'] or '-'} "
                f"| {_fmt(g['runner_up_max_member_lag'])} | {'tie' if g['tie'] else _pct(g['margin'])} |"
            )
        lines.append("")
    lines += [
        "## Tables",
        "",
        "`scores/` (group, sample, assignor), `group_summary/` (group, assignor), `group_winners/` (group),",
        "`overall/` (assignor): Parquet, described in docs/pipeline.md.",
        "",
    ]
    (out / "report.md").write_text("\n".join(lines))
    return facts
