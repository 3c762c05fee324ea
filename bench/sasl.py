"""SASL authentications per second: connections that each run a whole SCRAM exchange
(SaslHandshake v1, two SaslAuthenticate rounds, the client checking the server's signature) and
close, one after another, against `cohort serve` with a SASL_PLAINTEXT listener. Reports the
rate and the broker's CPU time per authentication.

    .venv/bin/python bench/sasl.py [--auths 300] [--mechanism SCRAM-SHA-512] [--iterations 4096]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import scramp

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers
from cohort.protocol.entities import build  # noqa: E402
from cohort.security import credentials  # noqa: E402
from cohort_testing import ServerProcess, WireClient  # noqa: E402
from kio.index import load_request_schema  # noqa: E402


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def add_user(port: int, mechanism: str, iterations: int) -> None:
    salt = os.urandom(16)
    schema = load_request_schema(51, 0)
    from cohort.protocol.entities import nested

    up = build(nested(schema, "upsertions"), name="bench", mechanism=credentials.MECHANISM_IDS[mechanism],
               iterations=iterations, salt=salt,
               salted_password=credentials.salted_password(mechanism, "bench-secret", salt, iterations))
    with WireClient(port) as c:
        r = c.request(51, 0, build(schema, deletions=(), upsertions=(up,)))
        assert r.results[0].error_code == 0, r


def authenticate(port: int, mechanism: str) -> None:
    handshake = load_request_schema(17, 1)
    auth = load_request_schema(36, 2)
    client = scramp.ScramClient([mechanism], "bench", "bench-secret")
    with WireClient(port) as c:
        assert c.request(17, 1, build(handshake, mechanism=mechanism)).error_code == 0
        first = c.request(36, 2, build(auth, auth_bytes=client.get_client_first().encode()))
        assert first.error_code == 0, first.error_message
        client.set_server_first(first.auth_bytes.decode())
        final = c.request(36, 2, build(auth, auth_bytes=client.get_client_final().encode()))
        assert final.error_code == 0, final.error_message
        client.set_server_final(final.auth_bytes.decode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--auths", type=int, default=300)
    ap.add_argument("--mechanism", default="SCRAM-SHA-512", choices=("SCRAM-SHA-256", "SCRAM-SHA-512"))
    ap.add_argument("--iterations", type=int, default=4096)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cohort-bench-") as tmp:
        srv = ServerProcess(os.path.join(tmp, "data"), "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                            log_path=os.path.join(tmp, "server.log")).start()
        try:
            add_user(srv.ports["PLAINTEXT"], args.mechanism, args.iterations)
            port = srv.ports["SASL_PLAINTEXT"]
            authenticate(port, args.mechanism)  # warm up
            c0 = cpu_seconds(srv.proc.pid)
            start = time.perf_counter()
            for _ in range(args.auths):
                authenticate(port, args.mechanism)
            elapsed = time.perf_counter() - start
            cpu = cpu_seconds(srv.proc.pid) - c0
        finally:
            srv.stop()
    print(f"{args.mechanism} (stored with {args.iterations} iterations): {args.auths / elapsed:.0f} authentications/s "
          f"on one connection after another; broker CPU {cpu / args.auths * 1e3:.2f} ms per authentication")


if __name__ == "__main__":
    main()
