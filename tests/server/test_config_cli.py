"""Settings registry, properties files, -o overrides and the `serve` command's errors."""

import argparse
import os
import subprocess
import sys

import pytest

from cohort.config import REGISTRY, Config, ConfigError, declare, parse_properties, render_markdown
from cohort.server.cli import add_parser, resolve_config

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def parse(argv):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="cmd"))
    return parser.parse_args(["serve", *argv])


def test_defaults():
    c = Config()
    assert (c["listener.host"], c["listener.port"], c["log.dir"], c["node.id"]) == ("127.0.0.1", 9092, "./data", 1)
    assert c["auto.create.topics.enable"] is True and c["num.partitions"] == 1
    assert c["socket.request.max.bytes"] == 104857600


def test_properties_file_then_overrides_then_flags(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("# comment\n! also a comment\nnum.partitions = 3\nauto.create.topics.enable=false\n"
                 "log.dir: /from/file\nlistener.port 1234\nsocket.request.max.bytes=\\\n  2048\n")
    c = resolve_config(parse(["--config", str(f), "-o", "num.partitions=5", "--data-dir", "/from/flag"]))
    assert c["num.partitions"] == 5 and c["auto.create.topics.enable"] is False
    assert c["log.dir"] == "/from/flag" and c["listener.port"] == 1234 and c["socket.request.max.bytes"] == 2048


def test_the_upstream_flag_is_upstream_bootstrap_servers():
    c = resolve_config(parse(["--upstream", "kafka-1:9092, kafka-2:9093", "-o", "upstream.bootstrap.servers=x:1"]))
    assert c["upstream.bootstrap.servers"] == "kafka-1:9092,kafka-2:9093"  # the flag wins, as the other flags do
    for bad in ("kafka-1", "kafka-1:port", ":9092", ",", "kafka:70000"):
        with pytest.raises(ConfigError, match="--upstream"):
            resolve_config(parse(["--upstream", bad]))


@pytest.mark.parametrize("override, message", [
    ("no.such.setting=1", "unknown setting 'no.such.setting'"),
    ("num.partitions=many", "num.partitions: expected an integer, got 'many'"),
    ("num.partitions=0", "num.partitions: must be >= 1, got 0"),
    ("listener.port=70000", "listener.port: must be <= 65535"),
    ("auto.create.topics.enable=yes", "expected true or false"),
    ("justakey", "not of the form key=value"),
])
def test_bad_overrides_give_one_line_errors(override, message):
    with pytest.raises(ConfigError) as exc:
        Config.load(None, [override])
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_bad_properties_file(tmp_path):
    f = tmp_path / "bad.properties"
    f.write_text("num.partitions=2\nmystery=1\n")
    with pytest.raises(ConfigError, match=r"unknown setting 'mystery' \(in .*bad.properties:2\)"):
        Config.load(str(f))
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config.load(str(tmp_path / "missing.properties"))
    with pytest.raises(ConfigError, match=":2: expected key=value"):
        parse_properties("a=1\n=oops\n")


def test_other_modules_can_declare_settings():
    try:
        declare("test.only.setting.ms", int, 45000, "A setting declared by a test.", minimum=1, group="test")
        declare("test.only.setting.ms", int, 45000, "A setting declared by a test.", minimum=1, group="test")  # idempotent
        with pytest.raises(ValueError):
            declare("test.only.setting.ms", int, 1, "different", group="test")
        assert Config.load(None, ["test.only.setting.ms=10"])["test.only.setting.ms"] == 10
        assert "`test.only.setting.ms`" in render_markdown()
    finally:
        REGISTRY.pop("test.only.setting.ms", None)


def test_docs_list_every_setting():
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        doc = f.read()
    assert doc == render_markdown(), "regenerate with: python -m cohort.config > docs/configuration.md"


def test_serve_rejects_bad_config_with_exit_code_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cohort.server", "serve", "--data-dir", str(tmp_path), "-o", "bogus=1"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "cohort serve: unknown setting 'bogus' (in -o); see docs/configuration.md"


def test_serve_reports_a_busy_data_dir(tmp_path):
    from cohort.broker import Broker

    b = Broker(Config({"log.dir": str(tmp_path)}))
    try:
        proc = subprocess.run([sys.executable, "-m", "cohort.server", "serve", "--port", "0", "--data-dir", str(tmp_path)],
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1
        assert proc.stderr.strip().splitlines()[-1].startswith("cohort serve: data directory")
    finally:
        b.close()


def test_serve_rejects_inconsistent_group_settings_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "cohort", "serve", "--port", "0", "--data-dir", str(tmp_path),
                           "-o", "group.consumer.heartbeat.interval.ms=99999999"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "group.consumer.heartbeat.interval.ms" in lines[0], proc.stderr


FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def test_properties_escapes_follow_java():
    text = ("a\\=b = \\u0041x\n"  # escaped separator in the key, \\uXXXX in the value
            "c\\:d: v\\\\\n"  # an even number of backslashes does not continue the line
            "e = 1\\\n   2\n"  # an odd number does
            "# comment = no\n! also\n"
            "f\n")
    assert parse_properties(text) == {"a=b": "Ax", "c:d": "v\\", "e": "12", "f": ""}
    with pytest.raises(ConfigError, match=r"<properties>:2: bad \\u escape"):
        parse_properties("a=1\nb=\\u12G4\n")


def test_kafkas_own_server_properties_load_with_the_unused_names_listed():
    c = Config.load(os.path.join(FIXTURES, "kafka4-server.properties"))
    assert c["log.dir"] == "/tmp/kraft-combined-logs" and c["node.id"] == 1
    assert c["log.retention.ms"] == 168 * 3600 * 1000 and c["log.segment.bytes"] == 1073741824
    assert c["listeners"] == "PLAINTEXT://:9092,CONTROLLER://:9093"
    assert {"process.roles", "num.io.threads", "controller.quorum.bootstrap.servers",
            "transaction.state.log.replication.factor"} <= set(c.unused)
    assert c.unused["process.roles"].endswith("kafka4-server.properties:3")  # after two comment lines
    from cohort.server import listeners

    (only,) = listeners.parse(c)  # the CONTROLLER listener is not opened
    assert (only.name, only.host, only.port, only.advertised_host) == ("PLAINTEXT", "", 9092, "localhost")


@pytest.mark.parametrize("text, message", [
    ("broker.id=3\nnode.id=4\n", r"broker.id \(3\) and node.id \(4\) differ"),
    ("log.dirs=/a,/b\n", "log.dirs: cohort keeps its data in one directory"),
    ("num.partitions=x\n", r"num.partitions: expected an integer, got 'x' \(in .*p.properties:1\)"),
    ("\n\nlog.retention.hours=soon\n", r"log.retention.hours: expected an integer.*p.properties:3"),
])
def test_kafka_synonyms_are_checked(tmp_path, text, message):
    f = tmp_path / "p.properties"
    f.write_text(text)
    with pytest.raises(ConfigError, match=message):
        Config.load(str(f))


def test_kafka_synonyms_resolve_as_kafka_does(tmp_path):
    f = tmp_path / "p.properties"
    f.write_text("broker.id=7\nlog.dirs=/only\nlog.retention.hours=2\nlog.retention.minutes=3\nlog.roll.hours=1\n")
    c = Config.load(str(f))
    assert (c["node.id"], c["log.dir"], c["log.retention.ms"], c["log.roll.ms"]) == (7, "/only", 180000, 3600000)
    f.write_text("log.retention.ms=5\nlog.retention.hours=2\n")
    assert Config.load(str(f))["log.retention.ms"] == 5  # ms wins over hours, as in Kafka


def test_environment_variables_in_container_form(tmp_path):
    f = tmp_path / "p.properties"
    f.write_text("num.partitions=2\nlog.retention.ms=10\n")
    env = {"KAFKA_NUM_PARTITIONS": "3", "COHORT_NUM_PARTITIONS": "4", "KAFKA_LOG_RETENTION_MS": "20",
           "KAFKA_HEAP_OPTS": "-Xmx1G", "KAFKA_PROCESS_ROLES": "broker", "KAFKA_SOMETHING_ELSE": "x",
           "KAFKA_LISTENER_NAME_INTERNAL_SSL_CLIENT_AUTH": "required", "PATH": "/bin"}
    c = Config.load(str(f), ["log.retention.ms=30"], env)
    # file < KAFKA_ < COHORT_ < -o
    assert (c["num.partitions"], c["log.retention.ms"]) == (4, 30)
    assert c["listener.name.internal.ssl.client.auth"] == "required"
    assert set(c.unused) == {"process.roles", "something.else"}  # KAFKA_HEAP_OPTS is the launcher's
    with pytest.raises(ConfigError, match=r"unknown setting 'no.such' \(in COHORT_NO_SUCH\)"):
        Config.load(None, [], {"COHORT_NO_SUCH": "1"})
    with pytest.raises(ConfigError, match=r"num.partitions: expected an integer, got 'x' \(in KAFKA_NUM_PARTITIONS\)"):
        Config.load(None, [], {"KAFKA_NUM_PARTITIONS": "x"})
    assert Config.load(None, [], {"COHORT_LOG_CLEANER_ENABLE": "false"})["log.cleaner.enable"] is False


def test_serve_starts_from_kafkas_server_properties_with_one_warning(tmp_path):
    """Kafka 4's own file, with its listener moved to a free loopback port."""
    from cohort_testing import ServerProcess

    data = tmp_path / "data"
    data.mkdir()
    log_path = tmp_path / "server.log"
    srv = ServerProcess(str(data), "listeners=PLAINTEXT://127.0.0.1:0", "advertised.listeners=", log_path=str(log_path),
                        args=("--config", os.path.join(FIXTURES, "kafka4-server.properties")))
    srv.start()
    try:
        assert list(srv.ports) == ["PLAINTEXT"]
    finally:
        assert srv.stop() == 0
    warnings = [line for line in log_path.read_text().splitlines() if "WARNING" in line]
    assert len(warnings) == 1, warnings
    assert "not used by cohort" in warnings[0] and "process.roles (" in warnings[0]
