"""Forwarding frames to an upstream broker: acks=0 is recognised without decoding, answers come
back in order, a lost upstream fails what waits on it; through a running proxy, ApiVersions is
the intersection with the upstream, and pipelined local and forwarded requests are answered in
order."""

from __future__ import annotations

import asyncio
import datetime
import socket
import struct
import time

import confluent_kafka as ck
import pytest
from kio.index import load_request_schema

from cohort.protocol.codec import decode_response, encode_request
from cohort.protocol.entities import build, nested
from cohort_testing import ServerProcess
from cohort.upstream.forward import BrokerConnection, UpstreamGone, produce_acks

pytestmark = pytest.mark.timeout(120)


def produce_frame(version: int, acks: int, transactional_id: str | None) -> bytes:
    cls = load_request_schema(0, version)
    part = build(nested(nested(cls, "topic_data"), "partition_data"), index=0, records=b"")
    data = build(nested(cls, "topic_data"), name="t", partition_data=(part,))
    body = build(cls, transactional_id=transactional_id, acks=acks, timeout=datetime.timedelta(seconds=1),
                 topic_data=(data,))
    return encode_request(0, version, 7, "a-client-id", body)[4:]


@pytest.mark.parametrize("version", range(3, 12))
@pytest.mark.parametrize("txn", [None, "", "a-transactional-id"])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_is_read_without_decoding(version, txn, acks):
    assert produce_acks(produce_frame(version, acks, txn), version) == acks


def test_answers_come_back_in_order_and_a_closed_upstream_fails_the_waiting():
    async def scenario():
        answered = []

        async def upstream(reader, writer):
            try:
                while True:
                    size = struct.unpack(">i", await reader.readexactly(4))[0]
                    frame = await reader.readexactly(size)
                    if frame == b"close":
                        writer.close()
                        return
                    answered.append(frame)
                    if frame.startswith(b"no-answer"):  # as a broker does not answer acks=0
                        continue
                    writer.write(struct.pack(">i", len(frame) + 1) + frame + b"!")
            except asyncio.IncompleteReadError:
                pass

        srv = await asyncio.start_server(upstream, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port)
        frames = [b"req-%d" % i for i in range(20)]
        got = await asyncio.gather(*(conn.request(f) for f in frames))
        assert got == [f + b"!" for f in frames]
        assert answered == frames
        assert await conn.request(b"no-answer", expect_answer=False) is None
        waiting = asyncio.ensure_future(conn.request(b"close"))
        with pytest.raises(UpstreamGone):
            await waiting
        with pytest.raises(UpstreamGone):
            await conn.request(b"two")
        srv.close()
        await srv.wait_closed()

    asyncio.run(scenario())


def test_an_unreachable_upstream_broker_is_upstream_gone():
    async def scenario():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with pytest.raises(UpstreamGone, match="cannot reach"):
            await BrokerConnection("127.0.0.1", port).request(b"")

    asyncio.run(scenario())


def _ask(sock, frames):
    sock.sendall(b"".join(frames))
    out = []
    for _ in frames:
        size = struct.unpack(">i", _recv(sock, 4))[0]
        out.append(_recv(sock, size))
    return out


