"""Mutated real-client frames against `cohort serve` for about a minute: no crash, no hang, no
traceback, no unanswered request, and the data and groups are intact afterwards.

The seed is drawn per run and printed, so a failure can be replayed with COHORT_FUZZ_SEED;
COHORT_FUZZ_SECONDS sets the length (60 by default)."""

import asyncio
import os
import random

import pytest

from cohort_fuzzing import fuzz, group_still_works, load_corpus, produce_canary, read_canary
from cohort_testing import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]

CORPUS = os.path.join(os.path.dirname(__file__), "..", "protocol", "corpus", "client-frames.bin")
# Creating thousands of partitions per mutated CreateTopics would only make the run slow.
LIMITS = ("max.partitions.per.topic=64", "max.broker.partitions=20000")


def test_fuzzed_frames_leave_the_broker_serving_and_the_data_intact(tmp_path):
    seed = int(os.environ.get("COHORT_FUZZ_SEED", random.randrange(1 << 30)))
    seconds = float(os.environ.get("COHORT_FUZZ_SECONDS", 60))
    print(f"fuzz seed {seed}")
    log = tmp_path / "server.log"
    srv = ServerProcess(tmp_path / "data", *LIMITS, log_path=str(log)).start()
    try:
        produce_canary(srv.bootstrap)
        tally = asyncio.run(fuzz("127.0.0.1", srv.port, load_corpus(CORPUS), seed=seed, seconds=seconds,
                                 answer_timeout=5))
        print(tally)
        assert srv.proc.poll() is None, "the broker died"
        assert tally.unanswered == 0, f"hangs (seed {seed}): {tally.hang_samples}"
        assert tally.misordered == 0
        assert tally.frames > 20 * seconds and tally.answered > 0 and tally.closed > 0
        assert read_canary(srv.bootstrap) == {b"canary %d" % i for i in range(1000)}
        assert group_still_works(srv.bootstrap)
    finally:
        assert srv.stop() == 0
    text = log.read_text(errors="replace")
    assert "Traceback" not in text, f"seed {seed}: a traceback in {log}"
    again = ServerProcess(tmp_path / "data", *LIMITS, log_path=str(log)).start()
    try:
        assert read_canary(again.bootstrap) == {b"canary %d" % i for i in range(1000)}
    finally:
        assert again.stop() == 0


def test_fuzzed_frames_on_tls_and_sasl_listeners(tmp_path):
    """The same mutated frames against a SASL_SSL listener (before authentication only the
    handshake APIs are served, so most frames close their connection) and a SASL_PLAINTEXT one:
    nothing crashes, hangs or leaves a traceback, and the PLAINTEXT listener keeps serving."""
    import ssl

    from cohort.security.testcerts import make_pki

    seed = int(os.environ.get("COHORT_FUZZ_SEED", random.randrange(1 << 30)))
    seconds = float(os.environ.get("COHORT_FUZZ_SECONDS", 60)) / 4
    print(f"fuzz seed {seed}")
    pki = make_pki(str(tmp_path / "pki"))
    log = tmp_path / "server.log"
    srv = ServerProcess(tmp_path / "data", *LIMITS,
                        "listeners=PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                        f"ssl.keystore.location={pki.server}", log_path=str(log)).start()
    try:
        produce_canary(srv.bootstrap)
        client_tls = ssl.create_default_context(cafile=pki.ca)
        # Handshake and authenticate frames weigh most, so mutated exchanges get past the first request.
        seeds = sasl_frames() * 20 + load_corpus(CORPUS)
        for listener, context in (("SASL_SSL", client_tls), ("SASL_PLAINTEXT", None)):
            tally = asyncio.run(fuzz("127.0.0.1", srv.ports[listener], seeds, seed=seed, seconds=seconds,
                                     answer_timeout=5, ssl=context))
            print(listener, tally)
            assert srv.proc.poll() is None, "the broker died"
            assert tally.unanswered == 0, f"hangs on {listener} (seed {seed}): {tally.hang_samples}"
            assert tally.misordered == 0 and tally.frames > 5 * seconds and tally.closed > 0
        assert read_canary(srv.bootstrap) == {b"canary %d" % i for i in range(1000)}
    finally:
        assert srv.stop() == 0
    assert "Traceback" not in log.read_text(errors="replace"), f"seed {seed}: a traceback in {log}"


def sasl_frames() -> list[bytes]:
    """ApiVersions, SaslHandshake (v0 and v1, PLAIN and SCRAM) and SaslAuthenticate frames (no
    size prefix), as a client's first requests on a SASL listener."""
    from kio.index import load_request_schema

    from cohort.protocol.codec import encode_request
    from cohort.protocol.entities import build

    frames = [encode_request(18, 3, 1, "fuzz", build(load_request_schema(18, 3), client_software_name="fuzz",
                                                      client_software_version="1"))]
    for version in (0, 1):
        for mechanism in ("PLAIN", "SCRAM-SHA-512"):
            frames.append(encode_request(17, version, 2, "fuzz", build(load_request_schema(17, version), mechanism=mechanism)))
    for version in (0, 1, 2):
        for token in (b"\0alice\0secret", b"n,,n=alice,r=0123456789abcdef"):
            frames.append(encode_request(36, version, 3, "fuzz", build(load_request_schema(36, version), auth_bytes=token)))
    return [f[4:] for f in frames]
