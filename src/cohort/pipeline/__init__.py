"""Spark jobs over consumer-group lag: synthetic fleets (`simulate`) and assignor comparison (`evaluate`).

The layout of lag samples is defined once in `cohort.pipeline.layout` (and documented in
docs/pipeline.md); every job reads and writes through it. Nothing here imports pyspark at import
time, so `cohort` without the `pipeline` extra still starts.
"""
