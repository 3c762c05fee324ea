"""`cohort assign` end to end through the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

COHORT = str(Path(sys.executable).with_name("cohort"))

LAG_EXAMPLE = {
    "topics": {"t0": {"partitions": 3}},
    "members": {"C0": {"topics": ["t0"]}, "C1": {"topics": ["t0"]}},
    "lag": {"t0": [100000, 50000, 60000]},
}

RANGE_EXAMPLE = {
    "topics": {"t0": {"partitions": 3}, "t1": {"partitions": 3}},
    "members": {"C0": {"topics": ["t0", "t1"]}, "C1": {"topics": ["t0", "t1"]}},
}


def cohort(*args, stdin=None):
    return subprocess.run([COHORT, *args], input=stdin, capture_output=True, text=True, timeout=60)


def test_lag_reproduces_the_kafka_5337_worked_example(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(LAG_EXAMPLE))
    out = cohort("assign", "--assignor", "lag", str(spec))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"C0": {"t0": [0]}, "C1": {"t0": [1, 2]}}


def test_range_reproduces_the_javadoc_example_from_stdin():
    out = cohort("assign", "--assignor", "range", stdin=json.dumps(RANGE_EXAMPLE))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"C0": {"t0": [0, 1], "t1": [0, 1]}, "C1": {"t0": [2], "t1": [2]}}


def test_static_members_sort_first_in_range():
    spec = {
        "topics": {"t0": {"partitions": 3}, "t1": {"partitions": 3}},
        "members": {
            "C3": {"topics": ["t0", "t1"], "instance_id": "I0"},
            "C2": {"topics": ["t0", "t1"], "instance_id": "I1"},
        },
    }
    out = cohort("assign", "--assignor", "range", "-", stdin=json.dumps(spec))
    assert json.loads(out.stdout) == {"C2": {"t0": [2], "t1": [2]}, "C3": {"t0": [0, 1], "t1": [0, 1]}}


def test_every_member_is_present_and_empty_topics_are_omitted():
    spec = {
        "topics": {"t0": {"partitions": 1}, "t1": {"partitions": 0}},
        "members": {"A": {"topics": ["t0", "t1"]}, "B": {"topics": ["t0", "t1", "nope"]}},
    }
    out = cohort("assign", "--assignor", "uniform", stdin=json.dumps(spec))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) == {"A", "B"}
    assert sorted(result["A"].get("t0", []) + result["B"].get("t0", [])) == [0]
    assert "t1" not in result["A"] and "t1" not in result["B"]


def test_the_bundled_example_runs():
    example = Path(__file__).resolve().parents[1] / "examples" / "lag-example.json"
    out = cohort("assign", "--assignor", "lag", str(example))
    assert json.loads(out.stdout) == {"C0": {"t0": [0]}, "C1": {"t0": [1, 2]}}


BAD_INPUTS = [
    ("not json", "invalid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"topics": {}}', "needs both"),
    ('{"topics": {"t": {"partitions": -1}}, "members": {}}', "non-negative integer"),
    ('{"topics": {"t": {"partitions": 2}}, "members": {"m": {"topics": ["x"]}}}', "subscribes to no known topic"),
    ('{"topics": {"t": {"partitions": 2}}, "members": {"m": {"topics": []}}}', "subscribes to no known topic"),
    ('{"topics": {"t": {"partitions": 2}}, "members": {"m": {"topcs": ["t"]}}}', "unknown field 'topcs'"),
    ('{"topics": {"t": {"partitions": 2}}, "members": {"m": {"topics": ["t"]}}, "lag": {"t": [1]}}', "one per partition"),
    ('{"topics": {"t": {"partitions": 2}}, "members": {"m": {"topics": ["t"]}}, "lag": {"u": [1]}}', "unknown topic"),
    ('{"topics": {"t": {"partitions": 2}}, "members": {"m": {"topics": ["t"], "assignment": {"t": [5]}}}}',
     "names partition 5"),
    ('{"topics": {"t": {"partitions": 2}}, "members": {"m": {"topics": ["t"], "assignment": {"t": [0]}},'
     ' "n": {"topics": ["t"], "assignment": {"t": [0]}}}}', "assignment of both"),
    ('{"topics": {"t": {"partitions": 2, "racks": [["a"]]}}, "members": {"m": {"topics": ["t"]}}}', "one per partition"),
]


@pytest.mark.parametrize("text,message", BAD_INPUTS)
def test_bad_input_prints_one_line_and_exits_2(text, message):
    out = cohort("assign", "--assignor", "uniform", stdin=text)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.stderr


def test_unknown_assignor_names_the_available_ones():
    out = cohort("assign", "--assignor", "sticky", stdin=json.dumps(LAG_EXAMPLE))
    assert out.returncode == 2 and out.stdout == ""
    assert "unknown assignor 'sticky'" in out.stderr and "uniform" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_a_missing_file_is_a_clear_error(tmp_path):
    out = cohort("assign", "--assignor", "range", str(tmp_path / "missing.json"))
    assert out.returncode == 2 and out.stdout == ""
    assert "cannot read" in out.stderr and len(out.stderr.strip().splitlines()) == 1
