"""Spark jobs over consumer-group lag: synthetic fleets (`simulate`), assignor comparison (`evaluate`)
and live sampling of a cluster (`lag`, over the `cohort-lag` and `cohort-records` data sources).

The layout of lag samples is defined once in `cohort.pipeline.layout` (and documented in
docs/pipeline.md); every job reads and writes through it. Nothing here imports pyspark at import
time, so `cohort` without the `pipeline` extra still starts.
"""


def register(spark) -> None:
    """Register the `cohort-lag` and `cohort-records` data sources on a SparkSession."""
    from cohort.pipeline.sources import register as register_sources

    register_sources(spark)
