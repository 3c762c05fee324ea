"""A request-frame fuzzer for robustness tests and ``bench/fuzz.py``.

Seeds are real clients' request frames (``tests/protocol/corpus``); each round mutates one to
three of them (bit flips, truncation, extreme lengths and counts, wrong versions and keys,
random tagged fields, spliced and random bytes), gives each a fresh correlation id, sends
them in one write and checks what comes back: every frame must be answered, in order, or the
connection closed. Silence past ``answer_timeout`` is a hang, unless the frame waits by design
(Fetch, JoinGroup, SyncGroup long-polls), which counts as parked.
"""

from __future__ import annotations

import asyncio
import random
import struct
from typing import Any
from dataclasses import dataclass, field

from cohort.protocol.codec import MalformedRequest, UnsupportedApi, decode_request
from cohort.protocol.versions import SUPPORTED, VersionTable

_SIZE = struct.Struct(">i")
PARKING_APIS = frozenset({1, 11, 14})  # Fetch, JoinGroup, SyncGroup may wait by design
_INT32_EXTREMES = (0x7FFFFFFF, 0xFFFFFFFF, 0x80000000, 0xFFFFFFFE, 0x00010000, 0x7FFFFFFE)
_INT16_EXTREMES = (0x7FFF, 0xFFFF, 0x8000, 0xFFFE)
_VARINT_EXTREMES = (b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x0f", b"\x00", b"\xff\xff\xff\xff\xff\xff",
                    b"\x80\x80\x80\x80\x08", b"\xff\x7f")


def load_corpus(path: str) -> list[bytes]:
    """Frames (without size prefixes) from a file of size-prefixed frames."""
    with open(path, "rb") as f:
        data = f.read()
    frames, pos = [], 0
    while pos + 4 <= len(data):
        (n,) = _SIZE.unpack_from(data, pos)
        frames.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    return frames


