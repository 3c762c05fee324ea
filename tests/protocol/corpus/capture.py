"""Capture the fuzzer's seed frames: what real clients send to cohort, plus generated requests
for every API and version that no client here sends.

Runs a server in this process that records every request frame it reads, drives
confluent-kafka (producer, classic and KIP-848 consumers, admin), kafka-python and aiokafka
against it, then adds a few hypothesis-generated requests for each (api_key, version) cohort
serves. Writes ``client-frames.bin`` beside this file: size-prefixed frames back to back.

    .venv/bin/python tests/protocol/corpus/capture.py
"""

from __future__ import annotations

import asyncio
import collections
import io
import os
import struct
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))  # tests/: the test helpers (cohort_testing)
OUT = os.path.join(HERE, "client-frames.bin")
PER_PAIR = 12  # frames kept per (api_key, version) from the clients
GENERATED = 4  # hypothesis examples per (api_key, version)


def capture_clients(frames: list[bytes]) -> None:
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    from cohort.server.server import Server
    from cohort_testing import ServerThread

    original = Server._handle

    def recording(self, frame, *args):
        frames.append(bytes(frame))
        return original(self, frame, *args)

    Server._handle = recording
    try:
        with tempfile.TemporaryDirectory() as tmp, ServerThread(os.path.join(tmp, "data"), {"num.partitions": 3}) as srv:
            boot = srv.bootstrap
            admin = AdminClient({"bootstrap.servers": boot})
            for fut in admin.create_topics([NewTopic("seed-a", 3, 1, config={"cleanup.policy": "compact"}),
                                            NewTopic("seed-b", 2, 1)]).values():
                fut.result(10)
            for fut in admin.describe_configs([ConfigResource("topic", "seed-a")]).values():
                fut.result(10)
            p = ck.Producer({"bootstrap.servers": boot, "enable.idempotence": True, "linger.ms": 5})
            for i in range(200):
                p.produce("seed-a", key=b"k%d" % (i % 7), value=b"v" * (i % 50), headers={"h": b"x"})
                p.produce("seed-b", value=b"w%d" % i)
            p.flush(10)
            for codec in ("gzip", "snappy", "lz4", "zstd"):
                pc = ck.Producer({"bootstrap.servers": boot, "compression.type": codec, "acks": 1})
                for i in range(20):
                    pc.produce("seed-b", key=b"c", value=b"z" * 100)
                pc.flush(10)
            p0 = ck.Producer({"bootstrap.servers": boot, "acks": 0})
            p0.produce("seed-b", value=b"fire and forget")
            p0.flush(10)
            for protocol in ("classic", "consumer"):
                conf = {"bootstrap.servers": boot, "group.id": f"seed-{protocol}", "auto.offset.reset": "earliest",
                        "group.protocol": protocol, "enable.auto.commit": False}
                if protocol == "classic":
                    conf["session.timeout.ms"] = 6000
                c = ck.Consumer(conf)
                c.subscribe(["seed-a", "seed-b"])
                got = 0
                deadline = time.monotonic() + 20
                while got < 50 and time.monotonic() < deadline:
                    m = c.poll(0.5)
                    if m is not None and not m.error():
                        got += 1
                        c.commit(m, asynchronous=False)
                c.committed([ck.TopicPartition("seed-a", 0)], 10)
                c.get_watermark_offsets(ck.TopicPartition("seed-a", 0), 10)
                c.offsets_for_times([ck.TopicPartition("seed-a", 0, 0)], 10)
                c.close()
            admin.list_consumer_groups().result(10)
            admin.describe_consumer_groups(["seed-classic", "seed-consumer"])
            time.sleep(1)
            admin.delete_topics(["seed-b"])["seed-b"].result(10)
            admin.describe_cluster().result(10)
            _kafka_python(boot)
            asyncio.run(_aiokafka(boot))
    finally:
        Server._handle = original


def _kafka_python(boot: str) -> None:
    import kafka

    prod = kafka.KafkaProducer(bootstrap_servers=boot)
    for i in range(20):
        prod.send("seed-kp", key=b"k", value=b"kafka-python %d" % i)
    prod.flush(10)
    prod.close()
    cons = kafka.KafkaConsumer("seed-kp", bootstrap_servers=boot, group_id="seed-kp", auto_offset_reset="earliest",
                               consumer_timeout_ms=3000)
    for _ in cons:
        pass
    cons.commit()
    cons.close()
    adm = kafka.KafkaAdminClient(bootstrap_servers=boot)
    adm.list_groups()
    adm.describe_groups(["seed-kp"])
    adm.list_group_offsets("seed-kp")
    adm.describe_topics(["seed-kp"])
    adm.close()


async def _aiokafka(boot: str) -> None:
    import aiokafka

    prod = aiokafka.AIOKafkaProducer(bootstrap_servers=boot)
    await prod.start()
    for i in range(20):
        await prod.send_and_wait("seed-aio", b"aiokafka %d" % i, key=b"a")
    await prod.stop()
    cons = aiokafka.AIOKafkaConsumer("seed-aio", bootstrap_servers=boot, group_id="seed-aio",
                                     auto_offset_reset="earliest")
    await cons.start()
    try:
        await cons.getmany(timeout_ms=3000)
        await cons.commit()
    finally:
        await cons.stop()


def generated() -> list[bytes]:
    """A few hypothesis-drawn requests for every (api_key, version) cohort serves."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from kio.index import load_request_schema
    from kio.static.primitive import Records

    from cohort.protocol.codec import encode_request
    from cohort.protocol.versions import SUPPORTED

    st.register_type_strategy(Records, st.binary(max_size=200).map(Records))
    out: list[bytes] = []
    for key, (_, lo, hi) in sorted(SUPPORTED.items()):
        for version in range(lo, hi + 1):
            schema = load_request_schema(key, version)

            @settings(max_examples=GENERATED, database=None, deadline=None, suppress_health_check=list(HealthCheck))
            @given(st.from_type(schema))
            def draw(body):
                out.append(encode_request(key, version, 1, "gen", body)[4:])

            draw()
    return out


def main() -> None:
    sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "src"))
    frames: list[bytes] = []
    capture_clients(frames)
    kept: dict[tuple[int, int], list[bytes]] = collections.defaultdict(list)
    seen = set()
    for f in frames:
        key = struct.unpack_from(">hh", f, 0)
        body = f[8:]  # without the correlation id, which differs between otherwise equal frames
        if (key, body) in seen or len(kept[key]) >= PER_PAIR:
            continue
        seen.add((key, body))
        kept[key].append(f)
    frames = [f for group in kept.values() for f in group] + generated()
    buf = io.BytesIO()
    for f in frames:
        buf.write(struct.pack(">i", len(f)) + f)
    with open(OUT, "wb") as fh:
        fh.write(buf.getvalue())
    print(f"{len(frames)} frames ({len(kept)} (api, version) pairs from clients) -> {OUT}")


if __name__ == "__main__":
    main()
