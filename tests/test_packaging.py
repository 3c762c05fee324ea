"""The wheel installed without extras into a fresh virtualenv: the broker and every `cohort`
subcommand run (each with --help, and each against a live broker); the pipeline names the extra
it needs."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    base = tmp_path_factory.mktemp("venv")
    path = base / "v"
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(base / "dist"), ROOT],
                           capture_output=True, text=True, timeout=900)
    assert wheel.returncode == 0, wheel.stderr[-2000:]
    (built,) = (base / "dist").glob("cohort-*.whl")
    # The test environment's pip installs into the new virtualenv (`--python`): seeding the
    # virtualenv with a pip of its own cost 3.7 s of CPU, and that older pip 4 s more to install.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(path / "bin" / "python"), "install", "--quiet",
                          str(built)], capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-2000:]
    return path / "bin"


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("COHORT_", "KAFKA_", "PYTHON"))}


def _serve(cohort: str, tmp_path, env: dict, *overrides: str) -> tuple[subprocess.Popen, int | None, int | None]:
    """`cohort serve` on free ports: the process, its Kafka port and its HTTP port (None: not seen)."""
    args = [arg for o in overrides for arg in ("-o", o)]
    server = subprocess.Popen([cohort, "serve", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path / "d"),
                               *args], stdout=subprocess.PIPE, stderr=open(tmp_path / "server.log", "wb"), env=env,
                              cwd=tmp_path)
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
    return server, port, http


def test_no_extra_is_installed(venv):
    missing = subprocess.run([str(venv / "python"), "-c", "import importlib.util as u; print([m for m in "
                              "('pyspark', 'pandas', 'pytest', 'hypothesis', 'matplotlib', 'kafka') if u.find_spec(m)])"],
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
    env = _clean_env()
    server, port, http = _serve(cohort, tmp_path, env, "http.listener=127.0.0.1:0")
    try:
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



def subcommands() -> list[tuple[str, ...]]:
    """Every leaf of the `cohort` command tree, from the parser itself."""
    from cohort.cli import build_parser

    def walk(parser, prefix):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, (*prefix, name))
                return
        yield prefix

    return list(walk(build_parser(), ()))


def test_every_subcommand_has_help_in_a_plain_install(venv, tmp_path):
    for command in subcommands():
        shown = subprocess.run([str(venv / "cohort"), *command, "--help"], capture_output=True, text=True, timeout=60,
                               cwd=tmp_path)
        assert shown.returncode == 0 and shown.stdout.startswith("usage: cohort " + " ".join(command)), (command, shown.stderr)


def test_every_subcommand_runs_against_a_broker_from_a_plain_install(venv, tmp_path):
    """Each subcommand once against a live broker (ACLs on, the plain listener's user a super user,
    so acls and users run too): exit 0, or the one-line answer the case calls for; never a traceback."""
    cohort = str(venv / "cohort")
    env = _clean_env()
    server, port, _ = _serve(cohort, tmp_path, env, "http.listener=", "authorizer.class.name=cohort",
                             "super.users=User:ANONYMOUS", "transaction.max.timeout.ms=60000")
    try:
        assert port, (tmp_path / "server.log").read_text()
        b = ("--bootstrap-server", f"127.0.0.1:{port}")
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"topics": {"t0": {"partitions": 2}}, "members": {"C0": {"topics": ["t0"]}}}))
        (tmp_path / "pw").write_text("s3cret\n")
        ran: dict[tuple[str, ...], subprocess.CompletedProcess] = {}
        commands = set(subcommands())

        def run(*argv, input=None, code=0):
            command = tuple(argv[:2]) if tuple(argv[:2]) in commands else tuple(argv[:1])
            done = subprocess.run([cohort, *argv], capture_output=True, text=True, input=input, timeout=90, env=env,
                                  cwd=tmp_path)
            assert "Traceback" not in done.stderr, (argv, done.stderr)
            assert done.returncode == code, (argv, done.returncode, done.stdout, done.stderr)
            ran[command] = done
            return done

        run("assign", "--assignor", "uniform", str(spec))
        run("topics", "create", *b, "--topic", "p", "--partitions", "1")
        run("topics", "alter", *b, "--topic", "p", "--partitions", "2")
        run("topics", "list", *b)
        run("topics", "describe", *b, "--topic", "p")
        run("configs", "alter", *b, "--entity-type", "topics", "--entity-name", "p", "--add-config", "retention.ms=60000")
        run("configs", "describe", *b, "--entity-type", "topics", "--entity-name", "p")
        run("produce", *b, "--topic", "p", input="one\ntwo\n")
        assert run("consume", *b, "--topic", "p", "--group", "pg", "--from-beginning", "--max-messages", "2").stdout \
            in ("one\ntwo\n", "two\none\n")
        assert run("groups", "list", *b).stdout.split() == ["pg"]
        run("groups", "describe", *b, "--group", "pg", "--state")
        run("groups", "reset-offsets", *b, "--group", "pg", "--all-topics", "--to-earliest", "--execute")
        run("groups", "delete-offsets", *b, "--group", "pg", "--topic", "p")
        run("groups", "delete", *b, "--group", "pg")
        run("acls", "add", *b, "--allow-principal", "User:alice", "--operation", "Read", "--topic", "p")
        assert "User:alice" in run("acls", "list", *b).stdout
        run("acls", "remove", *b, "--allow-principal", "User:alice", "--operation", "Read", "--topic", "p")
        run("users", "add", *b, "--user", "alice", "--password-file", str(tmp_path / "pw"))
        assert "alice" in run("users", "list", *b).stdout
        run("users", "remove", *b, "--user", "alice")
        assert run("transactions", "list", *b).stdout.split() == ["TransactionalId", "Coordinator", "ProducerId",
                                                                   "TransactionState"]
        missing = run("transactions", "describe", *b, "--transactional-id", "nope", code=1)
        assert missing.stderr.startswith("cohort transactions describe: error: TRANSACTIONAL_ID_NOT_FOUND")
        assert run("transactions", "describe-producers", *b, "--topic", "p", "--partition", "0").stdout.split()[0] \
            == "ProducerId"
        none = run("transactions", "abort", *b, "--topic", "p", "--partition", "0", "--start-offset", "5", code=1)
        assert none.stderr == "cohort transactions abort: error: no open transaction starts at offset 5 of p-0\n"
        run("transactions", "find-hanging", *b)
        # a share group that does not exist yet may be given its start (KAFKA-19662)
        run("share-groups", "reset-offsets", *b, "--group", "sq", "--topic", "p", "--to-earliest", "--execute")
        assert run("share-groups", "list", *b).stdout.split() == ["GROUP", "sq"]
        assert run("share-groups", "describe", *b, "--group", "sq").stdout.splitlines()[1].split()[:4] == ["sq", "p", "0", "0"]
        run("share-groups", "delete-offsets", *b, "--group", "sq", "--topic", "p")
        run("share-groups", "delete", *b, "--group", "sq")
        # this broker fronts no cohort cluster: a one-line answer saying so
        alone = run("cluster", "describe", *b, code=1)
        assert alone.stderr == ("cohort cluster describe: error: no cohort cluster cohort on this upstream (no members "
                                "in group cohort-cohort, no topic __cohort_groups)\n")
        run("topics", "delete", *b, "--topic", "p")
        for job in ("simulate", "evaluate", "lag"):
            refused = run("pipeline", job, "--help")  # the parser works without pyspark ...
            argv = {"simulate": ("--groups", "2", "--out", str(tmp_path / "sim")),
                    "evaluate": ("--samples", str(tmp_path / "sim"), "--out", str(tmp_path / "ev")),
                    "lag": ("--bootstrap", f"127.0.0.1:{port}", "--once", "--out", str(tmp_path / "lag"))}[job]
            refused = run("pipeline", job, *argv, code=2)  # ... and a run names the extra it needs
            assert refused.stderr.count("\n") == 1 and "pip install 'cohort[pipeline]'" in refused.stderr, refused.stderr
        ran[("serve",)] = None  # it served every command above
        assert set(ran) == set(subcommands())
    finally:
        server.terminate()
        assert server.wait(30) == 0
