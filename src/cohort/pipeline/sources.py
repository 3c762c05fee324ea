"""Spark Python data sources over a live cluster: `cohort-lag` (batch + streaming) and `cohort-records`.

    spark.read.format("cohort-lag").option("bootstrap", "host:9092").load()            # one sample now
    spark.readStream.format("cohort-lag").option("bootstrap", "host:9092").load()      # one sample per micro-batch
    spark.read.format("cohort-records").option("bootstrap", "host:9092").load()        # the coordinator log, decoded
    spark.readStream.format("cohort-records").option("bootstrap", "host:9092").load()  # and what is appended to it

`register(spark)` makes both formats known to a session. Option `table` picks the rows of
`cohort-lag`: `partitions` (default) or `members` in the layout of `cohort.pipeline.layout`, or
`all` (both kinds in one wide frame, with a `kind` column: what `cohort pipeline lag` reads, so
both tables come from the same sweep). The streaming offset is `{"seq": N}`, the sample sequence:
each micro-batch takes the next sample, and a query restarted from its checkpoint continues after
the last committed one, so no sample number is written twice. The sweep itself happens in
`read()`, on an executor, at the time the batch runs.

`cohort-records` streams by log offset: `{"offset": N}` is the next offset of the
`__consumer_offsets` partition to read, each micro-batch reads the records appended since the last
(up to the end offset when the batch was planned), and a restarted query continues after the last
committed batch, so no record is read twice. Option `startingOffsets` = `earliest` (default: the
whole history first) or `latest` (only what is appended from now on) applies to a query without a
checkpoint.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from cohort.pipeline import layout, wire

TABLES = (layout.PARTITIONS_TABLE, layout.MEMBERS_TABLE, "all")


class SourceOptionError(ValueError):
    """A missing or bad option of a cohort data source."""


def _bootstrap(options) -> str:
    bootstrap = options.get("bootstrap")
    if not bootstrap:
        raise SourceOptionError("option 'bootstrap' (HOST:PORT) is required")
    return bootstrap


def _timeout(options) -> float:
    try:
        value = float(options.get("timeout", "15"))
    except ValueError:
        value = 0.0
    if value <= 0:
        raise SourceOptionError(f"option 'timeout': expected seconds > 0, got {options.get('timeout')!r}")
    return value


def _arrow_schema(table: str):
    return {layout.PARTITIONS_TABLE: layout.PARTITION_SCHEMA, layout.MEMBERS_TABLE: layout.MEMBER_SCHEMA}.get(
        table, wire.SAMPLE_SCHEMA)


class _Sample(InputPartition):
    def __init__(self, seq: int):
        super().__init__(seq)
        self.seq = seq


def _sample_batches(bootstrap: str, table: str, seq: int, timeout: float):
    sample = wire.sample_cluster(bootstrap, seq, dt.datetime.now(dt.timezone.utc), timeout)
    if table != "all":
        sample = wire.project(sample, table)
    yield from sample.to_batches()


class LagReader(DataSourceReader):
    def __init__(self, options):
        self.bootstrap, self.timeout = _bootstrap(options), _timeout(options)
        self.table = options.get("table", layout.PARTITIONS_TABLE)
        self.seq = int(options.get("sample_seq", "0"))

    def partitions(self):
        return [_Sample(self.seq)]

    def read(self, partition):
        yield from _sample_batches(self.bootstrap, self.table, partition.seq, self.timeout)


class LagStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are sample sequences; every micro-batch is exactly one new sample."""

    def __init__(self, options):
        self.bootstrap, self.timeout = _bootstrap(options), _timeout(options)
        self.table = options.get("table", layout.PARTITIONS_TABLE)
        self._available_now_end: int | None = None
        self._available_now = False

    def initialOffset(self) -> dict:
        return {"seq": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = True

    def latestOffset(self, start: dict, limit) -> dict:
        following = int(start["seq"]) + 1
        if not self._available_now:
            return {"seq": following}
        if self._available_now_end is None:  # availableNow: the one sample "available now", then stop
            self._available_now_end = following
        return {"seq": self._available_now_end}

    def partitions(self, start: dict, end: dict):
        return [_Sample(seq) for seq in range(int(start["seq"]) + 1, int(end["seq"]) + 1)]

    def read(self, partition):
        yield from _sample_batches(self.bootstrap, self.table, partition.seq, self.timeout)

    def commit(self, end: dict) -> None:
        pass


class LagDataSource(DataSource):
    """`cohort-lag`: lag samples of every consumer group of a cluster, read over the wire."""

    @classmethod
    def name(cls) -> str:
        return "cohort-lag"

    def __init__(self, options):
        super().__init__(options)
        table = self.options.get("table", layout.PARTITIONS_TABLE)
        if table not in TABLES:
            raise SourceOptionError(f"option 'table': expected one of {', '.join(TABLES)}, got {table!r}")
        _bootstrap(self.options)
        _timeout(self.options)

    def schema(self):
        return layout.spark_schema(_arrow_schema(self.options.get("table", layout.PARTITIONS_TABLE)))

    def reader(self, schema):
        return LagReader(self.options)

    def streamReader(self, schema):
        return LagStreamReader(self.options)


class _Log(InputPartition):
    def __init__(self, partition: int, start: int | None = None, end: int | None = None):
        super().__init__((partition, start, end))
        self.partition, self.start, self.end = partition, start, end


def _log_partition(options) -> int:
    try:
        value = int(options.get("partition", "0"))
    except ValueError:
        value = -1
    if value < 0:
        raise SourceOptionError(f"option 'partition': expected a partition number >= 0, got {options.get('partition')!r}")
    return value


def _starting(options) -> str:
    value = options.get("startingOffsets", "earliest")
    if value not in ("earliest", "latest"):
        raise SourceOptionError(f"option 'startingOffsets': expected earliest or latest, got {value!r}")
    return value


class RecordsReader(DataSourceReader):
    def __init__(self, options):
        self.bootstrap, self.timeout = _bootstrap(options), _timeout(options)
        self.partition = _log_partition(options)

    def partitions(self):
        return [_Log(self.partition)]

    def read(self, partition):
        yield from wire.read_records(self.bootstrap, partition.partition, self.timeout)


class RecordsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are positions in the log; a micro-batch is the records between two of them."""

    def __init__(self, options):
        self.bootstrap, self.timeout = _bootstrap(options), _timeout(options)
        self.partition, self.starting = _log_partition(options), _starting(options)
        self._available_now_end: int | None = None

    def _bounds(self) -> tuple[int, int]:
        return wire.log_bounds(self.bootstrap, self.partition, self.timeout)

    def initialOffset(self) -> dict:
        first, end = self._bounds()
        return {"offset": first if self.starting == "earliest" else end}

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_end = self._bounds()[1]

    def latestOffset(self, start: dict, limit) -> dict:
        end = self._available_now_end if self._available_now_end is not None else self._bounds()[1]
        return {"offset": max(int(start["offset"]), end)}

    def partitions(self, start: dict, end: dict):
        first, last = int(start["offset"]), int(end["offset"])
        return [_Log(self.partition, first, last)] if last > first else []

    def read(self, partition):
        yield from wire.read_records(self.bootstrap, partition.partition, self.timeout,
                                     start=partition.start, end=partition.end)

    def commit(self, end: dict) -> None:
        pass


class RecordsDataSource(DataSource):
    """`cohort-records`: the coordinator's record log (`__consumer_offsets`), fetched and decoded."""

    @classmethod
    def name(cls) -> str:
        return "cohort-records"

    def __init__(self, options):
        super().__init__(options)
        _bootstrap(self.options)
        _timeout(self.options)
        _log_partition(self.options)
        _starting(self.options)

    def schema(self):
        return layout.spark_schema(wire.RECORD_SCHEMA)

    def reader(self, schema):
        return RecordsReader(self.options)

    def streamReader(self, schema):
        return RecordsStreamReader(self.options)


def register(spark) -> None:
    """Make `cohort-lag` and `cohort-records` known to a session."""
    spark.dataSource.register(LagDataSource)
    spark.dataSource.register(RecordsDataSource)
