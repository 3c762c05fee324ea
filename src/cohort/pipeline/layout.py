"""The on-disk layout of lag samples: Parquet tables under one directory.

    DIR/partitions/date=YYYY-MM-DD/group_bucket=B/part-*.parquet     one row per (sample, group, topic, partition)
    DIR/members/date=YYYY-MM-DD/group_bucket=B/part-*.parquet        one row per (sample, group, member)
    DIR/group_samples/date=YYYY-MM-DD/group_bucket=B/part-*.parquet  one row per (sample, group): the same
                                                                      facts grouped (`cohort.pipeline.group_samples`)

Members live in their own table because a member that owns no partition (idle, or just joined)
has no partition row to ride on, yet the evaluator must know it exists; and its subscription and
rack would otherwise repeat on every partition it owns. Replica racks are a property of a
partition, so they stay a column of the partition rows.

`group_bucket` is crc32(UTF-8 group id) mod BUCKETS rather than the group id itself: a fleet of a
million groups would otherwise be a million directories (and at least as many tiny files per
write), which no file lister handles well. One group's rows are always in one bucket, so a query
for a group reads 1/BUCKETS of a day, and files are sorted by group so Parquet statistics skip the rest.
"""

from __future__ import annotations

import zlib

import pyarrow as pa

BUCKETS = 64
PARTITIONS_TABLE = "partitions"
MEMBERS_TABLE = "members"
PARTITION_COLUMNS = ("date", "group_bucket")

PARTITION_SCHEMA = pa.schema(
    [
        pa.field("sample_seq", pa.int64(), nullable=False),
        pa.field("sample_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("group_state", pa.string()),
        pa.field("group_type", pa.string()),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("committed_offset", pa.int64()),
        pa.field("start_offset", pa.int64()),
        pa.field("end_offset", pa.int64()),
        pa.field("lag", pa.int64()),
        pa.field("member_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("client_host", pa.string()),
        pa.field("replica_racks", pa.list_(pa.string())),
    ]
)

MEMBER_SCHEMA = pa.schema(
    [
        pa.field("sample_seq", pa.int64(), nullable=False),
        pa.field("sample_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("member_id", pa.string(), nullable=False),
        pa.field("instance_id", pa.string()),
        pa.field("client_id", pa.string()),
        pa.field("client_host", pa.string()),
        pa.field("rack", pa.string()),
        pa.field("subscribed_topics", pa.list_(pa.string())),
    ]
)


def group_bucket(group_id: str) -> int:
    """The bucket a group's rows are written under; the same value as `bucket_column` in Spark."""
    return zlib.crc32(group_id.encode("utf-8")) % BUCKETS


def bucket_column(group_col="group_id"):
    """Spark expression for `group_bucket`: crc32 of the UTF-8 group id, mod BUCKETS."""
    from pyspark.sql import functions as F

    col = F.col(group_col) if isinstance(group_col, str) else group_col
    return (F.crc32(col.cast("binary")) % BUCKETS).cast("int")


def with_partition_columns(df):
    """A Spark DataFrame of sample rows with the layout's partition columns (`date`, `group_bucket`) added."""
    from pyspark.sql import functions as F

    return df.withColumn("date", F.to_date("sample_time")).withColumn("group_bucket", bucket_column())


def write_partitioned(df, path: str, order, compression: str | None = None) -> None:
    """Write a DataFrame with the partition columns as one layout table under `path` (replacing it):
    partitioned by date and bucket, each file sorted by `order` (column names), compressed with
    `compression` (a Parquet codec name; None: the session's default)."""
    writer = df.sortWithinPartitions(*PARTITION_COLUMNS, *order).write.mode("overwrite")
    if compression is not None:
        writer = writer.option("compression", compression)
    writer.partitionBy(*PARTITION_COLUMNS).parquet(path)


def spark_schema(schema: pa.Schema):
    """The Spark StructType matching one of the Arrow schemas above."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
