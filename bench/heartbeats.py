"""ConsumerGroupHeartbeat rate and latency of `cohort serve`, and the time a real consumer takes
to join a large group.

Starts the broker as a subprocess on a free port of 127.0.0.1 with a temporary data directory.

* **rate**: `--members` members (groups of `--group-size`) join and reconcile, then each
  connection pipelines steady-state heartbeats (a window of `--window` requests in flight) for
  `--seconds`. Reports heartbeats/s and the server's CPU time per heartbeat (load-independent:
  the machine is shared and the client runs on it too).
* **latency**: `--latency-members` members spread over `--connections` connections send
  heartbeats at `--rate` per second in total (each member every members/rate seconds, as with
  a 5 s heartbeat interval); reports p50/p99/max from send to response.
* **join**: `--consumers` confluent-kafka consumers (group.protocol=consumer) own a topic of
  `--partitions` partitions; one more joins. Reports the time from its subscribe until the
  group is Stable with the new target assignment reconciled, in heartbeat intervals.

    .venv/bin/python bench/heartbeats.py [--only rate|latency|join] [--shards N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import gc
import io
import os
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers
from kio.index import load_request_schema, load_response_schema  # noqa: E402
from kio.serial import entity_reader, entity_writer  # noqa: E402

from cohort.protocol.entities import build, nested  # noqa: E402
from cohort_testing import ServerProcess, WireClient  # noqa: E402

HB = 68
HB_REQ = load_request_schema(HB, 1)
HB_RESP = load_response_schema(HB, 1)
READ_HB = entity_reader(HB_RESP)
WRITE_HB = entity_writer(HB_REQ)
WRITE_HDR = entity_writer(HB_REQ.__header_schema__)
TP = nested(HB_REQ, "topic_partitions")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ms(n: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=n)


class Member:
    __slots__ = ("group", "member_id", "epoch", "owned")

    def __init__(self, group: str, member_id: str) -> None:
        self.group, self.member_id, self.epoch, self.owned = group, member_id, 0, {}

    def request(self, correlation_id: int, join: bool = False) -> bytes:
        body = HB_REQ(
            group_id=self.group, member_id=self.member_id, member_epoch=self.epoch, instance_id=None, rack_id=None,
            rebalance_timeout=ms(30_000 if join else -1), subscribed_topic_names=("bench",) if join else None,
            subscribed_topic_regex=None, server_assignor=None,
            topic_partitions=tuple(TP(topic_id=t, partitions=p) for t, p in self.owned.items()))
        buf = io.BytesIO()
        WRITE_HDR(buf, HB_REQ.__header_schema__(request_api_key=HB, request_api_version=1,
                                                  correlation_id=correlation_id, client_id="bench"))
        WRITE_HB(buf, body)
        payload = buf.getvalue()
        return struct.pack(">i", len(payload)) + payload

    def update(self, resp) -> bool:
        """Apply a response; True if the member's epoch or assignment changed."""
        if resp.error_code != 0:
            raise SystemExit(f"heartbeat of {self.member_id} failed: {resp.error_code!r} {resp.error_message}")
        changed = resp.member_epoch != self.epoch
        self.epoch = resp.member_epoch
        if resp.assignment is not None:
            owned = {tp.topic_id: tuple(tp.partitions) for tp in resp.assignment.topic_partitions}
            changed = changed or owned != self.owned
            self.owned = owned
        return changed


def decode(frame: bytes):
    corr = struct.unpack_from(">i", frame, 0)[0]
    body, _ = READ_HB(frame, 5)  # response header v1: correlation id + empty tagged fields
    return corr, body


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def round_trip_all(conns, members_by_conn, join: bool = False) -> int:
    """One heartbeat per member (pipelined per connection); returns how many members changed."""

    async def one(conn, members):
        reader, writer = conn
        writer.write(b"".join(m.request(i, join) for i, m in enumerate(members)))
        changed = 0
        for i, m in enumerate(members):
            corr, resp = decode(await read_frame(reader))
            assert corr == i
            changed += m.update(resp)
        return changed

    return sum(await asyncio.gather(*(one(c, ms_) for c, ms_ in zip(conns, members_by_conn))))


async def settle(port: int, members: list[Member], connections: int):
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(connections)]
    by_conn = [members[i::connections] for i in range(connections)]
    await round_trip_all(conns, by_conn, join=True)
    rounds = 1
    while await round_trip_all(conns, by_conn):
        rounds += 1
    return conns, by_conn, rounds


def setup(srv: ServerProcess, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    admin.create_topics([NewTopic("bench", num_partitions=partitions, replication_factor=1)])["bench"].result(30)
    deadline = time.monotonic() + 30
    while True:  # wait until the coordinator has loaded and sees the topic
        with WireClient(srv.port) as c:
            probe = Member("probe", "probe-member")
            c.send_raw(probe.request(1, join=True))
            _, resp = decode(c.recv_frame())
        if resp.error_code == 0 and resp.assignment and resp.assignment.topic_partitions:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"coordinator not ready: {resp}")
        time.sleep(0.1)


