"""What every librdkafka client that cohort makes for itself is set up with.

librdkafka 2.10 and later "re-bootstrap" when every broker they know is down, which for a
one-node cohort is every restart. Its open bugs then leave clients stuck: a transactional
producer's send_offsets_to_transaction() waits forever despite its timeout
(confluentinc/librdkafka#5456), and an admin client that cached several groups' coordinators
never asks them again (#5511). With ``metadata.recovery.strategy=none`` the client keeps the
brokers it knows and reconnects to them, which is what a restart needs (checked across kill -9
restarts in tests/e2e/test_restart_clients.py). A restart takes about a second, so the
reconnect backoff is capped there rather than at librdkafka's 10 s.

The caller's own settings win (a tool's --command-config, the upstream.* settings).
"""

from __future__ import annotations

from typing import Any, Mapping

RESTART_SAFE: Mapping[str, Any] = {"metadata.recovery.strategy": "none", "reconnect.backoff.max.ms": 1000}


def client_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` on top of the restart-safe defaults."""
    return {**RESTART_SAFE, **settings}
