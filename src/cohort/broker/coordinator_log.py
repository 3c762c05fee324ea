"""A group coordinator shard's durable record log: one partition of ``__consumer_offsets``
(the local implementation of `cohort.coordinator_common.runtime.RecordLog`).

``append_records`` gives the records their offsets at once (offsets follow call order, so the
in-memory state the coordinator already replayed matches the log) and returns a future that
resolves with the last one once an fsync covers it. Plain records are written behind: those of
every append made before the next fsync go to the file as one batch just before it (one
batch, one write, instead of one per append). fsyncs run in a worker thread; appends that
arrive while one is running are covered together by the next (group commit), so concurrent
callers share batches and fsyncs. With ``linger_ms`` the flusher first waits that long, so even
more share one (Kafka's append linger). Fetch sees only fsynced data: ``high_watermark`` is the
durable end. A transactional batch or marker is written at once, after the plain records
before it.

Storage faults: a write or fsync the disk refuses (ENOSPC, EIO) fails every waiting future and
cuts the log back to the high watermark (a transactional append whose write fails raises
``OSError`` at once instead, with the log unchanged). Once space returns, appends work again.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Iterator, Sequence

from cohort.log import PartitionLog, fileio
from cohort.log.batches import batch_records
from cohort.protocol.records import CONTROL_FLAG, TRANSACTIONAL_FLAG, TxnBatch, build_batch, check_batch, control_type, read_header
from cohort.stats import Histogram

OFFSETS_TOPIC = "__consumer_offsets"
_BATCH_RECORDS = 2000  # plain records written behind go out in batches of at most this many
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_STATE_TOPIC = "__share_group_state"


_MEMBER_METADATA = b"\x00\x05"  # record type 5: ConsumerGroupMemberMetadata
_CURRENT_ASSIGNMENT = b"\x00\x08"  # record type 8: ConsumerGroupCurrentMemberAssignment


class MemberOrderGuard:
    """Compaction guard for the coordinator log.

    Keeping only the newest record per key can move a member's current assignment (type 8)
    in front of its metadata (type 5) when the metadata was rewritten later, and a replay
    cannot apply an assignment for a member it has not met yet. For every member whose newest
    assignment is older than its newest metadata, this also keeps the metadata record that
    preceded that assignment, so the replay meets old metadata, assignment, new metadata:
    the same end state. Both key types end in (group, member), so the key bytes after the
    type identify the member.
    """

    def __init__(self) -> None:
        self._metadata: dict[bytes, int] = {}  # member -> offset of its latest metadata value so far
        self._before_assignment: dict[bytes, int | None] = {}  # member -> that offset when its latest assignment came

    def observe(self, offset: int, key: bytes, value: bytes | None) -> None:
        kind = key[:2]
        if kind == _MEMBER_METADATA:
            if value is None:
                self._metadata.pop(key[2:], None)
            else:
                self._metadata[key[2:]] = offset
        elif kind == _CURRENT_ASSIGNMENT:
            self._before_assignment[key[2:]] = None if value is None else self._metadata.get(key[2:])

    def extra_offsets(self, newest: dict[bytes, int]) -> set[int]:
        keep = set()
        for member, metadata_offset in self._before_assignment.items():
            if metadata_offset is None:
                continue
            if newest.get(_MEMBER_METADATA + member, -1) > newest[_CURRENT_ASSIGNMENT + member]:
                keep.add(metadata_offset)
        return keep


class CoordinatorLog:
    supports_transactions = True  # holds clients' transactional batches and their markers

    def __init__(self, log: PartitionLog, *, linger_ms: int = 0, append_seconds: Histogram | None = None,
                 fsync_seconds: Histogram | None = None) -> None:
        self.log = log
        self.linger_ms = linger_ms
        self.high_watermark = log.end_offset  # everything found on open survived recovery
        self._waiters: list[tuple[int, asyncio.Future[int]]] = []
        self._pending: list[tuple[bytes, bytes | None]] = []  # plain records appended, not yet written
        self.write_generation = 0  # moves on whenever the pending records are written or dropped
        self._flushing = False
        self._flush_task: asyncio.Task | None = None  # the write-and-fsync loop while waiters wait
        self._listeners: list = []
        self.failed: OSError | None = None
        self.append_seconds = append_seconds or Histogram()  # writing a batch (before its fsync)
        self.fsync_seconds = fsync_seconds or Histogram()  # one fsync, as the event loop waits for it

    @staticmethod
    def compaction_guard() -> MemberOrderGuard:
        """What compaction of this log must respect so that a replay still works."""
        return MemberOrderGuard()

    async def open(self) -> None:
        """The local log is this broker's own: nothing to take ownership of."""

    def on_lost(self, callback) -> None:
        """Nobody else writes this broker's own log: it is never taken over."""

    async def close(self) -> None:
        """A shard handed over: the broker keeps its own log open (its segments are the broker's)."""

    async def drain(self) -> None:
        """Wait until the appends made so far are written and fsynced (or failed): a stopping
        server lets its last writes finish rather than destroy the loop that makes them durable."""
        task = self._flush_task
        if task is not None and not task.done():
            await asyncio.gather(task, return_exceptions=True)

    def add_listener(self, callback) -> None:
        """``callback()`` runs after the high watermark advances (wakes Fetch long-polls)."""
        self._listeners.append(callback)

    def append_records(self, records: Sequence[tuple[bytes, bytes | None]],
                       transaction: TxnBatch | None = None) -> "asyncio.Future[int]":
        """Append (key, value) records as one batch (value None is a tombstone); with
        ``transaction``, a transactional batch of that producer, or its marker (a control batch).

        Returns a future with the last offset, resolved after fsync. If the write or the fsync
        fails, the future fails with ``OSError`` and the log is cut back to the high watermark
        (so the caller reverts its state to there). A transactional append raises ``OSError``
        at once if its own write fails; nothing was appended then. Must be called on the event
        loop thread.
        """
        if self.failed is not None:
            try:
                self.log.truncate_to(self.high_watermark)  # the disk may be back
            except OSError:
                raise OSError(f"the coordinator log is unusable after a storage failure: {self.failed}") from None
            self.failed = None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[int] = loop.create_future()
        if not records:
            fut.set_result(self.end_offset - 1)
            return fut
        if transaction is None:
            self._pending.extend(records)
            last = self.end_offset - 1
        else:
            try:
                self._write_pending()
            except OSError as exc:
                self._fail_pending(exc)
                raise
            started = time.perf_counter()
            flags = TRANSACTIONAL_FLAG | (CONTROL_FLAG if transaction.marker >= 0 else 0)
            data = bytearray(build_batch(records, timestamp=int(time.time() * 1000), attributes=flags,
                                         producer_id=transaction.producer_id,
                                         producer_epoch=transaction.producer_epoch))
            last = self.log.append(data, [read_header(data)], transaction.marker).last_offset
            self.append_seconds.observe(time.perf_counter() - started)
        self._waiters.append((last, fut))
        if not self._flushing:
            self._flushing = True
            self._flush_task = loop.create_task(self._flush_loop())
        return fut

    def _write_pending(self) -> None:
        """Write the plain records appended since the last write, in batches of at most
        _BATCH_RECORDS records. Raises ``OSError`` if the disk refuses (the caller then cuts
        back whatever part was written)."""
        pending = self._pending
        if not pending:
            return
        self.write_generation += 1  # later appends are written (and made durable) after these
        started = time.perf_counter()
        timestamp = int(time.time() * 1000)
        for i in range(0, len(pending), _BATCH_RECORDS):
            data = bytearray(build_batch(pending[i:i + _BATCH_RECORDS], timestamp=timestamp))
            self.log.append(data, [read_header(data)])
        pending.clear()
        self.append_seconds.observe(time.perf_counter() - started)

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._waiters:
                if self.linger_ms:
                    await asyncio.sleep(self.linger_ms / 1000)
                try:
                    self._write_pending()
                except OSError as exc:
                    self._fail_pending(exc)
                    return
                target = self.log.end_offset
                started = time.perf_counter()
                try:
                    await loop.run_in_executor(None, fileio.in_worker, self.log.flush)
                except OSError as exc:
                    self._fail_pending(exc)
                    return
                self.fsync_seconds.observe(time.perf_counter() - started)
                self.high_watermark = target
                still = []
                for last, fut in self._waiters:
                    if last < target:
                        if not fut.done():
                            fut.set_result(last)
                    else:
                        still.append((last, fut))
                self._waiters = still
                for cb in self._listeners:
                    cb()
        finally:
            self._flushing = False

    def _fail_pending(self, exc: OSError) -> None:
        """A write or fsync failed: nothing past the high watermark may survive (the coordinator
        reverts its state to there), so drop the unwritten records, cut the log back and fail
        every waiting append. If even that fails, the log refuses further appends."""
        self._pending.clear()
        self.write_generation += 1
        waiters, self._waiters = self._waiters, []
        try:
            self.log.truncate_to(self.high_watermark)
        except OSError as exc2:
            self.failed = exc2
        for _, fut in waiters:
            if not fut.done():
                fut.set_exception(exc)

    @property
    def end_offset(self) -> int:
        """One past the last record appended, written or not (a failed write or fsync cuts it
        back to the high watermark)."""
        return self.log.end_offset + len(self._pending)

    async def records(self) -> AsyncIterator[tuple[int, bytes | None, bytes | None, TxnBatch | None]]:
        """(offset, key, value, transaction) of every record for the coordinator runtime's replay,
        yielding to the event loop now and then; ``transaction`` is the producer of a
        transactional or control batch, None for a plain one."""
        for n, record in enumerate(self._read(), 1):
            yield record
            if n % 2000 == 0:
                await asyncio.sleep(0)

    def read_all(self) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        """(offset, key, value) for every record in the log, oldest first."""
        for offset, key, value, _ in self._read():
            yield offset, key, value

    def _read(self) -> Iterator[tuple[int, bytes | None, bytes | None, TxnBatch | None]]:
        offset = self.log.start_offset
        end = self.log.end_offset
        while offset < end:
            chunk = self.log.read(offset, 1 << 20)
            if not chunk:
                return
            pos = 0
            while pos < len(chunk):
                h = check_batch(chunk, pos)
                txn = None
                if h.attributes & TRANSACTIONAL_FLAG and h.producer_id >= 0:
                    marker = -1
                    if h.attributes & CONTROL_FLAG:
                        marker = control_type(chunk, pos)
                    txn = TxnBatch(h.producer_id, h.producer_epoch, marker)
                for rec in batch_records(chunk[pos : pos + h.size]):
                    if rec[0] >= offset:
                        yield rec[0], rec[1], rec[2], txn
                offset = h.last_offset + 1
                pos += h.size
