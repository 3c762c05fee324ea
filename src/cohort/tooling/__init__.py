"""Operator tooling talking to a broker over the Kafka admin APIs."""
