"""A connection's answers over a real socket: request order whatever order handlers finish in,
read-ahead bounded by queued.max.requests, and a connection closed after the answers before
one that cannot be given."""

import asyncio
import socket
import struct
import time

import pytest
from kio.schema.errors import ErrorCode

from cohort.protocol.entities import build
from cohort.server.api import CLOSE_WITHOUT_ANSWER
from cohort_testing import ServerThread, WireClient
from rawreq import ms, req

HEARTBEAT = 12
LIMIT = 3


@pytest.fixture
def slow_server(tmp_path):
    """A core broker whose Heartbeat handler waits for the test to release each request."""
    srv = ServerThread(tmp_path / "data", {"queued.max.requests": LIMIT}, plugins=())
    srv.start()
    srv.calls = []  # (group id, the event that releases it), in the order the handler ran
    srv.behaviour = {}  # group id -> what the handler returns once released

    async def heartbeat(ctx, request):
        release = asyncio.Event()
        srv.calls.append((request.body.group_id, release))
        await release.wait()
        answer = srv.behaviour.get(request.body.group_id)
        if answer is not None:
            return answer
        return build(request.codec.response_type, throttle_time=ms(0), error_code=ErrorCode.none)

    srv.call(lambda: srv.server.apis.register(HEARTBEAT, heartbeat, min_version=0, max_version=4))
    yield srv
    srv.stop()


def _heartbeat(c: WireClient, group: str, correlation_id: int) -> bytes:
    return c.encode(HEARTBEAT, 4, req(HEARTBEAT, 4, group_id=group, generation_id=1, member_id="m",
                                      group_instance_id=None), correlation_id=correlation_id)


def _wait_for(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def _release(srv: ServerThread, groups) -> None:
    def go() -> None:
        for group, event in srv.calls:
            if group in groups:
                event.set()
    srv.call(go)


def test_read_ahead_stops_at_queued_max_requests_and_answers_leave_in_request_order(slow_server):
    srv = slow_server
    with WireClient(srv.port) as c:
        c.send_raw(b"".join(_heartbeat(c, f"g{i}", 100 + i) for i in range(10)))
        _wait_for(lambda: len(srv.calls) == LIMIT)
        time.sleep(0.3)
        assert len(srv.calls) == LIMIT  # the server stopped reading: LIMIT answers are unwritten
        # The later ones finish first: nothing leaves, and the reader still waits.
        _release(srv, {"g1", "g2"})
        time.sleep(0.3)
        assert len(srv.calls) == LIMIT
        c.sock.settimeout(0.2)
        with pytest.raises(socket.timeout):
            c.recv_frame()
        c.sock.settimeout(10)
        # The first one finishes: all three leave, in order, and reading resumes.
        _release(srv, {"g0"})
        assert [struct.unpack_from(">i", c.recv_frame())[0] for _ in range(LIMIT)] == [100, 101, 102]
        rest, deadline = [], time.monotonic() + 10
        c.sock.settimeout(0.1)
        while len(rest) < 7 and time.monotonic() < deadline:
            _release(srv, {g for g, _ in srv.calls})  # whatever the reader took on since
            try:
                rest.append(struct.unpack_from(">i", c.recv_frame())[0])
            except socket.timeout:
                pass
        assert rest == list(range(103, 110))
        assert [g for g, _ in srv.calls] == [f"g{i}" for i in range(10)]


def test_an_answer_that_cannot_be_given_closes_the_connection_after_the_earlier_ones(slow_server):
    srv = slow_server
    srv.behaviour["bad"] = CLOSE_WITHOUT_ANSWER
    with WireClient(srv.port) as c:
        c.send_raw(_heartbeat(c, "first", 1) + _heartbeat(c, "bad", 2))
        _wait_for(lambda: len(srv.calls) == 2)
        _release(srv, {"bad"})
        time.sleep(0.2)
        _release(srv, {"first"})
        corr, body = c.decode(HEARTBEAT, 4, c.recv_frame())
        assert corr == 1 and body.error_code == ErrorCode.none
        c.sock.settimeout(5)
        assert c.sock.recv(1) == b""  # closed, nothing more answered
