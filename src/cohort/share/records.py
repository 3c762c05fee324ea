"""Where share-partitions read the records they hand out: the broker's own partition logs
(`LocalShareRecords`), or, in front of an upstream, the upstream's partition leaders
(`cohort.upstream.share_records`). Both answer the same few questions, so the share-partition
manager keeps one code path for acquiring, whichever holds the records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from kio.schema.errors import ErrorCode

E = ErrorCode
EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps


@dataclass(frozen=True, slots=True)
class Read:
    """One partition's answer: error, whole batches from the offset asked, the aborted
    transactions among them (read_committed), and the partition's log start offset (-1 if unknown)."""

    code: int
    data: bytes = b""
    aborted: tuple | list = ()
    log_start: int = -1


class LocalShareRecords:
    """The broker's partition logs. Appends wake waiting share fetches through the broker's
    append listeners, so `wait_for_records` is never needed here."""

    remote = False

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    def topic_by_id(self, topic_id: Any) -> Any:
        return self.broker.topic_by_id(topic_id)

    def topic(self, name: str) -> Any:
        return self.broker.topics.get(name)

    def high_watermark(self, topic: str, partition: int) -> int:
        return self.broker.high_watermark(topic, partition)

    def log_start(self, topic: str, partition: int) -> int:
        log_ = self.broker.log(topic, partition)
        return -1 if log_ is None else log_.start_offset

    async def read(self, topic: str, partition: int, offset: int, max_bytes: int, read_committed: bool,
                   allow_oversize: bool = True) -> Read:
        if read_committed:
            code, data, aborted = self.broker.read_committed(topic, partition, offset, max_bytes,
                                                             allow_oversize=allow_oversize)
        else:
            code, data = self.broker.read(topic, partition, offset, max_bytes, allow_oversize=allow_oversize)
            aborted = ()
        return Read(code, data, aborted, self.log_start(topic, partition))

    async def offset_for(self, topic: str, partition: int, timestamp: int) -> int:
        log_ = self.broker.log(topic, partition)
        if log_ is None:
            return 0
        if timestamp == EARLIEST:
            return log_.start_offset
        end = self.broker.high_watermark(topic, partition)
        if timestamp == LATEST:
            return end
        found = log_.offset_for_timestamp(timestamp)
        return end if found is None else found[0]

    async def wait_for_records(self, keys: Iterable[tuple[str, int]], timeout: float, read_committed: bool) -> None:
        raise NotImplementedError("local appends wake share fetches through the broker's append listeners")

    async def close(self) -> None:
        pass
