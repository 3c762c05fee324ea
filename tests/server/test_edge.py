"""The server's edge: the frames that used to kill or hang it, connection and byte limits,
timeouts, and requests whose answer cannot be encoded."""

import logging
import socket
import struct
import threading
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from cohort_testing import ServerThread, WireClient
from rawreq import create_topics, metadata, req


def api_versions(c):
    return c.request(18, 3, req(18, 3, client_software_name="t", client_software_version="1"))


def raw(hexed):
    return bytes.fromhex(hexed)


@pytest.fixture
def server(tmp_path):
    with ServerThread(tmp_path / "data", {"num.partitions": 1}) as srv:
        yield srv


def test_the_issue_frames_are_answered_or_closed_and_the_server_serves_on(server, caplog):
    caplog.set_level(logging.WARNING, "cohort.server")
    # a 20-byte Metadata v12 with a topic count of 2**32-1 (aborted the process)
    with WireClient(server.port) as c:
        c.send_raw(raw("000000100003000c00000001ffff00ffffffff0f"))
        assert c.closed_by_server()
    # Metadata v10 looking a topic up by id (its answer could not be encoded: silence)
    with WireClient(server.port) as c:
        c.send_raw(raw("000000270003000a000000010005726570726f000258cedff9c7484f68aff992763df392ef000000000000"))
        frame = c.recv_frame()
        assert frame is not None
        _, resp = c.decode(3, 10, frame)
        assert resp.topics[0].error_code == ErrorCode.invalid_request
        assert resp.topics[0].topic_id == uuid.UUID("58cedff9-c748-4f68-aff9-92763df392ef")
    # ListOffsets v7 with topics=null: no traceback, the connection closes (no top-level error)
    with WireClient(server.port) as c:
        c.send_raw(raw("000000120002000700000001ffff00ffffffff000000"))
        assert c.closed_by_server()
    with WireClient(server.port) as c:
        assert api_versions(c).error_code == ErrorCode.none
    assert "Traceback" not in caplog.text
    closes = [r for r in caplog.records if "closing connection" in r.getMessage()]
    assert len(closes) == 2 and all(r.levelno == logging.WARNING and "\n" not in r.getMessage() for r in closes)


