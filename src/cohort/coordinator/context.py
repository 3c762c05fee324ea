"""The narrow surface a group type writes through (Kafka: the shard's coordinator context).

Each group type (consumer groups in consumer.py, classic groups in classic.py, the migration
between them in migration.py, offsets in offsets.py, lag-driven rebalancing in lag_balance.py) is
a set of functions taking a `GroupContext`. The shard owns the one context, routes requests to
the types and keeps what the context writes durable: the types never see the shard, its undo log
or its result buffers, and none of them imports the shard.

What a type may do through it:
* read and change the live state (`state`; changes only through `append`, which applies the
  record at once and makes it part of the current operation's result);
* release a parked request (`complete`), run an action once the operation has succeeded
  (`after`: timers are set only for operations that are not undone);
* schedule and cancel keyed timers (`timers`);
* read the committed view of a group (`committed_state`), the configuration, the topic image,
  the time of the operation in progress (`now`), the lag of a group's partitions;
* allocate a member id, look up an assignor;
* fence a consumer-group member (`fence_member`): removing one may turn the group back into a
  classic group, a decision of the migration between the types that the consumer type does not
  make itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cohort.assignors.api import Assignor
    from cohort.coordinator.config import CoordinatorConfig
    from cohort.coordinator.consumer_group import ConsumerGroup, ConsumerGroupMember, ShardState
    from cohort.coordinator.metadata import MetadataImage
    from cohort.coordinator.timers import Timers


class GroupContext:
    """What the shard hands to every group type; see the module docstring."""

    __slots__ = ("state", "timers", "config", "lag_balance", "append", "complete", "after", "new_member_id",
                 "committed_state", "assignor", "fence_member", "topic_filter", "_image", "_now", "_lag_provider")

    def __init__(
        self,
        state: ShardState,
        timers: Timers,
        config: CoordinatorConfig,
        *,
        lag_balance: dict,
        append: Callable[[object, object | None], None],
        complete: Callable[[int, object], None],
        after: Callable[[Callable[[], Any]], None],
        new_member_id: Callable[[], str],
        committed_state: Callable[[str], ShardState],
        assignor: Callable[[str], Assignor],
        fence_member: Callable[[ConsumerGroup, ConsumerGroupMember], None],
        image: Callable[[], MetadataImage],
        now: Callable[[], int],
        lag_provider: Callable[[], Callable],
    ) -> None:
        self.state = state
        self.timers = timers
        self.config = config
        self.lag_balance = lag_balance  # soft state of lag evaluations, by group id
        self.append = append  # (key, value | None): one record of the current operation, applied at once
        self.complete = complete  # (request id, response): release a parked request with this operation
        self.after = after  # (action): run once the current operation has succeeded
        self.new_member_id = new_member_id
        self.committed_state = committed_state  # (group id) -> the state as of the last committed offset
        self.assignor = assignor  # (name) -> Assignor
        self.fence_member = fence_member  # (group, member): remove it, or turn the group back into a classic one
        self.topic_filter: Callable[[str], bool] | None = None  # set by a heartbeat for its regexes
        self._image, self._now, self._lag_provider = image, now, lag_provider

    @property
    def image(self) -> MetadataImage:
        """The topic metadata image now installed."""
        return self._image()

    @property
    def now(self) -> int:
        """The time of the operation in progress."""
        return self._now()

    @property
    def lag_provider(self) -> Callable:
        """(group id, topic id, partitions) -> the group's lag per partition (target.LagProvider)."""
        return self._lag_provider()

    def complete_all(self, completions: Iterable[tuple[int, object]]) -> None:
        for request_id, response in completions:
            self.complete(request_id, response)

