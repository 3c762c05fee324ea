"""cohort.client behind confluent-kafka's synchronous Consumer calls (poll, commit, assignment,
subscribe, close), so the group tests written for confluent-kafka run unchanged with it: the
consumer lives on an event loop in a thread of its own."""

from __future__ import annotations

import asyncio
import threading
from collections import deque

import confluent_kafka as ck

from cohort.client import Consumer, TopicPartition


class Message:
    def __init__(self, record) -> None:
        self._r = record

    def error(self):
        return None

    def topic(self) -> str:
        return self._r.topic

    def partition(self) -> int:
        return self._r.partition

    def offset(self) -> int:
        return self._r.offset

    def key(self):
        return self._r.key

    def value(self):
        return self._r.value


class SyncConsumer:
    """Takes confluent-kafka's settings; those cohort.client has no use for are dropped."""

    IGNORED = {"group.protocol"}

    def __init__(self, conf: dict) -> None:
        conf = {k: v for k, v in conf.items() if k not in self.IGNORED}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cohort-client-sync", daemon=True)
        self._thread.start()
        self._consumer = self._run(self._make(conf))
        self._pending: deque = deque()
        self._started = False

    async def _make(self, conf: dict) -> Consumer:
        return Consumer(conf)

    def _run(self, coro, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def subscribe(self, topics: list[str]) -> None:
        async def go():
            if len(topics) == 1 and topics[0].startswith("^"):
                self._consumer.subscribe(pattern=topics[0][1:])  # librdkafka's regex marker
            else:
                self._consumer.subscribe(topics)
            await self._consumer.start()
        self._run(go())

    def poll(self, timeout: float):
        if not self._pending:
            batch = self._run(self._consumer.getmany(timeout_ms=int(timeout * 1000), max_records=1), timeout + 30)
            self._pending.extend(r for records in batch.values() for r in records)
        return Message(self._pending.popleft()) if self._pending else None

    def commit(self, message: Message, asynchronous: bool = True) -> None:
        offsets = {TopicPartition(message.topic(), message.partition()): message.offset() + 1}
        self._run(self._consumer.commit(offsets))

    def assignment(self) -> list:
        return [ck.TopicPartition(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    def close(self) -> None:
        try:
            self._run(self._consumer.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