# --- rate ---------------------------------------------------------------------------------------


async def rate_phase(srv: ServerProcess, args) -> None:
    members = [Member(f"g{i // args.group_size}", f"member-{i:06d}") for i in range(args.members)]
    t0 = time.perf_counter()
    conns, by_conn, rounds = await settle(srv.port, members, args.rate_connections)
    print(f"rate: {len(members)} members in groups of {args.group_size} joined and reconciled in "
          f"{time.perf_counter() - t0:.1f} s ({rounds} rounds)")
    frames = [[m.request(i) for i, m in enumerate(ms_)] for ms_ in by_conn]
    stop = time.perf_counter() + args.seconds
    counts = [0] * len(conns)

    async def pump(idx: int) -> None:
        """Keep `window` requests in flight; responses are counted by their size prefixes only
        (one in 1000 is decoded and checked), so the client costs little per heartbeat."""
        reader, writer = conns[idx]
        mine = frames[idx]
        n = len(mine)
        writer.write(b"".join(mine[i % n] for i in range(args.window)))
        sent, received, buf = args.window, 0, b""
        checked = 0
        while True:
            buf += await reader.read(1 << 20)
            pos, got = 0, 0
            while len(buf) - pos >= 4:
                size = struct.unpack_from(">i", buf, pos)[0]
                if len(buf) - pos - 4 < size:
                    break
                if received + got >= checked:
                    _, resp = decode(buf[pos + 4:pos + 4 + size])
                    assert resp.error_code == 0 and resp.assignment is None, resp
                    checked += 1000
                pos += 4 + size
                got += 1
            buf = buf[pos:]
            received += got
            if time.perf_counter() < stop:
                writer.write(b"".join(mine[(sent + i) % n] for i in range(got)))
                sent += got
            elif received == sent:
                counts[idx] = received
                return

    cpu0 = cpu_seconds(srv.proc.pid)
    t0 = time.perf_counter()
    await asyncio.gather(*(pump(i) for i in range(len(conns))))
    wall = time.perf_counter() - t0
    cpu = cpu_seconds(srv.proc.pid) - cpu0
    total = sum(counts)
    print(f"rate: {total} steady heartbeats over {len(conns)} connections (window {args.window}) in {wall:.2f} s: "
          f"{total / wall:,.0f}/s wall; server CPU {cpu:.2f} s = {cpu / total * 1e6:.1f} us/heartbeat "
          f"(~{total / cpu:,.0f}/s per server core)")
    for _, w in conns:
        w.close()


# --- latency ------------------------------------------------------------------------------------


async def latency_phase(srv: ServerProcess, args) -> None:
    members = [Member(f"lat{i // args.group_size}", f"lat-{i:06d}") for i in range(args.latency_members)]
    t0 = time.perf_counter()
    conns, by_conn, rounds = await settle(srv.port, members, args.connections)
    print(f"latency: {len(members)} members over {args.connections} connections joined and reconciled in "
          f"{time.perf_counter() - t0:.1f} s ({rounds} rounds)")
    per_conn_rate = args.rate / len(conns)
    latencies: list[float] = []

    frames = [[m.request(i) for i, m in enumerate(ms_)] for ms_ in by_conn]  # encoded before the clock starts

    async def drive(idx: int) -> None:
        reader, writer = conns[idx]
        mine = frames[idx]
        sent_at: dict[int, float] = {}
        finished = asyncio.Event()

        async def receive() -> None:
            while True:
                frame = await read_frame(reader)
                corr = struct.unpack_from(">i", frame, 0)[0]
                latencies.append(time.perf_counter() - sent_at.pop(corr))
                if not sent_at and finished.is_set():
                    return

        receiver = asyncio.ensure_future(receive())
        start = time.perf_counter() + idx / args.rate  # stagger the connections
        k = 0
        while True:
            due = start + k / per_conn_rate
            if due >= stop:
                break
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            i = k % len(mine)
            sent_at[i] = time.perf_counter()
            writer.write(mine[i])
            k += 1
        finished.set()
        if sent_at:
            await receiver
        else:
            receiver.cancel()

    gc.collect()
    gc.disable()  # the client's own collections must not show up as server latency
    stop = time.perf_counter() + args.seconds
    cpu0 = cpu_seconds(srv.proc.pid)
    t0 = time.perf_counter()
    await asyncio.gather(*(drive(i) for i in range(len(conns))))
    wall = time.perf_counter() - t0
    gc.enable()
    cpu = cpu_seconds(srv.proc.pid) - cpu0
    latencies.sort()
    n = len(latencies)

    def pct(p: float) -> float:
        return latencies[min(n - 1, int(p * n))] * 1000

    print(f"latency: {n} heartbeats at {n / wall:,.0f}/s from {len(members)} members: p50 {pct(0.5):.2f} ms, "
          f"p99 {pct(0.99):.2f} ms, max {latencies[-1] * 1000:.2f} ms; server CPU {cpu / wall * 100:.0f}% of a core")
    for _, w in conns:
        w.close()


# --- join of one real consumer ------------------------------------------------------------------


