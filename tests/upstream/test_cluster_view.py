"""Which instance owns which shard, as operators see it: `cohort cluster describe` (read on the
upstream), each instance's /api/cluster and its /metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cohort_testing import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]


def instance(path, upstream, cluster: str) -> ServerProcess:
    path.mkdir(exist_ok=True)
    return ServerProcess(path / "data", f"upstream.bootstrap.servers={upstream.bootstrap}",
                         f"upstream.cluster.name={cluster}", f"upstream.groups.topic=__{cluster}",
                         "upstream.membership.session.timeout.ms=6000", "http.listener=127.0.0.1:0",
                         log_path=str(path / "server.log")).start()


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cohort", *args], capture_output=True, text=True, timeout=60)


def get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def test_every_view_names_the_same_owner_for_every_shard(tmp_path, upstream):
    cluster = f"view{uuid.uuid4().hex[:6]}"
    a = instance(tmp_path / "a", upstream, cluster)
    b = instance(tmp_path / "b", upstream, cluster)
    try:
        args = ("cluster", "describe", "--bootstrap-server", upstream.bootstrap, "--cluster-name", cluster,
                "--groups-topic", f"__{cluster}", "--output", "json")
        deadline = time.monotonic() + 60
        while True:
            done = cli(*args)
            assert done.returncode == 0, done.stderr
            found = json.loads(done.stdout)
            if len(found["instances"]) == 2 and not found["unowned"] and all(i["shards"] for i in found["instances"]):
                break
            assert time.monotonic() < deadline, found
            time.sleep(0.5)
        assert found["shards"] == 12
        owners = {s: i["node_id"] for i in found["instances"] for s in i["shards"]}
        assert sorted(owners) == list(range(12))
        assert {i["endpoint"] for i in found["instances"]} == {f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"}
        assert all(not i["node_id_set"] and len(i["instance_id"]) == 32 for i in found["instances"])

        for proc in (a, b):  # each instance says the same (once it has read the group again)
            deadline = time.monotonic() + 30
            while True:
                seen = json.loads(get(proc.http_port, "/api/cluster"))
                if {s: i["node_id"] for i in seen["instances"] for s in i["shards"]} == owners:
                    break
                assert time.monotonic() < deadline, seen
                time.sleep(0.5)
            assert seen["upstream"] and seen["name"] == cluster and seen["shards"] == 12
            assert [i["this"] for i in seen["instances"]].count(True) == 1
            me = next(i for i in seen["instances"] if i["this"])
            assert me["port"] == proc.port and seen["node_id"] == me["node_id"]
            samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                       for f in text_string_to_metric_families(get(proc.http_port, "/metrics")) for s in f.samples}
            assert samples[("cohort_cluster_node_id", ())] == me["node_id"]
            assert samples[("cohort_cluster_instances", ())] == 2
            shown = {int(dict(labels)["shard"]): (int(dict(labels)["node_id"]), dict(labels)["endpoint"])
                     for (name, labels), v in samples.items() if name == "cohort_cluster_shard_owner" and v == 1}
            endpoints = {i["node_id"]: i["endpoint"] for i in found["instances"]}
            assert shown == {shard: (node, endpoints[node]) for shard, node in owners.items()}

        table = cli(*args[:-2])
        assert table.returncode == 0 and table.stdout.splitlines()[0].split() == \
            ["NODE-ID", "ENDPOINT", "SHARDS", "NODE-ID-IS", "INSTANCE"]
    finally:
        assert b.stop() == 0
        assert a.stop() == 0


def test_describing_a_cluster_that_is_not_there_is_a_one_line_error(upstream):
    done = cli("cluster", "describe", "--bootstrap-server", upstream.bootstrap, "--cluster-name", "nowhere",
               "--groups-topic", "__nowhere")
    assert done.returncode == 1
    assert done.stderr.strip() == ("cohort cluster describe: error: no cohort cluster nowhere on this upstream "
                                   "(no members in group cohort-nowhere, no topic __nowhere)")
    done = cli("cluster", "describe", "--bootstrap-server", "127.0.0.1:1", "--timeout", "2")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and done.stderr.startswith("cohort cluster describe: error: ")
