"""`evaluate` writes nothing outside --out: not in the working directory, $TMPDIR, $HOME or /tmp.

The run is the `evaluation` fixture: `cohort pipeline evaluate` as its own process and JVM (the
job with a shuffle, Python workers and the matplotlib report; `simulate` starts its session the
same way, through `cohort.pipeline.session.spark_session`).
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
