"""An admin client for the upstream's coordinator-bound requests (DescribeGroups, OffsetCommit
of the offset mirror), replaced after every failed request.

librdkafka aborts the process (``rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0' failed``) when a group admin request timed out before its coordinator
lookup finished and the lookup succeeds later: confluentinc/librdkafka#4605, open in the
librdkafka 2.x shipped with confluent-kafka. Reproduced here: an instance following its cohort
cluster's group aborted about one second after a 40 s upstream outage ended. A client whose
request failed is dropped (destroying it cancels the lookup it left behind) and the next
request gets a new one; no request is ever retried on a client that saw a failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class GroupAdmin:
    """Blocking: call from one worker thread at a time, never from the event loop."""

    def __init__(self, client: Mapping[str, Any]) -> None:
        self._client = dict(client)
        self._admin: Any = None
        self.replaced = 0  # clients dropped after a failure

    def call(self, request: Callable[[Any], T]) -> T:
        """``request(admin)`` on the current client; on any failure the client is dropped
        (here, on this thread: its destruction waits for its threads) and the error raised."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(dict(self._client))
        try:
            return request(self._admin)
        except BaseException:
            self._admin = None
            self.replaced += 1
            raise

    def close(self) -> None:
        self._admin = None
