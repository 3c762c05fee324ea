"""`pip install cohort` without extras, in a fresh virtualenv: the broker and every wire tool run;
the pipeline names the extra it needs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    path = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    pip = subprocess.run([str(path / "bin" / "python"), "-m", "pip", "install", "--quiet", ROOT],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-2000:]
    return path / "bin"


def test_no_extra_is_installed(venv):
    missing = subprocess.run([str(venv / "python"), "-c", "import importlib.util as u; print([m for m in "
                              "('pyspark', 'pandas', 'pytest', 'hypothesis', 'matplotlib') if u.find_spec(m)])"],
                             capture_output=True, text=True, timeout=60)
    assert missing.stdout.strip() == "[]"


def test_a_plain_install_builds_the_c_extension(venv, tmp_path):
    """The assignor's C builder comes with the package, not only with the editable install."""
    found = subprocess.run([str(venv / "python"), "-c", "import cohort.assignors._uniform_native as m; print(m.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert found.returncode == 0, found.stderr[-1000:]
    assert found.stdout.strip().startswith(str(venv.parent)), found.stdout


def test_broker_and_tools_run_from_a_plain_install(venv, tmp_path):
    cohort = str(venv / "cohort")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COHORT_", "KAFKA_", "PYTHON"))}
    server = subprocess.Popen([cohort, "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "d"),
                               "-o", "http.listener=127.0.0.1:0"], stdout=subprocess.PIPE,
                              stderr=open(tmp_path / "server.log", "wb"), env=env, cwd=tmp_path)
    try:
        http = port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = server.stdout.readline().decode()
            if not line:
                break
            if line.startswith("cohort: http on "):
                http = int(line.rsplit(":", 1)[1])
            if line.startswith("cohort: listening on "):
                port = int(line.rsplit(":", 1)[1])
        assert port and http, (tmp_path / "server.log").read_text()
        bootstrap = ["--bootstrap-server", f"127.0.0.1:{port}"]

        def run(*argv, input=None):
            return subprocess.run([cohort, *argv, *bootstrap], capture_output=True, text=True, input=input,
                                  timeout=90, env=env, cwd=tmp_path)

        assert run("topics", "create", "--topic", "p", "--partitions", "1").returncode == 0
        assert run("produce", "--topic", "p", input="one\ntwo\n").returncode == 0
        read = run("consume", "--topic", "p", "--group", "pg", "--from-beginning", "--max-messages", "2")
        assert read.stdout == "one\ntwo\n", read.stderr
        assert run("groups", "list").stdout.split() == ["pg"]
        assert "pg" in run("groups", "describe", "--group", "pg").stdout
        from prometheus_client.parser import text_string_to_metric_families

        metrics = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics", timeout=10).read().decode()
        latest = {(s.labels["topic"], s.labels["partition"]): s.value for f in text_string_to_metric_families(metrics)
                  for s in f.samples if s.name == "kafka_partition_latest_offset"}
        assert latest == {("p", "0"): 2}
        assert urllib.request.urlopen(f"http://127.0.0.1:{http}/", timeout=10).read().startswith(b"<!doctype html>")

        pipeline = subprocess.run([cohort, "pipeline", "lag", "--bootstrap", f"127.0.0.1:{port}", "--once", "--out",
                                   str(tmp_path / "lag")], capture_output=True, text=True, timeout=60, env=env)
        assert pipeline.returncode == 2
        assert pipeline.stderr.strip().endswith("is not installed (pip install 'cohort[pipeline]')"), pipeline.stderr
    finally:
        server.terminate()
        assert server.wait(30) == 0