def _recv(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def _until_coordinator(port, find, timeout=30):
    """Ask FindCoordinator until it names a coordinator (COORDINATOR_NOT_AVAILABLE until then)."""
    deadline = time.monotonic() + timeout
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        while True:
            _, found = decode_response(10, 3, _ask(sock, [encode_request(10, 3, 9, "t", find)])[0])
            if found.error_code == 0:
                return found
            assert found.error_code == 15 and time.monotonic() < deadline, found  # COORDINATOR_NOT_AVAILABLE
            time.sleep(0.1)


def test_a_proxy_offers_the_intersection_and_answers_pipelined_requests_in_order(tmp_path, upstream):
    proxy = ServerProcess(tmp_path / "data", f"upstream.bootstrap.servers={upstream.bootstrap}",
                          "upstream.groups.topic=__cohort_groups_forward", log_path=str(tmp_path / "proxy.log")).start()
    try:
        versions = build(load_request_schema(18, 3), client_software_name="t", client_software_version="1")
        metadata = build(load_request_schema(3, 12), topics=None, allow_auto_topic_creation=False,
                         include_topic_authorized_operations=False)
        find = build(load_request_schema(10, 3), key="some-group", key_type=0)
        _until_coordinator(proxy.port, find)  # the instance has joined its cohort cluster and took the shards
        frames = [encode_request(18, 3, 1, "t", versions), encode_request(3, 12, 2, "t", metadata),
                  encode_request(10, 3, 3, "t", find), encode_request(3, 12, 4, "t", metadata)]
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            answers = _ask(sock, frames)
        assert [struct.unpack_from(">i", a)[0] for a in answers] == [1, 2, 3, 4]  # in request order
        _, api = decode_response(18, 3, answers[0])
        ranges = {k.api_key: (k.min_version, k.max_version) for k in api.api_keys}
        assert ranges[0][1] == 9 and ranges[1][1] == 15  # NodeEndpoints versions are not offered
        assert 68 in ranges and 69 in ranges  # the group APIs are cohort's own
        _, md = decode_response(3, 12, answers[1])
        ports = {b.node_id: b.port for b in md.brokers}
        assert ports[1000000] == proxy.port  # the coordinator, under a node id of its own
        assert ports[1] != upstream.port and ports[1] != proxy.port  # the upstream broker, through cohort
        assert md.controller_id == 1
        _, coordinator = decode_response(10, 3, answers[2])
        assert (coordinator.node_id, coordinator.port) == (1000000, proxy.port)

        # Group configs are cohort's; topic configs the upstream's (a topic created through cohort).
        from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                           ResourceType)

        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic("configured", 1, config={"cleanup.policy": "compact"})])["configured"].result(20)
        group = ConfigResource(ResourceType.GROUP, "configured-group", incremental_configs=[
            ConfigEntry("consumer.heartbeat.interval.ms", "7000", incremental_operation=AlterConfigOpType.SET)])
        deadline = time.monotonic() + 30
        while True:  # the coordinator may still be loading its shards from the upstream
            try:
                admin.incremental_alter_configs([group])[group].result(20)
                break
            except ck.KafkaException as exc:
                assert exc.args[0].code() == ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline
                time.sleep(0.2)
        described = admin.describe_configs([ConfigResource(ResourceType.GROUP, "configured-group")])
        assert next(iter(described.values())).result(20)["consumer.heartbeat.interval.ms"].value == "7000"
        direct = AdminClient({"bootstrap.servers": upstream.bootstrap})
        on_upstream = direct.describe_configs([ConfigResource(ResourceType.GROUP, "configured-group")])
        assert next(iter(on_upstream.values())).result(20)["consumer.heartbeat.interval.ms"].value != "7000"
        topic = admin.describe_configs([ConfigResource(ResourceType.TOPIC, "configured")])
        assert next(iter(topic.values())).result(20)["cleanup.policy"].value == "compact"
    finally:
        assert proxy.stop() == 0