class Mutator:
    """Deterministic for a seed: the same seed gives the same frames."""

    def __init__(self, seeds: list[bytes], seed: int) -> None:
        self.seeds = seeds
        self.rng = random.Random(seed)
        self.ops = [self.bit_flips, self.truncate, self.extreme_int32, self.extreme_int16, self.extreme_varint,
                    self.wrong_version, self.wrong_key, self.tagged_fields, self.splice, self.random_bytes,
                    self.insert_bytes, self.delete_bytes, self.unchanged]

    def frame(self) -> bytes:
        data = bytearray(self.rng.choice(self.seeds))
        for _ in range(self.rng.choice((1, 1, 1, 2, 3))):
            data = self.rng.choice(self.ops)(data)
        return bytes(data)

    def _pos(self, data: bytearray, width: int) -> int | None:
        """A position to mutate: mostly inside the body (past the client id), else anywhere
        past the api key, version and correlation id."""
        start = 8
        if len(data) >= 10 and self.rng.random() < 0.8:
            (n,) = struct.unpack_from(">h", data, 8)
            start = 10 + max(n, 0)
        if len(data) < start + width:
            return None
        return self.rng.randrange(start, len(data) - width + 1)

    def unchanged(self, data: bytearray) -> bytearray:
        return data

    def bit_flips(self, data: bytearray) -> bytearray:
        for _ in range(self.rng.randint(1, 8)):
            i = self._pos(data, 1)
            if i is not None:
                data[i] ^= 1 << self.rng.randrange(8)
        return data

    def truncate(self, data: bytearray) -> bytearray:
        return data[: self.rng.randrange(len(data) + 1)]

    def extreme_int32(self, data: bytearray) -> bytearray:
        pos = self._pos(data, 4)
        if pos is not None:
            data[pos : pos + 4] = struct.pack(">I", self.rng.choice(_INT32_EXTREMES + (self.rng.getrandbits(32),)))
        return data

    def extreme_int16(self, data: bytearray) -> bytearray:
        pos = self._pos(data, 2)
        if pos is not None:
            data[pos : pos + 2] = struct.pack(">H", self.rng.choice(_INT16_EXTREMES + (self.rng.getrandbits(16),)))
        return data

    def extreme_varint(self, data: bytearray) -> bytearray:
        pos = self._pos(data, 1)
        if pos is not None:
            value = self.rng.choice(_VARINT_EXTREMES)
            cut = self.rng.choice((0, 1, len(value)))  # overwrite or insert
            data[pos : pos + cut] = value
        return data

    def wrong_version(self, data: bytearray) -> bytearray:
        if len(data) >= 4:
            data[2:4] = struct.pack(">h", self.rng.choice((-1, 0, 1, 5, 9, 12, 13, 16, 17, 100, 0x7FFF)))
        return data

    def wrong_key(self, data: bytearray) -> bytearray:
        if len(data) >= 2:
            key = self.rng.choice(list(SUPPORTED) + [-1, 7, 17, 21, 23, 37, 50, 67, 70, 1000, 0x7FFF])
            data[0:2] = struct.pack(">h", key)
        return data

    def tagged_fields(self, data: bytearray) -> bytearray:
        """Replace a byte (often a tag count of 0) with a buffer of random tagged fields."""
        pos = self._pos(data, 1)
        if pos is None:
            return data
        tags = bytearray([self.rng.randint(1, 4)])
        for _ in range(tags[0]):
            size = self.rng.choice((0, 1, 4, 16, 200))
            tags += bytes([self.rng.choice((0, 1, 2, 3, 10, 0x7F))]) + bytes([size if size < 128 else 0x7F])
            tags += bytes(self.rng.getrandbits(8) for _ in range(min(size, 0x7F)))
        if self.rng.random() < 0.5:
            data[pos : pos + 1] = tags
        else:
            data[-1:] = tags  # the top-level tag buffer is usually the last byte
        return data

    def splice(self, data: bytearray) -> bytearray:
        other = self.rng.choice(self.seeds)
        cut = self.rng.randrange(len(data) + 1)
        return data[:cut] + other[self.rng.randrange(len(other) + 1) :]

    def random_bytes(self, data: bytearray) -> bytearray:
        n = self.rng.choice((0, 1, 7, 8, 12, 30, 200))
        body = bytearray(self.rng.getrandbits(8) for _ in range(n))
        return data[:12] + body if self.rng.random() < 0.7 else body

    def insert_bytes(self, data: bytearray) -> bytearray:
        pos = self._pos(data, 0) or 0
        data[pos:pos] = bytes(self.rng.getrandbits(8) for _ in range(self.rng.randint(1, 8)))
        return data

    def delete_bytes(self, data: bytearray) -> bytearray:
        pos = self._pos(data, 1)
        if pos is not None:
            del data[pos : pos + self.rng.randint(1, 8)]
        return data


@dataclass
class Tally:
    frames: int = 0
    answered: int = 0
    closed: int = 0  # frames cut off by the server closing the connection
    parked: int = 0  # frames waiting by design when we stopped waiting
    unanswered: int = 0  # hangs: neither answer nor close
    misordered: int = 0  # an answer with the wrong correlation id
    connections: int = 0
    hang_samples: list[str] = field(default_factory=list)

    def failures(self) -> int:
        return self.unanswered + self.misordered


def _expects_answer(frame: bytes, table: VersionTable) -> bool:
    """False only for a Produce with acks=0 that the broker will accept as well formed."""
    if len(frame) < 8 or struct.unpack_from(">h", frame, 0)[0] != 0:
        return True
    try:
        request = decode_request(frame, table)
    except (MalformedRequest, UnsupportedApi):
        return True
    return getattr(request.body, "acks", -1) != 0