def join_phase(srv: ServerProcess, args) -> None:
    import confluent_kafka as ck

    conf = {"bootstrap.servers": srv.bootstrap, "group.id": "join-bench", "group.protocol": "consumer",
            "enable.auto.commit": False, "auto.offset.reset": "latest"}
    consumers = [ck.Consumer(conf) for _ in range(args.consumers)]
    stop = threading.Event()
    newcomer: list = []

    def poller() -> None:
        while not stop.is_set():
            for c in consumers + newcomer:
                c.poll(0.01)

    for c in consumers:
        c.subscribe(["join-topic"])
    thread = threading.Thread(target=poller, daemon=True)
    thread.start()
    req_cls = load_request_schema(69, 0)

    def describe():
        with WireClient(srv.port) as wc:
            return wc.request(69, 0, build(req_cls, group_ids=("join-bench",), include_authorized_operations=False)).groups[0]

    def settled(g, n):
        return (g.error_code == 0 and g.group_state == "Stable" and len(g.members) == n
                and g.group_epoch == g.assignment_epoch
                and all(m.assignment == m.target_assignment for m in g.members)
                and sum(len(tp.partitions) for m in g.members for tp in m.assignment.topic_partitions) == args.partitions)

    deadline = time.monotonic() + 120
    while not settled(g := describe(), args.consumers):
        if time.monotonic() > deadline:
            raise SystemExit(f"the first {args.consumers} consumers did not settle: {g.group_state}")
        time.sleep(0.1)
    epoch_before = g.group_epoch
    extra = ck.Consumer(conf)
    t0 = time.perf_counter()
    extra.subscribe(["join-topic"])
    newcomer.append(extra)
    while not settled(g := describe(), args.consumers + 1):
        if time.perf_counter() - t0 > 120:
            raise SystemExit("the newcomer did not settle")
        time.sleep(0.005)
    elapsed = time.perf_counter() - t0
    interval = args.join_interval_ms / 1000
    mine = next(m for m in g.members if m.member_id == extra.memberid())
    got = sum(len(tp.partitions) for tp in mine.assignment.topic_partitions)
    print(f"join: consumer #{args.consumers + 1} joining a group of {args.consumers} with {args.partitions} partitions: "
          f"Stable with the new assignment after {elapsed * 1000:.0f} ms = {elapsed / interval:.2f} heartbeat intervals "
          f"({args.join_interval_ms} ms); it owns {got} partitions; group epoch {epoch_before} -> {g.group_epoch}")
    stop.set()
    thread.join()
    for c in consumers + [extra]:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=["rate", "latency", "join"])
    ap.add_argument("--members", type=int, default=2000)
    ap.add_argument("--group-size", type=int, default=10)
    ap.add_argument("--partitions-per-topic", type=int, default=20)
    ap.add_argument("--rate-connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=256)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--latency-members", type=int, default=10_000)
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--consumers", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=900)
    ap.add_argument("--join-interval-ms", type=int, default=1000)
    ap.add_argument("--shards", type=int, default=1, help="offsets.topic.num.partitions (group coordinator shards)")
    ap.add_argument("--upstream", action="store_true",
                    help="run the broker in front of an upstream (another cohort serve): groups' records upstream, "
                         "everything else forwarded")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        overrides = ["group.consumer.min.heartbeat.interval.ms=100",
                     f"group.consumer.heartbeat.interval.ms={args.join_interval_ms}",
                     "group.consumer.session.timeout.ms=60000", "group.consumer.max.session.timeout.ms=60000",
                     f"offsets.topic.num.partitions={args.shards}"]
        print(f"group coordinator shards: {args.shards}")
        upstream = None
        if args.upstream:
            os.makedirs(os.path.join(tmp, "upstream"))
            upstream = ServerProcess(os.path.join(tmp, "upstream", "data"),
                                     log_path=os.path.join(tmp, "upstream.log")).start()
            overrides.append(f"upstream.bootstrap.servers={upstream.bootstrap}")
            print(f"in front of an upstream at {upstream.bootstrap}")
        srv = ServerProcess(os.path.join(tmp, "data"), *overrides, log_path=os.path.join(tmp, "server.log")).start()
        try:
            if args.only in (None, "rate", "latency"):
                setup(srv, args.partitions_per_topic)
            if args.only in (None, "rate"):
                asyncio.run(rate_phase(srv, args))
            if args.only in (None, "latency"):
                asyncio.run(latency_phase(srv, args))
            if args.only in (None, "join"):
                from confluent_kafka.admin import AdminClient, NewTopic

                admin = AdminClient({"bootstrap.servers": srv.bootstrap})
                admin.create_topics([NewTopic("join-topic", num_partitions=args.partitions,
                                              replication_factor=1)])["join-topic"].result(30)
                join_phase(srv, args)
        finally:
            if upstream is not None:
                upstream.stop()
            code = srv.stop()
            if code:
                print(open(os.path.join(tmp, "server.log")).read()[-3000:], file=sys.stderr)
                raise SystemExit(f"server exited with {code}")


if __name__ == "__main__":
    main()
