"""Produce and fetch throughput of `cohort serve` with confluent-kafka, 1 KiB records.

Starts the broker as a subprocess on a free port of 127.0.0.1 with a temporary data directory,
produces N records, then reads them all back with a manually assigned consumer. Reports MB/s
(1 MB = 10^6 bytes of record values) and records/s for each phase, and the rate of small
pipelined requests one connection gets, with the server's CPU time per request (a
load-independent figure: the machine is shared).

    .venv/bin/python bench/broker.py [--records 200000] [--partitions 1] [--acks all] [--compression none] [--idempotence] [--tls]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import confluent_kafka as ck

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers
from cohort_testing import ServerProcess  # noqa: E402

RECORD = 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc): a load-independent cost measure."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


SECURITY: dict = {}  # client settings for a TLS run (--tls)


def produce(bootstrap: str, topic: str, n: int, acks: str, compression: str, idempotence: bool = False) -> float:
    p = ck.Producer({
        **SECURITY, "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1_000_000,
        "enable.idempotence": idempotence,
        "compression.type": compression, "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
    })
    payload = os.urandom(RECORD // 2).hex().encode()
    start = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=payload)
                break
            except BufferError:
                p.poll(0.01)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    if left:
        raise SystemExit(f"{left} records not delivered")
    return elapsed


def consume(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    c = ck.Consumer({
        **SECURITY, "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
    })
    c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(10_000, 1.0):
            if m.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    c.close()
    if got < n:
        raise SystemExit(f"only {got} of {n} records read back")
    return elapsed


def request_rate(port: int, n: int, window: int = 64) -> float:
    """Small-request round trips per second on one connection: Metadata v12 asking for no
    topics (brokers and cluster id only, a request/response about the size of a heartbeat),
    pipelined ``window`` deep. Measures the server's per-request cost, framing and codec
    included."""
    from kio.schema.metadata.v12.request import MetadataRequest

    from cohort_testing import WireClient

    with WireClient(port) as c:
        frame = c.encode(3, 12, MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                include_topic_authorized_operations=False))
        start = time.perf_counter()
        sent = done = 0
        while done < n:
            burst = min(window - (sent - done), n - sent)
            if burst:
                c.send_raw(frame * burst)
                sent += burst
            c.recv_frame()
            done += 1
        return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--acks", default="all")
    ap.add_argument("--compression", default="none")
    ap.add_argument("--idempotence", action="store_true", help="an idempotent producer (sequence-checked batches)")
    ap.add_argument("--tls", action="store_true", help="produce and fetch over a TLS (SSL) listener")
    ap.add_argument("--requests", type=int, default=50_000, help="Metadata round trips for the request-rate phase")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cohort-bench-") as tmp:
        extra: tuple[str, ...] = ()
        if args.tls:
            from cohort.security.testcerts import make_pki

            pki = make_pki(os.path.join(tmp, "pki"))
            extra = ("listeners=PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", f"ssl.keystore.location={pki.server}")
            SECURITY.update({"security.protocol": "SSL", "ssl.ca.location": pki.ca})
        srv = ServerProcess(os.path.join(tmp, "data"), f"num.partitions={args.partitions}", *extra,
                            log_path=os.path.join(tmp, "server.log")).start()
        bootstrap = f"127.0.0.1:{srv.ports['SSL']}" if args.tls else srv.bootstrap
        try:
            mb = args.records * RECORD / 1e6
            pid = srv.proc.pid
            c0 = cpu_seconds(pid)
            t_p = produce(bootstrap, "bench", args.records, args.acks, args.compression, args.idempotence)
            c1 = cpu_seconds(pid)
            t_c = consume(bootstrap, "bench", args.partitions, args.records)
            c2 = cpu_seconds(pid)
            rate = request_rate(srv.port, args.requests)
            c3 = cpu_seconds(pid)
        finally:
            srv.stop()
    print(f"records={args.records} size={RECORD}B partitions={args.partitions} acks={args.acks} "
          f"compression={args.compression} idempotence={args.idempotence} tls={args.tls}")
    print(f"produce: {mb / t_p:8.1f} MB/s {args.records / t_p:10.0f} records/s ({t_p:.2f} s wall, server CPU {c1 - c0:.2f} s)")
    print(f"fetch:   {mb / t_c:8.1f} MB/s {args.records / t_c:10.0f} records/s ({t_c:.2f} s wall, server CPU {c2 - c1:.2f} s)")
    per_req = (c3 - c2) / args.requests * 1e6
    print(f"requests: {rate:8.0f} small Metadata requests/s on one connection (pipelined 64 deep); "
          f"server CPU {per_req:.0f} us/request = {1e6 / per_req:.0f} requests/s per core")


if __name__ == "__main__":
    main()
