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


def rank_key(row: dict) -> tuple:
    """How assignors rank fleet-wide: the rule that picks each group's winner (lowest average max
    member lag, then fewer moves, then lower skew), then more groups won. The name never decides."""
    def num(key):
        value = row.get(key)
        return math.inf if value is None else value

    return (num("avg_max_member_lag"), num("avg_moved"), num("avg_partition_skew"), -(row.get("groups_won") or 0))


# Every column of the overall table, with its unit (the report prints these under the table).
COLUMNS = [
    ("groups won", "groups (count) where the assignor ranks first by the rule above"),
    ("won outright", "of those, groups where its average max member lag is strictly the lowest (no tie-break)"),
    ("avg margin when won", "over the groups it won outright: how much lower its average max member lag is than "
                            "the runner-up's, in % of the runner-up's"),
    ("avg max member lag", "messages; the lag of the most loaded member of a group at one sample, averaged over "
                           "all group samples"),
    ("p50, p90, p99", "messages; quantiles of the max member lag over all group samples"),
    ("avg mean member lag", "messages; a group's total lag divided by its members, averaged over group samples"),
    ("avg skew", "partitions; the most minus the fewest partitions a member of the group owns, averaged"),
    ("max skew", "partitions; the largest such difference seen"),
    ("moved per sample", "partitions whose owner changed since the group's previous sample, averaged"),
    ("rack-local", "% of assigned partitions with a replica in the owning member's rack (- when no racks)"),
    ("errors", "group samples (count) where the assignor raised an error"),
]


def _label(ax, bars, fmt="{:,.0f}") -> None:
    """Write each bar's value above it."""
    for bar in bars:
        height = bar.get_height()
        ax.annotate(fmt.format(height), (bar.get_x() + bar.get_width() / 2, height), ha="center", va="bottom",
                    fontsize=7, xytext=(0, 2), textcoords="offset points")


def _charts(charts: Path, rows: list[dict]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    charts.mkdir(parents=True, exist_ok=True)
    names = [r["assignor"] for r in rows]
    made = []

    fig, ax = plt.subplots(figsize=(6, 3.5))
    outright = [r["groups_won_outright"] or 0 for r in rows]
    ties = [(r["groups_won"] or 0) - (r["groups_won_outright"] or 0) for r in rows]
    ax.bar(names, outright, label="won outright")
    tops = ax.bar(names, ties, bottom=outright, label="won on a tie-break")
    for bar, low, total in zip(tops, outright, [o + t for o, t in zip(outright, ties)]):
        ax.annotate(f"{total:,}", (bar.get_x() + bar.get_width() / 2, total), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_ylabel("groups (count)")
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
        _label(ax, ax.bar([x + i * width for x in range(len(values))], values, width=width, label=r["assignor"]))
    ax.set_xticks([x + width * (len(rows) - 1) / 2 for x in range(len(labels))], labels)
    ax.set_ylim(bottom=0)  # a linear axis from zero: bar heights compare as the values do
    ax.yaxis.set_major_formatter(matplotlib.ticker.StrMethodFormatter("{x:,.0f}"))
    ax.set_ylabel("max member lag (messages)")
    ax.set_title("Max member lag per group and sample (lower is better)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(charts / "max_member_lag.png", dpi=100)
    plt.close(fig)
    made.append(("Max member lag (mean and quantiles over group samples)", "charts/max_member_lag.png"))

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    _label(left, left.bar(names, [r["avg_moved"] or 0 for r in rows]), "{:,.2f}")
    left.set_title("Partitions moved per sample")
    left.set_ylabel("partitions")
    _label(right, right.bar(names, [r["avg_partition_skew"] or 0 for r in rows]), "{:,.2f}")
    right.set_title("Partition-count skew (max - min)")
    right.set_ylabel("partitions")
    fig.tight_layout()
    fig.savefig(charts / "moves_skew.png", dpi=100)
    plt.close(fig)
    made.append(("Stability and balance", "charts/moves_skew.png"))
    return made


def _provenance(provenance: dict) -> list[str]:
    lines = ["## Provenance", ""]
    for key, value in provenance.items():
        lines.append(f"- {key}: {value}")
    return lines + [""]


def write_report(spark, out: Path, assignors: list[str], scores, winners, overall, provenance: dict | None = None,
                 skipped: int = 0) -> dict:
    """Write OUT/report.md and OUT/charts/*.png; returns the headline facts. `skipped`: groups of
    the samples that never had a member, so nothing was scored for them."""
    from pyspark.sql import functions as F

    rows = [r.asDict() for r in overall.collect()]
    rows.sort(key=lambda r: assignors.index(r["assignor"]) if r["assignor"] in assignors else len(assignors))
    n_groups = winners.count()
    scored = [r for r in rows if r["avg_max_member_lag"] is not None]
    ranking = sorted(scored, key=rank_key)
    facts = {"groups": n_groups, "assignors": rows, "winner": None, "margin": None, "runner_up": None,
             "tie": False, "skipped": skipped}
    lines = ["# Assignor evaluation", ""]
    skipped_line = (f"{skipped:,} groups of the samples never had a member and were skipped (there is nothing "
                    "to assign in them)." if skipped else "")
    if not ranking:
        lines += ["No group had members in the samples, so nothing was scored.", ""]
        if skipped_line:
            lines += [skipped_line, ""]
    else:
        best = ranking[0]
        facts["winner"] = best["assignor"]
        lines += [f"{n_groups:,} groups, {best['group_samples']:,} group samples per assignor."
                  + (f" {skipped_line}" if skipped_line else ""), "", "## Overall", ""]
        if len(ranking) > 1:
            second = ranking[1]
            margin = 1 - best["avg_max_member_lag"] / second["avg_max_member_lag"] if second["avg_max_member_lag"] else 0.0
            facts["margin"], facts["runner_up"] = margin, second["assignor"]
            if rank_key(best) == rank_key(second):
                facts["tie"] = True
                lines.append(
                    f"**{best['assignor']}** and **{second['assignor']}** tie: the same average max member lag "
                    f"({_fmt(best['avg_max_member_lag'])} messages), moves, skew and groups won.")
            else:
                how = ("its average max member lag is " f"{_fmt(best['avg_max_member_lag'])} messages, {_pct(margin)} "
                       f"below the runner-up **{second['assignor']}** ({_fmt(second['avg_max_member_lag'])})")
                if best["avg_max_member_lag"] == second["avg_max_member_lag"]:
                    how = (f"it ties the runner-up **{second['assignor']}** on average max member lag "
                           f"({_fmt(best['avg_max_member_lag'])} messages) and wins on the tie-break: fewer partitions "
                           f"moved per sample ({_fmt(best['avg_moved'], 2)} against {_fmt(second['avg_moved'], 2)}), "
                           "then lower skew")
                lines.append(
                    f"**{best['assignor']}** wins overall: {how}. It wins {best['groups_won']:,} of {n_groups:,} groups "
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
            "Assignors are ranked as each group's winner is chosen: lowest average max member lag, then fewest",
            "partitions moved, then lowest skew, then most groups won. Max member lag is the lag of the most",
            "loaded member in a group at one sample: the consumer that falls behind first. Moves count partitions",
            "whose owner changed since the previous sample (at a group's first sample: since the owners recorded",
            "in it, i.e. the cost of switching to that assignor).",
            "",
            "| column | meaning and unit |",
            "|---|---|",
            *[f"| {name} | {meaning} |" for name, meaning in COLUMNS],
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
    if provenance:
        lines += _provenance(provenance)
    (out / "report.md").write_text("\n".join(lines))
    return facts
