"""ListOffsets by timestamp on a large partition: the time index's lookup cost.

Builds one partition of ``--gb`` GiB (1 KiB records in batches of 16, gzip-compressed when
``--compression gzip``, timestamps rising 1 ms a record) through the broker's own storage
code, then

* times ``PartitionLog.offset_for_timestamp`` and ``max_timestamp`` in process for random
  targets after a fresh open (the sealed segment's time index read from disk), and
* starts `cohort serve` on the directory and times ListOffsets v7 round trips over a socket.

    .venv/bin/python bench/list_offsets.py [--gb 1] [--lookups 2000] [--compression none]

With ``--src OTHER/src`` the in-process lookups are also run by another tree's code on the same
files (for a before/after comparison).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time

if "--child" not in sys.argv:  # a child run times whatever tree PYTHONPATH names
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
from crc32c import crc32c  # noqa: E402

from cohort.broker import Broker  # noqa: E402
from cohort.config import Config  # noqa: E402
from cohort.protocol.records import CRC_START, build_batch, check_produce_records  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers

BASE_TS = 1_700_000_000_000
PER_BATCH = 16
_TS = struct.Struct(">qq")


def build(data_dir: str, gib: float, compression: int) -> tuple[int, int]:
    """Write the partition; returns (bytes, records)."""
    b = Broker(Config({"log.dir": data_dir}))
    b.create_topic("big", 1, {"message.timestamp.after.max.ms": str(2**62)})
    log = b.log("big", 0)
    template = bytearray(build_batch([(None, os.urandom(512).hex().encode())] * PER_BATCH,
                                     timestamps=[BASE_TS + i for i in range(PER_BATCH)], compression=compression))
    batches = int(gib * 2**30 // len(template))
    for n in range(batches):
        first = BASE_TS + n * PER_BATCH
        _TS.pack_into(template, 27, first, first + PER_BATCH - 1)
        struct.pack_into(">I", template, 17, crc32c(memoryview(template)[CRC_START:]))
        data = bytearray(template)
        log.append(data, check_produce_records(data))
    size = log.size_bytes
    b.close()
    return size, batches * PER_BATCH


def in_process(data_dir: str, targets: list[int]) -> tuple[float, float, float]:
    """Median and p99 ms of a lookup, and ms of MAX_TIMESTAMP, after a fresh open."""
    from cohort.log import PartitionLog

    log = PartitionLog(os.path.join(data_dir, "big-0"))
    times = []
    for t in targets:
        start = time.perf_counter()
        log.offset_for_timestamp(t)
        times.append((time.perf_counter() - start) * 1000)
    start = time.perf_counter()
    log.max_timestamp()
    mx = (time.perf_counter() - start) * 1000
    log.close()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1], mx


def over_the_wire(data_dir: str, targets: list[int]) -> tuple[float, float]:
    from cohort_testing import ServerProcess, WireClient
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

    srv = ServerProcess(data_dir).start()
    try:
        with WireClient(srv.port) as c:
            times = []
            for t in targets:
                req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(ListOffsetsTopic(name="big", partitions=(
                    ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=t),)),))
                start = time.perf_counter()
                c.request(2, 7, req)
                times.append((time.perf_counter() - start) * 1000)
    finally:
        srv.stop()
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--lookups", type=int, default=2000)
    ap.add_argument("--compression", choices=("none", "gzip"), default="none")
    ap.add_argument("--src", help="another tree's src directory to time the same in-process lookups with")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:  # run by --src: time the lookups with whatever cohort is first on the path
        targets = [int(x) for x in sys.stdin.read().split()]
        print(*in_process(args.child, targets))
        return
    with tempfile.TemporaryDirectory(prefix="cohort-bench-", dir=os.environ.get("BENCH_DIR")) as tmp:
        data_dir = os.path.join(tmp, "data")
        start = time.perf_counter()
        size, records = build(data_dir, args.gb, 1 if args.compression == "gzip" else 0)
        print(f"built {size / 2**30:.2f} GiB, {records} records ({args.compression}) in {time.perf_counter() - start:.0f} s")
        rng = random.Random(7)
        targets = [BASE_TS + rng.randrange(records) for _ in range(args.lookups)]
        med, p99, mx = in_process(data_dir, targets)
        print(f"in process: offset_for_timestamp median {med:.3f} ms, p99 {p99:.3f} ms; max_timestamp {mx:.3f} ms")
        if args.src:
            env = dict(os.environ, PYTHONPATH=args.src)
            out = subprocess.run([sys.executable, __file__, "--child", data_dir],
                                 input=" ".join(map(str, targets[: max(50, len(targets) // 20)])), capture_output=True,
                                 text=True, env=env, check=True).stdout.split()
            print(f"{args.src}: offset_for_timestamp median {float(out[0]):.3f} ms, p99 {float(out[1]):.3f} ms; "
                  f"max_timestamp {float(out[2]):.3f} ms")
        med, p99 = over_the_wire(data_dir, targets)
        print(f"ListOffsets v7 round trip: median {med:.3f} ms, p99 {p99:.3f} ms ({len(targets)} lookups)")


if __name__ == "__main__":
    main()
