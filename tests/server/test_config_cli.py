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
    with pytest.raises(ConfigError, match=r"unknown setting 'mystery' \(in .*bad.properties\)"):
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
