"""`evaluate` and `lag` write nothing outside --out: not in the working directory, $TMPDIR, $HOME or /tmp.

The `evaluate` run is the `evaluation` fixture: `cohort pipeline evaluate` as its own process and
JVM (the job with Python workers reading the table and the matplotlib report; `simulate` starts
its session the same way, through `cohort.pipeline.session.spark_session`). `lag --once` runs the
same way against the live cluster: its workers speak the protocol with kio, which imports
hypothesis, which writes a cache wherever it is told (the session tells it: under --out).
"""

from __future__ import annotations

import pyarrow.parquet as pq


def listing(path):
    return {str(p.relative_to(path)) for p in path.rglob("*")}


def test_evaluate_writes_only_under_out(fleet, evaluation):
    assert listing(evaluation.work) == set()
    assert listing(evaluation.tmpdir) == set()
    assert listing(evaluation.home) == set()
    assert evaluation.new_in_tmp == set()
    assert sorted(p.name for p in evaluation.out.iterdir()) == [
        "charts", "group_summary", "group_winners", "overall", "report.md", "scores",
    ]  # and the scratch directory OUT/_spark is gone
    assert pq.read_table(evaluation.out / "scores").num_rows == fleet.groups * fleet.samples * 3


def test_lag_writes_only_under_out(live, isolated, tmp_path):
    import time

    import confluent_kafka as ck

    cluster, _ = live
    # A member of our own, so the sweep asks its coordinator (kio, hence hypothesis, in the workers).
    member = ck.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "no-writes", "group.protocol": "classic",
                          "enable.auto.commit": False, "log_level": 0})
    try:
        member.subscribe([cluster.topic])
        deadline = time.monotonic() + 30
        while not member.assignment():
            assert time.monotonic() < deadline, "no assignment"
            member.poll(0.1)
        run = isolated(tmp_path, "lag", "--bootstrap", cluster.bootstrap, "--once")
    finally:
        member.close()
    assert listing(run.work) == set()
    assert listing(run.tmpdir) == set()
    assert listing(run.home) == set()
    assert run.new_in_tmp == set()
    assert "_spark" not in {p.name for p in run.out.iterdir()}
    mine = pq.read_table(run.out / "members").to_pylist()
    assert [(r["group_id"], r["subscribed_topics"]) for r in mine if r["group_id"] == "no-writes"] == [
        ("no-writes", [cluster.topic])]
