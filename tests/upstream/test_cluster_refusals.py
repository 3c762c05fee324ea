"""What a cohort cluster refuses rather than serving half of itself: two instances given one
node id, and an instance given another shard count than the cluster's topic has. Each refusal is
the instance's exit (status 2) with one line naming the setting; the cluster keeps serving."""

from __future__ import annotations

import time
import uuid

import pytest

from cohort_testing import ServerProcess
from upstream_clients import coordinator_of

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

FAST = ("upstream.membership.session.timeout.ms=6000",)  # the upstream's minimum


def instance(path, upstream, cluster: str, *settings: str) -> ServerProcess:
    """Started with the flag form of the upstream's address."""
    path.mkdir(exist_ok=True)
    return ServerProcess(path / "data", f"upstream.cluster.name={cluster}", f"upstream.groups.topic=__{cluster}",
                         *FAST, *settings, log_path=str(path / "server.log"),
                         args=("--upstream", upstream.bootstrap)).start()


def wait_for(what: str, check, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def refusal(proc: ServerProcess, timeout: float = 60) -> str:
    """The exit status and last stderr line of an instance that must stop by itself."""
    assert proc.proc.wait(timeout) == 2
    lines = [line for line in open(proc.log_path, encoding="utf-8").read().splitlines() if line.startswith("cohort serve:")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_second_instance_with_a_set_node_id_already_held_refuses(tmp_path, upstream):
    cluster = f"dup{uuid.uuid4().hex[:6]}"
    a = instance(tmp_path / "a", upstream, cluster, "upstream.coordinator.node.id=1000007")
    b = None
    try:
        wait_for("a took no shards", lambda: coordinator_of(a.port, "g") == 1000007)
        b = instance(tmp_path / "b", upstream, cluster, "upstream.coordinator.node.id=1000007")
        line = refusal(b)
        assert f"another live instance of cohort cluster {cluster} (127.0.0.1:{a.port}) has coordinator node id " \
               "1000007" in line and "upstream.coordinator.node.id" in line
        assert coordinator_of(a.port, "g") == 1000007 and a.proc.poll() is None  # the first one kept serving
        # An instance with no id set next to it takes another one.
        c = instance(tmp_path / "c", upstream, cluster)
        try:
            wait_for("c did not join with its own node id",
                     lambda: {coordinator_of(a.port, f"g{i}") for i in range(30)} == {1000007, 1000000})
        finally:
            assert c.stop() == 0
    finally:
        if b is not None:
            b.stop()
        assert a.stop() == 0


def test_an_instance_given_another_shard_count_than_the_clusters_topic_refuses(tmp_path, upstream):
    cluster = f"count{uuid.uuid4().hex[:6]}"
    a = instance(tmp_path / "a", upstream, cluster, "offsets.topic.num.partitions=6")
    try:
        wait_for("a took no shards", lambda: coordinator_of(a.port, "g") == 1000000)
        # Unset: the existing topic's count is the cluster's (both place every group alike).
        b = instance(tmp_path / "b", upstream, cluster)
        try:
            groups = [f"g{i}" for i in range(30)]
            wait_for("b did not take a share of the six shards",
                     lambda: {coordinator_of(a.port, g) for g in groups} == {1000000, 1000001})
            assert [coordinator_of(a.port, g) for g in groups] == [coordinator_of(b.port, g) for g in groups]
        finally:
            assert b.stop() == 0
        c = instance(tmp_path / "c", upstream, cluster, "offsets.topic.num.partitions=12")
        line = refusal(c)
        assert line == (f"cohort serve: offsets.topic.num.partitions is 12 but the cohort cluster's shards are the 6 "
                        f"partitions of __{cluster} on the upstream: set it to 6 on every instance, or leave it unset")
        # a, unmoved by c, takes back the shards b held (b left before c came)
        wait_for("a did not serve every group again", lambda: {coordinator_of(a.port, g) for g in groups} == {1000000})
    finally:
        assert a.stop() == 0


def test_a_new_cluster_has_twelve_shards_by_default(tmp_path, upstream):
    cluster = f"twelve{uuid.uuid4().hex[:6]}"
    a = instance(tmp_path / "a", upstream, cluster)
    try:
        wait_for("a took no shards", lambda: coordinator_of(a.port, "g") == 1000000)
        from confluent_kafka.admin import AdminClient

        topic = f"__{cluster}"
        found = AdminClient({"bootstrap.servers": upstream.bootstrap}).list_topics(topic, timeout=20).topics[topic]
        assert len(found.partitions) == 12
    finally:
        assert a.stop() == 0
