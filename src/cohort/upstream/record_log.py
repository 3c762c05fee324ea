"""A coordinator shard's record log kept in a partition of a compacted topic on an upstream
Kafka-compatible cluster: the second implementation of the runtime's `RecordLog`.

Ownership is fenced the way Kafka Streams fenced a task's producer (KIP-129): every shard has a
transactional id of its own (``cohort-<cluster>-shard-<k>``) and every append is one upstream
transaction. Opening the log is, in this order:

1. **fence**: InitProducerId on the shard's transactional id. It bumps the producer epoch, so a
   previous owner (a zombie) can never commit again, and it aborts what that owner left open;
2. **read** the partition with read_committed from its start to its end, which after the fence
   holds only decided transactions;
3. **serve**: appends follow. Several appends made while a transaction is in flight go out
   together in the next one (a group commit); each is answered once its transaction committed
   (acks=all on the upstream), failed if it aborted or the owner was fenced.

Offsets given to the runtime count records (the upstream's offsets also count commit markers).
Each append also checks that its records landed where this owner expected them: anything else
means another writer reached the partition, and the log refuses every later append (the shard
answers NOT_COORDINATOR until it is loaded again), as Kafka's runtime fails a shard whose write
offset is not the one it expected.

The upstream client is librdkafka (confluent-kafka); its calls block, so each log runs them on a
thread of its own, in order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

log = logging.getLogger("cohort.upstream")

READ_CHUNK = 2000  # records read per call to the upstream consumer (and replayed per loop turn)


class UpstreamLogError(OSError):
    """The upstream refused or lost an append (an OSError, as the runtime expects of a log)."""


def transactional_id(cluster: str, shard: int, kind: str = "shard") -> str:
    """The transactional id that fences shard ``shard`` of cohort cluster ``cluster``: of the
    group coordinator (``shard``), or of the share coordinator (``share``)."""
    return f"cohort-{cluster}-{kind}-{shard}"


class UpstreamRecordLog:
    """One shard's records in partition ``partition`` of ``topic`` on the upstream (see the module docstring)."""

    supports_transactions = False  # a client's transactional batch cannot be written on its behalf

    def __init__(self, topic: str, partition: int, txn_id: str, client: Mapping[str, Any], *,
                 timeout_s: float = 30.0) -> None:
        self.topic, self.partition, self.transactional_id = topic, partition, txn_id
        self._client = dict(client)
        self._timeout = timeout_s
        self._thread: concurrent.futures.ThreadPoolExecutor | None = None  # made on first use, again after close
        self._producer: Any = None
        self._loaded: list[tuple[bytes | None, bytes | None]] = []
        self._listeners: list = []
        self._loss_listeners: list = []
        self._loss_told = False
        self.fenced = False  # another owner took the shard over
        self._end = 0  # records appended (durable or in flight)
        self.high_watermark = 0  # records known durable
        self._next_upstream: int | None = None  # where this owner's next record must land
        self._queued: list[tuple[list, asyncio.Future, int]] = []  # (records, future, last offset)
        self._sending: list[tuple[list, asyncio.Future, int]] = []
        self._flushing: asyncio.Task | None = None
        self.failed: BaseException | None = None

    # --- the RecordLog surface ---------------------------------------------------------------

    @property
    def end_offset(self) -> int:
        return self._end

    def add_listener(self, callback) -> None:
        """``callback()`` runs after appends become durable."""
        self._listeners.append(callback)

    def on_lost(self, callback) -> None:
        """``callback(reason, fenced)`` runs once per failure when the log becomes unusable: this
        owner was fenced (another owns the shard now), another writer reached the partition, or
        a failed transaction could not even be aborted. The shard must not be served from here
        until it is opened and loaded again (never, when fenced)."""
        self._loss_listeners.append(callback)

    async def open(self) -> None:
        """Fence the shard's previous owner, then read every committed record. The whole log is
        read before the replay starts, so an upstream that fails half way leaves nothing half
        replayed (the owner retries the load from scratch). Opening again after a failure starts
        over: a new producer epoch, the partition read anew."""
        if self._flushing is not None:
            await asyncio.shield(self._flushing)
        self.failed, self.fenced, self._loss_told = None, False, False
        self._next_upstream = None
        self._end = self.high_watermark = 0
        self._loaded = await self._run(self._fence_and_read)

    async def records(self) -> AsyncIterator[tuple[int, bytes | None, bytes | None, Any]]:
        """Every committed record, oldest first, as (offset, key, value, None)."""
        loaded, self._loaded = self._loaded, []
        for offset, (key, value) in enumerate(loaded):
            yield offset, key, value, None
            if offset % READ_CHUNK == READ_CHUNK - 1:
                await asyncio.sleep(0)
        self._end = self.high_watermark = len(loaded)

    def append_records(self, records: Sequence[tuple[bytes, bytes | None]], transaction: Any = None) -> asyncio.Future:
        """Queue records for the next upstream transaction; the future resolves with the last
        record's offset once that transaction committed."""
        if transaction is not None:
            raise UpstreamLogError("an upstream coordinator log cannot hold a client's transactional records")
        if self.failed is not None:
            raise UpstreamLogError(f"the upstream coordinator log {self.topic}-{self.partition} is unusable: "
                                   f"{self.failed}")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        if not records:
            fut.set_result(self._end - 1)
            return fut
        self._end += len(records)
        self._queued.append((list(records), fut, self._end - 1))
        if self._flushing is None:
            self._flushing = loop.create_task(self._flush_loop())
        return fut

    async def close(self) -> None:
        """Let appends in flight finish, then release the upstream clients (`open` takes the log
        again, fencing whoever owned it meanwhile)."""
        if self._flushing is not None:
            await asyncio.shield(self._flushing)
        if self._thread is None:
            return
        await self._run(self._close)
        thread, self._thread = self._thread, None
        thread.shutdown(wait=True)

    # --- the event loop's side ---------------------------------------------------------------

    def _run(self, fn, *args) -> asyncio.Future:
        if self._thread is None:
            self._thread = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"cohort-upstream-{self.partition}")
        return asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def _flush_loop(self) -> None:
        try:
            while self._queued:
                self._sending, self._queued = self._queued, []
                records = [r for batch, _, _ in self._sending for r in batch]
                try:
                    await self._run(self._commit, records)
                except Exception as exc:  # noqa: BLE001 - every waiting append learns of it
                    # Without its traceback: the client thread's frames in it hold the producer,
                    # which would outlive `close` in every future that keeps the exception.
                    _drop_tracebacks(exc)
                    self._fail_all(exc if isinstance(exc, OSError) else UpstreamLogError(str(exc)))
                    continue
                self.high_watermark += len(records)
                for _, fut, last in self._sending:
                    if not fut.done():
                        fut.set_result(last)
                self._sending = []
                for cb in self._listeners:
                    cb()
        finally:
            self._flushing = None

    def _fail_all(self, exc: OSError) -> None:
        """A transaction failed: it and everything queued behind it are lost; the log ends at
        what is durable (the runtime reverts its shard to there)."""
        lost, self._sending, self._queued = self._sending + self._queued, [], []
        self._end = self.high_watermark
        log.error("upstream coordinator log %s-%d: append failed: %s", self.topic, self.partition, exc)
        for _, fut, _ in lost:
            if not fut.done():
                fut.set_exception(exc)
        if self.failed is not None and not self._loss_told:
            self._loss_told = True
            for cb in self._loss_listeners:
                cb(str(self.failed), self.fenced)

    # --- the upstream client's thread --------------------------------------------------------

    def _fence_and_read(self) -> list[tuple[bytes | None, bytes | None]]:
        import confluent_kafka as ck

        self._close()  # a retried load starts over
        producer = ck.Producer({**self._client, "transactional.id": self.transactional_id, "acks": "all",
                                "enable.idempotence": True, "linger.ms": 0,
                                "transaction.timeout.ms": max(int(self._timeout * 1000), 60_000)})
        try:
            producer.init_transactions(self._timeout)
        except ck.KafkaException as exc:
            raise UpstreamLogError(f"cannot take ownership of {self.topic}-{self.partition} as "
                                   f"{self.transactional_id}: {exc.args[0].str()}") from None
        self._producer = producer
        # A load is on the failover path, so two librdkafka waits are cut (each measured at about
        # 0.5 s per load against a cohort upstream, 1.16 s -> 0.16 s in all): the partition's
        # leader is looked up before the assign (assigned first, librdkafka finds "no current
        # leader for partition" and retries the offset query on a 500 ms timer), and a fetch at
        # the end of the log returns at once instead of after fetch.wait.max.ms (500 ms).
        consumer = ck.Consumer({**self._client, "group.id": f"{self.transactional_id}-loader",
                                "enable.auto.commit": False, "enable.partition.eof": True,
                                "isolation.level": "read_committed", "auto.offset.reset": "earliest",
                                "fetch.wait.max.ms": 10})
        try:
            try:
                consumer.list_topics(self.topic, timeout=self._timeout)
            except ck.KafkaException as exc:
                raise UpstreamLogError(f"cannot look {self.topic} up: {exc.args[0].str()}") from None
            consumer.assign([ck.TopicPartition(self.topic, self.partition, ck.OFFSET_BEGINNING)])
            return self._read_all(consumer)
        finally:
            consumer.close()

    def _read_all(self, consumer: Any) -> list[tuple[bytes | None, bytes | None]]:
        """Every committed record up to the partition's end (read_committed: its last stable offset)."""
        import confluent_kafka as ck

        out: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + self._timeout
        while True:
            # consume() waits for all it asked for or its timeout: short waits, one deadline
            msgs = consumer.consume(READ_CHUNK, 0.02)
            if not msgs:
                if time.monotonic() > deadline:
                    raise UpstreamLogError(f"no answer from the upstream reading {self.topic}-{self.partition} "
                                           f"within {self._timeout:g} s")
                continue
            deadline = time.monotonic() + self._timeout
            for m in msgs:
                err = m.error()
                if err is None:
                    out.append((m.key(), m.value()))
                elif err.code() == ck.KafkaError._PARTITION_EOF:
                    self._next_upstream = m.offset()
                    return out
                else:
                    raise UpstreamLogError(f"cannot read {self.topic}-{self.partition}: {err.str()}")

    def _commit(self, records: list[tuple[bytes, bytes | None]]) -> None:
        """One upstream transaction holding ``records``; raises UpstreamLogError unless it committed."""
        import confluent_kafka as ck

        producer = self._producer
        offsets: list[int] = []
        errors: list = []

        def delivered(err, msg) -> None:  # nothing that can raise here: librdkafka calls it
            if err is not None:
                errors.append(err)
            else:
                offsets.append(msg.offset())

        try:
            producer.begin_transaction()
            for key, value in records:
                producer.produce(self.topic, value=value, key=key, partition=self.partition, on_delivery=delivered)
            producer.flush(self._timeout)
            if errors or len(offsets) != len(records):
                raise UpstreamLogError(f"records not written: {_describe(errors[0]) if errors else 'no delivery report'}")
            self._commit_transaction()
        except ck.KafkaException as exc:
            err = exc.args[0]
            if err.fatal():  # fenced: another instance owns the shard now
                self.failed, self.fenced = UpstreamLogError(f"fenced: {_describe(err)}"), True
                raise self.failed from None
            self._abort()
            raise self.failed or UpstreamLogError(_describe(err)) from None
        except UpstreamLogError as exc:
            self._abort()
            raise self.failed or exc from None
        except Exception as exc:  # noqa: BLE001 - the append did not happen
            # confluent-kafka 2.16 calls the delivery callback of messages it purges after a fatal
            # error (fenced) while produce()'s own KafkaException is pending, so the callback's
            # first call fails with SystemError ("<method 'append' of 'list' objects> returned a
            # result with an exception set", seen in tests/upstream/test_upstream_groups.py) and
            # that SystemError is what produce() raises. The abort below still finds the producer
            # fenced and marks the log lost.
            self._abort()
            raise self.failed or UpstreamLogError(f"the upstream client failed: {exc!r}") from None
        first, last = min(offsets), max(offsets)
        if self._next_upstream is not None and first != self._next_upstream or last - first != len(records) - 1:
            self.failed = UpstreamLogError(
                f"records landed at upstream offsets {first}..{last}, not from {self._next_upstream}: "
                f"another writer reached {self.topic}-{self.partition}; the shard must be loaded again")
            raise self.failed
        self._next_upstream = last + 2  # the commit marker takes the next offset

    def _commit_transaction(self) -> None:
        """EndTxn(commit); a retriable failure (a timeout) leaves the outcome in doubt, so the
        commit is retried as librdkafka asks, never aborted, until it succeeds or fails for good."""
        import confluent_kafka as ck

        deadline = time.monotonic() + self._timeout
        while True:
            try:
                self._producer.commit_transaction(max(deadline - time.monotonic(), 1.0))
                return
            except ck.KafkaException as exc:
                err = exc.args[0]
                if not err.retriable() or err.fatal() or err.txn_requires_abort() or time.monotonic() >= deadline:
                    raise

    def _abort(self) -> None:
        """Abort the failed transaction; a producer that cannot (fenced, fatal) makes the log unusable."""
        import confluent_kafka as ck

        try:
            self._producer.abort_transaction(self._timeout)
        except ck.KafkaException as exc:
            err = exc.args[0]
            self.fenced = err.fatal()
            self.failed = UpstreamLogError(f"{'fenced' if err.fatal() else 'cannot abort a failed append'}: "
                                           f"{_describe(err)}")
        # An aborted transaction's marker takes an upstream offset this owner cannot know for sure.
        self._next_upstream = None

    def _close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.flush(self._timeout)
        except Exception as exc:  # noqa: BLE001 - a failed (fenced) producer has nothing left to send
            log.info("upstream coordinator log %s-%d: closing a failed producer: %s", self.topic, self.partition,
                     _describe(exc.args[0]) if exc.args and hasattr(exc.args[0], "str") else exc)


def _drop_tracebacks(exc: BaseException) -> None:
    """Clear the tracebacks of ``exc`` and of the exceptions chained to it (a ``raise ... from
    None`` still keeps the one it replaced as ``__context__``)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = None
        exc = exc.__cause__ or exc.__context__


def _describe(err: Any) -> str:
    """A librdkafka error's text (its name if the text cannot be had)."""
    try:
        return err.str()
    except Exception:  # noqa: BLE001
        return f"{err.name()} ({err.code()})"
