"""Share groups beside consumer and classic groups on the same topic, on several coordinator
shards (group coordinator and share coordinator both split in three)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from cohort.coordinator import partition_for
from cohort_testing import ServerThread

pytestmark = pytest.mark.e2e


def test_three_group_types_each_read_every_record(tmp_path):
    with ServerThread(str(tmp_path / "data"), {"offsets.topic.num.partitions": 3,
                                               "share.coordinator.state.topic.num.partitions": 3}) as srv:
        bootstrap = srv.bootstrap
        topic = f"mixed-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(topic, 3)]).values():
            f.result(20)
        share_groups = []  # one on each group coordinator shard
        while len(share_groups) < 3:
            candidate = f"share-{uuid.uuid4().hex[:6]}"
            if partition_for(candidate, 3) not in {partition_for(g, 3) for g in share_groups}:
                share_groups.append(candidate)
        for g in share_groups:
            res = ConfigResource(ResourceType.GROUP, g, incremental_configs=[
                ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
            for f in admin.incremental_alter_configs([res]).values():
                f.result(20)
        del admin
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        values = {b"v%d" % i for i in range(300)}
        for v in values:
            p.produce(topic, value=v)
        assert p.flush(20) == 0
        del p
        readers: dict[str, list] = {}
        for g in share_groups:
            readers[g] = [ShareConsumer({"bootstrap.servers": bootstrap, "group.id": g}) for _ in range(2)]
        for protocol in ("consumer", "classic"):
            readers[protocol] = [Consumer({"bootstrap.servers": bootstrap, "group.id": f"{protocol}-{uuid.uuid4().hex[:4]}",
                                           "group.protocol": protocol, "auto.offset.reset": "earliest"})
                                 for _ in range(2)]
        got: dict[str, list] = {name: [] for name in readers}
        try:
            for cs in readers.values():
                for c in cs:
                    c.subscribe([topic])
            deadline = time.monotonic() + 60
            while any(len(set(v)) < 300 for v in got.values()):
                assert time.monotonic() < deadline, {k: len(v) for k, v in got.items()}
                for name, cs in readers.items():
                    for c in cs:
                        if isinstance(c, ShareConsumer):
                            msgs = c.poll(0.1) or []
                        else:
                            msgs = c.consume(100, 0.1)
                        got[name] += [m.value() for m in msgs if m.error() is None]
            for name, seen in got.items():
                assert set(seen) == values, name
                if name.startswith("share-"):  # once each; the other groups may re-read across a rebalance
                    assert len(seen) == 300, name
            shards = {srv.call(lambda g=g: srv.server.group_coordinator.partition_of(
                srv.server.group_coordinator.runtime_for(g))) for g in share_groups}
            assert len(shards) == 3  # the share groups live on different group coordinator shards
            state = srv.call(lambda: [len({k.group_id for k in r.shard.state})
                                      for r in srv.server.share_partitions.runtimes])
            assert sum(1 for n in state if n) >= 2  # and their share-partitions on different state shards
        finally:
            for cs in readers.values():
                for c in cs:
                    c.close()