async def fuzz_connection(host: str, port: int, mutator: Mutator, table: VersionTable, tally: Tally, rounds: int,
                          answer_timeout: float, next_corr: list[int], ssl: Any = None) -> None:
    """Send up to ``rounds`` writes on one connection (reconnecting after every close); ``ssl``
    is an SSLContext for a TLS listener."""
    reader = writer = None
    try:
        for _ in range(rounds):
            if writer is None:
                reader, writer = await asyncio.open_connection(host, port, ssl=ssl)
                tally.connections += 1
            batch = []
            for _ in range(mutator.rng.choice((1, 1, 1, 2, 3))):
                frame = bytearray(mutator.frame())
                corr = next_corr[0]
                next_corr[0] = (corr + 1) & 0x7FFFFFFF
                if len(frame) >= 8:
                    frame[4:8] = _SIZE.pack(corr)
                batch.append((corr, bytes(frame)))
            tally.frames += len(batch)
            writer.write(b"".join(_SIZE.pack(len(f)) + f for _, f in batch))
            expected = [(corr, f) for corr, f in batch if _expects_answer(f, table)]
            closed = False
            for i, (corr, f) in enumerate(expected):
                try:
                    head = await asyncio.wait_for(reader.readexactly(4), answer_timeout)
                    (n,) = _SIZE.unpack(head)
                    body = await asyncio.wait_for(reader.readexactly(n), answer_timeout)
                except (asyncio.IncompleteReadError, ConnectionError):
                    tally.closed += len(expected) - i
                    closed = True
                    break
                except asyncio.TimeoutError:
                    waiting = [struct.unpack_from(">h", g, 0)[0] for _, g in expected[: i + 1] if len(g) >= 2]
                    if any(k in PARKING_APIS for k in waiting):
                        tally.parked += len(expected) - i
                    else:
                        tally.unanswered += len(expected) - i
                        if len(tally.hang_samples) < 5:
                            tally.hang_samples.append(f.hex())
                    closed = True
                    break
                if _SIZE.unpack_from(body, 0)[0] != corr:
                    tally.misordered += 1
                    closed = True
                    break
                tally.answered += 1
            if closed:
                writer.close()
                writer = reader = None
    except (ConnectionError, OSError):
        pass
    finally:
        if writer is not None:
            writer.close()


async def fuzz(host: str, port: int, seeds: list[bytes], *, seed: int, frames: int | None = None,
               seconds: float | None = None, connections: int = 8, answer_timeout: float = 5.0,
               table: VersionTable | None = None, progress=None, ssl: Any = None) -> Tally:
    """Fuzz until ``frames`` frames were sent or ``seconds`` passed, on ``connections`` at once."""
    from cohort.protocol.versions import default_table

    table = table or default_table()
    tally = Tally()
    loop = asyncio.get_running_loop()
    deadline = None if seconds is None else loop.time() + seconds
    next_corr = [1]
    workers = [Mutator(seeds, seed * 1000 + i) for i in range(connections)]
    while (frames is None or tally.frames < frames) and (deadline is None or loop.time() < deadline):
        await asyncio.gather(*(fuzz_connection(host, port, m, table, tally, 50, answer_timeout, next_corr, ssl)
                               for m in workers))
        if progress is not None:
            progress(tally)
    return tally


# --- before and after a fuzz run (confluent-kafka, imported only here) -----------------------

CHECK_TOPIC = "fuzz-canary"


def produce_canary(bootstrap: str, n: int = 1000) -> None:
    """Records the run must not disturb: ``n`` keyed values over 3 partitions, acks=all."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(CHECK_TOPIC, 3, 1)])[CHECK_TOPIC].result(20)
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(n):
        p.produce(CHECK_TOPIC, key=b"k%d" % i, value=b"canary %d" % i, partition=i % 3)
    if p.flush(30) != 0:
        raise RuntimeError("the canary records were not all acknowledged")


def read_canary(bootstrap: str, n: int = 1000, timeout: float = 30) -> set[bytes]:
    import time

    import confluent_kafka as ck

    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "fuzz-reader", "enable.auto.commit": False})
    c.assign([ck.TopicPartition(CHECK_TOPIC, p, ck.OFFSET_BEGINNING) for p in range(3)])
    seen: set[bytes] = set()
    deadline = time.monotonic() + timeout
    while len(seen) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None and m.topic() == CHECK_TOPIC:
            seen.add(m.value())
    c.close()
    return seen


def group_still_works(bootstrap: str, timeout: float = 45) -> bool:
    """A fresh idempotent producer and a KIP-848 consumer group: the consumer joins, gets the
    partitions and reads what the producer wrote."""
    import time
    import uuid

    import confluent_kafka as ck

    topic = f"fuzz-after-{uuid.uuid4().hex[:8]}"
    p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(100):
        p.produce(topic, value=b"after %d" % i)
    if p.flush(20) != 0:
        return False
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "group.protocol": "consumer",
                     "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + timeout
    while got < 100 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    c.close()
    return got == 100
