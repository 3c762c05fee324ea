"""Every API and version the broker advertises, fed generated requests: each gets an answer that
decodes, or a closed connection; none gets silence or a response that fails to encode."""

import logging
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from cohort.protocol.versions import request_schema as load_request_schema
from kio.static.primitive import Records

from cohort.protocol.versions import SUPPORTED
from cohort_fuzzing import PARKING_APIS
from cohort_testing import ServerThread, WireClient

PAIRS = [(k, v) for k, (_, lo, hi) in sorted(SUPPORTED.items()) for v in range(lo, hi + 1)]
st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with ServerThread(tmp_path_factory.mktemp("data"), {"max.partitions.per.topic": 8}) as srv:
        yield srv


@pytest.mark.parametrize("api_key,version", PAIRS)
def test_generated_requests_get_an_answer_that_decodes(server, api_key, version, caplog):
    caplog.set_level(logging.WARNING, "cohort")
    lo, hi = server.server.apis.advertised()[api_key]
    assert lo <= version <= hi
    schema = load_request_schema(api_key, version)

    @settings(max_examples=5, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(schema))
    def one(body):
        if getattr(body, "acks", None) == 0:
            return  # acks=0 produce has no answer by design
        with WireClient(server.port, timeout=3) as c:
            try:
                frame = c.encode(api_key, version, body)
            except (ValueError, OverflowError):
                return  # kio's strategies draw values its writer cannot encode (timedelta overflow)
            c.send_raw(frame)
            try:
                answer = c.recv_frame()
            except socket.timeout:
                assert api_key in PARKING_APIS, f"no answer to api {api_key} v{version}: {body!r}"[:2000]
                return
            if answer is not None:
                corr, _ = c.decode(api_key, version, answer)
                assert corr == c._corr

    one()
    bad = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not bad, bad[:3]
    assert "Traceback" not in caplog.text

