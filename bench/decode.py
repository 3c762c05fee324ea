"""What the bounds check costs on the hot request paths: decoding real clients' frames with kio's
reader alone against the check followed by kio's reader, interleaved in one process.

Frames come from the fuzz corpus (captured from confluent-kafka, kafka-python and aiokafka),
plus a Produce with a 1 MB batch. Reports microseconds per decode, median of `--rounds`
alternating rounds, and the check's share.

    .venv/bin/python bench/decode.py [--rounds 7] [--iterations 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))  # the test helpers
from cohort.protocol.codec import skip_request_header  # noqa: E402
from cohort.protocol.records import build_batch  # noqa: E402
from cohort.protocol.versions import default_table  # noqa: E402
from cohort_fuzzing import load_corpus  # noqa: E402

CORPUS = os.path.join(os.path.dirname(__file__), "..", "tests", "protocol", "corpus", "client-frames.bin")
HOT = {(68, 1): "ConsumerGroupHeartbeat v1", (12, 4): "Heartbeat v4", (0, 9): "Produce v9 (client batch)",
       (1, 12): "Fetch v12", (8, 9): "OffsetCommit v9", (3, 12): "Metadata v12"}


def big_produce() -> bytes:
    """A Produce v9 frame carrying one batch of 1,000 records of 1 KiB."""
    import datetime

    from kio.index import load_request_schema

    from cohort.protocol.codec import encode_request
    from cohort.protocol.entities import build, nested

    schema = load_request_schema(0, 9)
    records = build_batch([(None, b"x" * 1024)] * 1000)
    part = build(nested(nested(schema, "topic_data"), "partition_data"), index=0, records=records)
    data = build(nested(schema, "topic_data"), name="t", partition_data=(part,))
    body = build(schema, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(data,))
    return encode_request(0, 9, 1, "bench", body)[4:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--iterations", type=int, default=20000)
    args = ap.parse_args()
    table = default_table()
    frames: dict[str, bytes] = {}
    for f in load_corpus(CORPUS):
        key = struct.unpack_from(">hh", f, 0)
        if key in HOT and HOT[key] not in frames:
            frames[HOT[key]] = f
    frames["Produce v9 (1 MB batch)"] = big_produce()
    print(f"{'request':<28}{'bytes':>9}{'kio alone (us)':>16}{'check + kio (us)':>18}{'check share':>13}")
    for name, frame in frames.items():
        api_key, version = struct.unpack_from(">hh", frame, 0)
        codec = table.codec(api_key, version)
        _, pos = skip_request_header(frame, codec.request_header_flexible)
        end = len(frame)
        read, check = codec.read_request, codec.check_request
        n = args.iterations if len(frame) < 100_000 else max(args.iterations // 100, 50)

        def kio_alone():
            t = time.perf_counter()
            for _ in range(n):
                read(frame, pos)
            return (time.perf_counter() - t) / n * 1e6

        def checked():
            t = time.perf_counter()
            for _ in range(n):
                check(frame, pos, end)
                read(frame, pos)
            return (time.perf_counter() - t) / n * 1e6

        a, b = [], []
        for _ in range(args.rounds):
            a.append(kio_alone())
            b.append(checked())
        ma, mb = statistics.median(a), statistics.median(b)
        print(f"{name:<28}{len(frame):>9,}{ma:>16.2f}{mb:>18.2f}{(mb - ma) / mb:>12.0%}")


if __name__ == "__main__":
    main()
