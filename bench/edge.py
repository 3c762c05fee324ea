"""The broker at its edge: slow and greedy clients, topic creation under load, and many
partitions with few file descriptors. Each case starts `cohort serve` as a subprocess on a free
port of 127.0.0.1 with a temporary data directory.

* **slowloris**: `--connections` connections each announce a 100 MB frame and send one byte
  every `--trickle-ms` for `--seconds`, while another client sends Metadata requests one after
  another; reports the server's peak RSS and the Metadata round trip (p50/p99/max).
  `--greedy` sends the announced bytes as fast as the broker takes them instead.
* **topics**: `--topics` CreateTopics requests one by one (one partition each) while another
  client sends Metadata requests; reports creates/s and the Metadata round trip.
* **partitions**: with the open-file limit at `--nofile`, creates `--partitions` partitions
  (topics of 5,000), produces to and fetches from `--probes` random partitions with
  confluent-kafka, restarts the broker and reads them again; reports times and RSS.

    .venv/bin/python bench/edge.py slowloris|topics|partitions [options]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers
from kio.index import load_request_schema  # noqa: E402

from cohort.protocol.entities import build, nested  # noqa: E402
from cohort_testing import ServerProcess, WireClient, rss_mb  # noqa: E402


def metadata_request(names):
    schema = load_request_schema(3, 12)
    topics = tuple(build(nested(schema, "topics"), name=n, topic_id=None) for n in names)
    return build(schema, topics=topics, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                 include_topic_authorized_operations=False)


class MetadataProbe(threading.Thread):
    """Metadata round trips one after another until stopped; keeps each latency."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.times: list[float] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        body = metadata_request(["__probe__"])
        with WireClient(self.port, timeout=60) as c:
            while not self.stop_event.is_set():
                t = time.perf_counter()
                c.request(3, 12, body)
                self.times.append(time.perf_counter() - t)
                time.sleep(0.002)

    def report(self) -> str:
        ts = sorted(self.times)
        if not ts:
            return "no Metadata answered"
        p99 = ts[min(len(ts) - 1, int(len(ts) * 0.99))]
        return (f"Metadata round trip over {len(ts):,} requests: p50 {statistics.median(ts) * 1000:.2f} ms, "
                f"p99 {p99 * 1000:.2f} ms, max {ts[-1] * 1000:.2f} ms")


def slowloris(args) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = args.log or os.path.join(tmp, "server.log")
        srv = ServerProcess(os.path.join(tmp, "data"), *args.setting, log_path=log).start()
        try:
            socks = []
            for _ in range(args.connections):
                s = socket.create_connection(("127.0.0.1", srv.port))
                s.setblocking(False)
                s.send(struct.pack(">i", 100_000_000) + b"\x00\x00\x00\x09")
                socks.append(s)
            probe = MetadataProbe(srv.port)
            probe.start()
            peak = rss_mb(srv.proc.pid)
            sent = 0
            end = time.monotonic() + args.seconds
            chunk = bytes(65536)
            while time.monotonic() < end:
                for s in socks:
                    try:
                        sent += s.send(chunk if args.greedy else b"\x00")
                    except (BlockingIOError, OSError):
                        pass
                peak = max(peak, rss_mb(srv.proc.pid))
                if not args.greedy:
                    time.sleep(args.trickle_ms / 1000)
            probe.stop_event.set()
            probe.join(30)
            print(f"{args.connections} connections announcing 100 MB frames, {'greedy' if args.greedy else 'trickling'}"
                  f" for {args.seconds:.0f} s ({sent / 1e6:,.1f} MB sent): broker RSS peak {peak:.0f} MB")
            print("  " + probe.report())
            for s in socks:
                s.close()
        finally:
            srv.stop()


def topics(args) -> None:
    schema = load_request_schema(19, 7)
    topic_cls = nested(schema, "topics")
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(os.path.join(tmp, "data"), *args.setting, log_path=os.path.join(tmp, "server.log")).start()
        try:
            probe = MetadataProbe(srv.port)
            probe.start()
            start = time.perf_counter()
            with WireClient(srv.port, timeout=120) as c:
                for i in range(args.topics):
                    body = build(schema, topics=(build(topic_cls, name=f"t{i:05d}", num_partitions=1, replication_factor=-1,
                                                       assignments=(), configs=()),),
                                 timeout=__import__("datetime").timedelta(seconds=30), validate_only=False)
                    r = c.request(19, 7, body)
                    assert r.topics[0].error_code == 0, r
            took = time.perf_counter() - start
            probe.stop_event.set()
            probe.join(30)
            print(f"{args.topics:,} CreateTopics one by one in {took:.1f} s ({args.topics / took:,.0f}/s)")
            print("  " + probe.report())
        finally:
            srv.stop()


def partitions(args) -> None:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, args.nofile))  # inherited by the broker
    per_topic = 5000
    names = [f"p{i:03d}" for i in range((args.partitions + per_topic - 1) // per_topic)]
    rng = random.Random(7)
    probes = [(rng.choice(names), rng.randrange(per_topic)) for _ in range(args.probes)]
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        log = os.path.join(tmp, "server.log")
        srv = ServerProcess(data, *args.setting, log_path=log).start()
        try:
            admin = AdminClient({"bootstrap.servers": srv.bootstrap})
            start = time.perf_counter()
            for name in names:
                admin.create_topics([NewTopic(name, per_topic, 1)], operation_timeout=600)[name].result(900)
            created = time.perf_counter() - start
            p = ck.Producer({"bootstrap.servers": srv.bootstrap, "linger.ms": 5})
            start = time.perf_counter()
            for topic, part in probes:
                p.produce(topic, value=b"%s-%d" % (topic.encode(), part), partition=part)
            assert p.flush(120) == 0
            produced = time.perf_counter() - start
            print(f"open-file limit {args.nofile}: {len(names) * per_topic:,} partitions created in {created:.0f} s; "
                  f"RSS {rss_mb(srv.proc.pid):.0f} MB; {args.probes} records to random partitions in {produced:.1f} s")
        finally:
            code = srv.stop(timeout=300)
        print(f"  clean stop: {code == 0}")
        start = time.perf_counter()
        srv = ServerProcess(data, *args.setting, log_path=log).start(timeout=900)
        started = time.perf_counter() - start
        try:
            c = ck.Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "edge", "enable.auto.commit": False})
            c.assign([ck.TopicPartition(t, part, ck.OFFSET_BEGINNING) for t, part in set(probes)])
            want = {b"%s-%d" % (t.encode(), part) for t, part in probes}
            seen: set[bytes] = set()
            deadline = time.monotonic() + 300
            t0 = time.perf_counter()
            while seen != want and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    seen.add(m.value())
            fetched = time.perf_counter() - t0
            c.close()
            print(f"  restarted in {started:.0f} s with RSS {rss_mb(srv.proc.pid):.0f} MB; fetched {len(seen)} of "
                  f"{len(want)} records back in {fetched:.1f} s")
        finally:
            srv.stop(timeout=300)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("case", choices=["slowloris", "topics", "partitions"])
    ap.add_argument("--connections", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--trickle-ms", type=float, default=100)
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--topics", type=int, default=3000)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--nofile", type=int, default=1024)
    ap.add_argument("--setting", action="append", default=[])
    ap.add_argument("--log", help="keep the broker's log here")
    args = ap.parse_args()
    {"slowloris": slowloris, "topics": topics, "partitions": partitions}[args.case](args)


if __name__ == "__main__":
    main()
