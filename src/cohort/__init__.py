"""cohort: a Kafka-compatible broker built around a complete consumer group coordinator."""

__version__ = "0.1.0"