@pytest.mark.parametrize("setting, says", [
    ("upstream.security.protocol=SSL", "forwarded connections to the upstream are PLAINTEXT"),
    ("authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer", "ACLs are not enforced"),
])
def test_forwarding_refuses_to_start_where_it_would_weaken_security(tmp_path, setting, says):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "cohort.server", "serve", "--port", "0", "--data-dir",
                           str(tmp_path / "data"), "-o", "http.listener=", "-o", "upstream.bootstrap.servers=127.0.0.1:1",
                           "-o", setting], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_committed_offsets_are_mirrored_into_the_upstreams_group_offsets(tmp_path, upstream):
    proxy = ServerProcess(tmp_path / "data", f"upstream.bootstrap.servers={upstream.bootstrap}",
                          "upstream.groups.topic=__cohort_groups_mirror", "upstream.mirror.offsets=true",
                          log_path=str(tmp_path / "proxy.log")).start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic("mirrored", 2)])["mirrored"].result(20)
        c = ck.Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "mirrored-group"})
        deadline = time.monotonic() + 30
        while True:  # the coordinator may still be loading its shards from the upstream
            try:
                c.commit(offsets=[ck.TopicPartition("mirrored", 0, 7), ck.TopicPartition("mirrored", 1, 3)],
                         asynchronous=False)
                break
            except ck.KafkaException as exc:
                assert exc.args[0].code() == ck.KafkaError.COORDINATOR_LOAD_IN_PROGRESS and time.monotonic() < deadline
                time.sleep(0.2)
        c.close()
        direct = AdminClient({"bootstrap.servers": upstream.bootstrap})
        want = [ck.ConsumerGroupTopicPartitions("mirrored-group", [ck.TopicPartition("mirrored", 0),
                                                                   ck.TopicPartition("mirrored", 1)])]
        deadline = time.monotonic() + 20
        while True:
            got = direct.list_consumer_group_offsets(want)["mirrored-group"].result(20)
            found = {tp.partition: tp.offset for tp in got.topic_partitions}
            if found == {0: 7, 1: 3}:
                break
            assert time.monotonic() < deadline, f"the upstream has {found}"
            time.sleep(0.3)
    finally:
        assert proxy.stop() == 0


def test_a_produce_frame_cut_short_closes_the_connection_and_the_proxy_serves_on(tmp_path, upstream):
    proxy = ServerProcess(tmp_path / "data", f"upstream.bootstrap.servers={upstream.bootstrap}",
                          "upstream.groups.topic=__cohort_groups_bad", log_path=str(tmp_path / "proxy.log")).start()
    try:
        bad = produce_frame(9, -1, "a-transactional-id")[:14]  # the header, then not even acks
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            sock.sendall(struct.pack(">i", len(bad)) + bad)
            assert sock.recv(100) == b""  # closed, no answer
        versions = build(load_request_schema(18, 3), client_software_name="t", client_software_version="1")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            (answer,) = _ask(sock, [encode_request(18, 3, 9, "t", versions)])
        assert decode_response(18, 3, answer)[1].error_code == 0
    finally:
        assert proxy.stop() == 0


def test_a_transactional_producer_through_the_proxy_commits_on_the_upstream(tmp_path, upstream):
    """Transactions stay with the upstream: FindCoordinator for a transactional id names the
    upstream's transaction coordinator through a cohort port, and what commits is what a
    read_committed consumer reads, while an aborted transaction's records are never read."""
    proxy = ServerProcess(tmp_path / "data", f"upstream.bootstrap.servers={upstream.bootstrap}",
                          "upstream.groups.topic=__cohort_groups_txn", log_path=str(tmp_path / "proxy.log")).start()
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic("txn-through", 1)])["txn-through"].result(20)
        find = build(load_request_schema(10, 3), key="through-proxy", key_type=1)
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
            _, found = decode_response(10, 3, _ask(sock, [encode_request(10, 3, 1, "t", find)])[0])
        assert found.error_code == 0 and found.port not in (upstream.port, proxy.port)  # an upstream broker, via cohort
        p = ck.Producer({"bootstrap.servers": proxy.bootstrap, "transactional.id": "through-proxy"})
        p.init_transactions(30)
        p.begin_transaction()
        p.produce("txn-through", b"aborted")
        p.abort_transaction(30)
        p.begin_transaction()
        for i in range(5):
            p.produce("txn-through", b"committed-%d" % i)
        p.commit_transaction(30)
        c = ck.Consumer({"bootstrap.servers": proxy.bootstrap, "group.id": "txn-reader", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
        c.assign([ck.TopicPartition("txn-through", 0, ck.OFFSET_BEGINNING)])
        seen, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == ck.KafkaError._PARTITION_EOF:
                    break
                continue
            seen.append(m.value())
        c.close()
        assert seen == [b"committed-%d" % i for i in range(5)]
    finally:
        assert proxy.stop() == 0
