"""Kafka's transaction coordinator as a sans-IO state machine, and its ``__transaction_state`` records."""