def test_a_null_in_a_request_with_a_top_level_error_is_invalid_request(server):
    # Heartbeat v3 whose group_id is null: INVALID_REQUEST, and the connection stays open
    with WireClient(server.port) as c:
        body = struct.pack(">h", -1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"m" + struct.pack(">h", -1)
        head = struct.pack(">hhih", 12, 3, 77, 1) + b"t"
        c.send_raw(struct.pack(">i", len(head + body)) + head + body)
        corr, resp = c.decode(12, 3, c.recv_frame())
        assert corr == 77 and resp.error_code == ErrorCode.invalid_request
        assert api_versions(c).error_code == ErrorCode.none


def test_a_response_that_cannot_be_encoded_is_answered_with_an_error_and_logged_once(server, caplog):
    caplog.set_level(logging.ERROR, "cohort.server")
    from cohort.protocol.entities import build

    def broken_heartbeat(ctx, request):  # a non-nullable field left null: a bug
        return build(request.codec.response_type, throttle_time=None, error_code=ErrorCode.none)

    def broken_metadata(ctx, request):
        return build(request.codec.response_type, brokers=(), topics=(), controller_id=None, cluster_id=None)

    server.call(lambda: server.server.apis.register(12, broken_heartbeat))
    server.call(lambda: server.server.apis.register(3, broken_metadata))
    with WireClient(server.port) as c:
        resp = c.request(12, 4, req(12, 4, group_id="g", generation_id=1, member_id="m", group_instance_id=None))
        assert resp.error_code == ErrorCode.unknown_server_error
        # Metadata v1 has no top-level error: the connection is closed, not left silent
        c.send_raw(c.encode(3, 1, metadata(1, names=["x"])))
        assert c.closed_by_server()
    assert len([r for r in caplog.records if "cannot encode" in r.getMessage()]) == 2


def test_connections_per_ip_and_overall(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "cohort.server")
    with ServerThread(tmp_path / "data", {"max.connections.per.ip": 3}) as srv:
        held = [WireClient(srv.port) for _ in range(3)]
        for c in held:
            assert api_versions(c).error_code == ErrorCode.none
        extra = WireClient(srv.port)
        assert extra.closed_by_server()
        extra.close()
        held.pop().close()
        time.sleep(0.2)
        with WireClient(srv.port) as c:  # a slot is free again
            assert api_versions(c).error_code == ErrorCode.none
        for c in held:
            c.close()
    assert "max.connections.per.ip (3) reached for 127.0.0.1" in caplog.text
    with ServerThread(tmp_path / "data2", {"max.connections": 2, "max.connections.per.ip.overrides": "127.0.0.1:50"}) as srv:
        held = [WireClient(srv.port) for _ in range(2)]
        for c in held:
            assert api_versions(c).error_code == ErrorCode.none
        extra = WireClient(srv.port)
        assert extra.closed_by_server()
        extra.close()
        for c in held:
            c.close()


def test_overrides_must_parse(tmp_path):
    from cohort.config import ConfigError

    with pytest.raises(ConfigError, match="expected host:count"):
        ServerThread(tmp_path / "data", {"max.connections.per.ip.overrides": "127.0.0.1"}).start()


def test_idle_connections_are_closed_busy_ones_are_not(tmp_path):
    with ServerThread(tmp_path / "data", {"connections.max.idle.ms": 300}) as srv:
        idle = WireClient(srv.port)
        busy = WireClient(srv.port)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert api_versions(busy).error_code == ErrorCode.none
            time.sleep(0.05)
        assert idle.closed_by_server(timeout=1)
        assert api_versions(busy).error_code == ErrorCode.none
        idle.close()
        busy.close()


def test_a_trickled_frame_is_cut_off_at_its_deadline(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "cohort.server")
    with ServerThread(tmp_path / "data", {"socket.request.read.timeout.ms": 400}) as srv:
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(struct.pack(">i", 100_000_000) + b"\x00\x03")  # promises 100 MB
        start = time.monotonic()
        closed = False
        while time.monotonic() - start < 3:
            try:
                s.sendall(b"\x00")
            except OSError:
                closed = True
                break
            s.settimeout(0.05)
            try:
                if s.recv(1) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
        s.close()
        assert closed and time.monotonic() - start < 2
        with WireClient(srv.port) as c:
            assert api_versions(c).error_code == ErrorCode.none
    assert "request frame not complete after 400 ms (socket.request.read.timeout.ms)" in caplog.text


def test_request_bytes_wait_for_room_under_queued_max_request_bytes(tmp_path):
    settings = {"queued.max.request.bytes": 200_000, "socket.request.read.timeout.ms": 1500}
    with ServerThread(tmp_path / "data", settings) as srv:
        hog = socket.create_connection(("127.0.0.1", srv.port))
        hog.sendall(struct.pack(">i", 1_000_000) + b"\x00\x03\x00\x01" + bytes(300_000))  # 300 KB of a 1 MB frame
        time.sleep(0.3)
        memory = srv.server._memory
        assert memory.full() and memory.used == 1_000_000  # the hog's frame holds its size (Kafka's pool)
        with WireClient(srv.port) as small, WireClient(srv.port) as large:
            # a small frame is counted but never waits: one client cannot stall everyone
            assert api_versions(small).error_code == ErrorCode.none
            big = large.encode(3, 12, metadata(12, names=[f"no-such-topic-{i:06d}" for i in range(4000)]))
            assert len(big) > 65536
            large.sock.settimeout(0.5)
            large.send_raw(big)
            with pytest.raises(socket.timeout):  # a large one waits for room rather than allocating
                large.sock.recv(1)
            large.sock.settimeout(5)
            frame = large.recv_frame()  # the hog's deadline frees the bytes; then it is answered
            assert frame is not None
            assert len(large.decode(3, 12, frame)[1].topics) == 4000
        hog.close()
        assert srv.call(lambda: memory.used) == 0


def test_topic_creation_limits(tmp_path):
    with ServerThread(tmp_path / "data", {"max.partitions.per.topic": 100, "max.broker.partitions": 150}) as srv:
        with WireClient(srv.port) as c:
            r = c.request(19, 7, create_topics(7, ("too-wide", 101)))
            assert r.topics[0].error_code == ErrorCode.invalid_partitions
            assert "max.partitions.per.topic (100)" in r.topics[0].error_message
            assert c.request(19, 7, create_topics(7, ("a", 100))).topics[0].error_code == ErrorCode.none
            r = c.request(19, 7, create_topics(7, ("b", 60)))  # 3 internal (offsets, transactions, share state) + 100 + 60 > 150
            assert r.topics[0].error_code == ErrorCode.policy_violation
            assert "max.broker.partitions (150)" in r.topics[0].error_message
            r = c.request(19, 7, create_topics(7, ("b", 47), validate_only=True))
            assert r.topics[0].error_code == ErrorCode.none
            names = {t.name for t in c.request(3, 12, metadata(12)).topics}
            assert "a" in names and "too-wide" not in names and "b" not in names


def test_other_clients_are_served_while_a_large_topic_is_created(tmp_path):
    with ServerThread(tmp_path / "data") as srv:
        done = threading.Event()
        worst = []

        def poll():
            with WireClient(srv.port) as c:
                while not done.is_set():
                    t = time.perf_counter()
                    c.request(3, 12, metadata(12, names=["__none__"]))
                    worst.append(time.perf_counter() - t)

        poller = threading.Thread(target=poll)
        poller.start()
        with WireClient(srv.port, timeout=60) as c:
            t = time.perf_counter()
            assert c.request(19, 7, create_topics(7, ("wide", 3000))).topics[0].error_code == ErrorCode.none
            took = time.perf_counter() - t
        done.set()
        poller.join()
        # the loop kept answering during the create: many round trips, none as long as it
        assert len(worst) > 20 and max(worst) < took / 4


def test_a_large_metadata_answer_is_built_off_the_loop_and_complete(server):
    with WireClient(server.port, timeout=60) as c:
        assert c.request(19, 7, create_topics(7, ("big-a", 1500), ("big-b", 1200))).topics[0].error_code == 0
        for version in (1, 9, 12):
            topics = {t.name: t for t in c.request(3, version, metadata(version)).topics}
            assert len(topics["big-a"].partitions) == 1500 and len(topics["big-b"].partitions) == 1200
            assert [p.partition_index for p in topics["big-b"].partitions] == list(range(1200))
        # a small answer is still built on the loop, and both agree
        one = c.request(3, 12, metadata(12, names=["big-a"])).topics[0]
        assert one.topic_id == topics["big-a"].topic_id and len(one.partitions) == 1500


def test_metadata_auto_creates_many_topics_off_the_loop(server):
    names = [f"auto-{i:03d}" for i in range(60)]
    with WireClient(server.port, timeout=60) as c:
        topics = c.request(3, 12, metadata(12, names=names + names[:3] + ["bad name!"], auto=True)).topics
        by_name = {t.name: t for t in topics}
        assert all(by_name[n].error_code == ErrorCode.none and len(by_name[n].partitions) == 1 for n in names)
        assert by_name["bad name!"].error_code == ErrorCode.invalid_topic_exception
        assert len(topics) == 64  # every requested entry answered, duplicates included
        assert all(n in server.server.broker.topics for n in names)
