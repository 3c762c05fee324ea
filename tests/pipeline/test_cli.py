"""`cohort pipeline` argument handling: bad input is one line on stderr and exit 2, before Spark starts."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time

import pytest

from cohort.pipeline import cli


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "cohort.pipeline.cli", *args],
        capture_output=True, text=True, timeout=180, cwd=cwd,
    )


@pytest.fixture()
def samples_dir(tmp_path):
    (tmp_path / "partitions").mkdir()
    (tmp_path / "members").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "--groups", "0", "--out", "OUT"], "argument --groups: expected a positive integer, got '0'"),
        (["simulate", "--groups", "many", "--out", "OUT"], "argument --groups: expected a positive integer, got 'many'"),
        (["simulate", "--groups", "5"], "the following arguments are required: --out"),
        (["simulate", "--groups", "5", "--out", "OUT", "--churn", "1.5"], "argument --churn: expected a number from 0 to 1, got '1.5'"),
        (["simulate", "--groups", "5", "--out", "OUT", "--seed", "x"], "argument --seed: expected an integer, got 'x'"),
        (["evaluate", "--out", "OUT"], "the following arguments are required: --samples"),
        (["explode"], "argument JOB: invalid choice: 'explode'"),
        ([], "the following arguments are required: JOB"),
    ],
)
def test_bad_arguments(tmp_path, args, message):
    result = run_cli(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cohort pipeline") and message in lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing written, not even OUT


def test_missing_samples_directory(tmp_path):
    result = run_cli("evaluate", "--samples", str(tmp_path / "nope"), "--out", str(tmp_path / "out"))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.strip() == f"cohort pipeline evaluate: error: --samples {tmp_path / 'nope'}: no such directory"
    assert not (tmp_path / "out").exists()


def test_samples_directory_without_tables(tmp_path):
    (tmp_path / "members").mkdir()  # a fleet of Empty groups has no members/, but every fleet has partitions/
    result = run_cli("evaluate", "--samples", str(tmp_path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr.strip().endswith("not a lag-sample directory (no partitions/ table)")


def test_unknown_assignor_lists_the_known_ones(samples_dir):
    result = run_cli("evaluate", "--samples", str(samples_dir), "--out", str(samples_dir / "o"), "--assignors", "range,nope")
    assert result.returncode == 2
    line = result.stderr.strip()
    assert "--assignors: unknown assignor 'nope'" in line and "lag" in line and "uniform" in line
    assert "\n" not in line


def test_repeated_assignor(samples_dir):
    result = run_cli("evaluate", "--samples", str(samples_dir), "--out", str(samples_dir / "o"), "--assignors", "lag,lag")
    assert result.returncode == 2 and "names an assignor twice" in result.stderr


def test_out_that_is_a_file(tmp_path):
    target = tmp_path / "file"
    target.write_text("keep me")
    result = run_cli("simulate", "--groups", "3", "--out", str(target))
    assert result.returncode == 2
    assert result.stderr.strip() == f"cohort pipeline simulate: error: --out {target}: exists and is not a directory"
    assert target.read_text() == "keep me"


def test_out_equal_to_samples(samples_dir):
    result = run_cli("evaluate", "--samples", str(samples_dir), "--out", str(samples_dir))
    assert result.returncode == 2 and result.stderr.strip().endswith("--out must differ from --samples")


def test_add_parser_plugs_into_a_parent_command(samples_dir, capsys):
    parent = argparse.ArgumentParser(prog="cohort")
    sub = parent.add_subparsers(dest="command", required=True)
    cli.add_parser(sub)
    args = parent.parse_args(["pipeline", "evaluate", "--samples", str(samples_dir), "--out", str(samples_dir / "o"),
                              "--assignors", "nope"])
    assert args.func(args) == 2
    assert "cohort pipeline evaluate: error: --assignors: unknown assignor 'nope'" in capsys.readouterr().err
    args = parent.parse_args(["pipeline", "simulate", "--groups", "10", "--out", "x"])
    assert (args.groups, args.samples, args.seed, args.partitions, args.master) == (10, 3, 0, 20, None)
    with pytest.raises(SystemExit) as exit_info:
        parent.parse_args(["pipeline", "simulate", "--groups", "-1", "--out", "x"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "cohort pipeline simulate: error: argument --groups: expected a positive integer, got '-1'"
    )


def _stderr_lines(text):
    """What a job printed, less the JVM's own launch warning (`--add-modules` of Spark 4) and
    the progress lines of a job that ran long enough to print some."""
    return [line for line in text.splitlines()
            if not line.startswith("WARNING: Using incubator modules") and ": progress: " not in line]


def test_a_failure_after_spark_starts_is_one_line_with_its_cause(tmp_path):
    bad = tmp_path / "samples" / "partitions" / "date=2026-01-01" / "group_bucket=1"
    bad.mkdir(parents=True)
    (bad / "part-0.parquet").write_bytes(b"not parquet")
    result = run_cli("evaluate", "--samples", str(tmp_path / "samples"), "--out", str(tmp_path / "out"),
                     "--master", "local[1]")
    assert result.returncode == 1
    (line,) = _stderr_lines(result.stderr)
    assert line.startswith("cohort pipeline evaluate: failed: SparkException: [FAILED_READ_FILE")
    assert "part-0.parquet" in line
    verbose = run_cli("evaluate", "--samples", str(tmp_path / "samples"), "--out", str(tmp_path / "out2"),
                      "--master", "local[1]", "--verbose")
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr  # the whole story, when asked
    assert _stderr_lines(verbose.stderr)[-1] == line


@pytest.mark.parametrize("signum, when", [(signal.SIGTERM, "partitions"), (signal.SIGINT, "_spark/local")])
def test_a_signal_stops_a_running_job_cleanly_within_5_s(tmp_path, signum, when):
    """SIGTERM while Spark writes the first table; SIGINT while the session is still starting."""
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "cohort", "pipeline", "simulate", "--groups", "2000000",
                             "--out", str(out), "--master", "local[1]"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / when).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None
        proc.send_signal(signum)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=30)
        assert time.monotonic() - sent < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum
    assert _stderr_lines(err) == ["cohort pipeline simulate: stopped; tables in --out may be partial"], err
    assert not (out / "_spark").exists()  # the scratch space went with the session


def test_an_interrupt_python_swallows_while_stopping_leaves_no_traceback():
    """The stop's KeyboardInterrupt may land where Python only reports exceptions (logging's
    at-fork hook while PySpark forks): that report is dropped, anything else still goes through."""
    from types import SimpleNamespace

    from cohort.pipeline import runner

    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT), sys.unraisablehook
    reported = []
    sys.unraisablehook = reported.append
    try:
        caught = runner._stop_on_signals("cohort pipeline simulate", False, None)
        interrupt = SimpleNamespace(exc_type=KeyboardInterrupt, exc_value=KeyboardInterrupt(), exc_traceback=None,
                                    err_msg="Exception ignored in", object=None)
        sys.unraisablehook(interrupt)
        assert reported == [interrupt], "an interrupt outside a stop was swallowed"
        caught["code"] = 130  # a stop under way (as on_signal records it)
        sys.unraisablehook(interrupt)
        other = SimpleNamespace(exc_type=ValueError, exc_value=ValueError("x"), exc_traceback=None,
                                err_msg="Exception ignored in", object=None)
        sys.unraisablehook(other)
        assert reported == [interrupt, other]
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])
        sys.unraisablehook = saved[2]
