"""Share groups in front of an upstream: where the share-partitions' state lives and who serves it.

* **One owner per share group.** A share group's share-partitions are served by the instance
  that serves the group itself: the owner of the group's coordinator shard. Shard k of the share
  coordinator holds the state of the share-partitions of the groups in group shard k, so a
  group, its members, its assignment and its share-partitions' state move between instances
  together, and no second ownership protocol is needed.
* **The state lives in the upstream**: shard k is partition k of `upstream.share.state.topic`
  (compacted, as many partitions as the groups' topic), written through transactional id
  `cohort-<cluster>-share-<k>`. Loading it (`taken`, called once the group shard is loaded
  here) bumps that id's producer epoch, so the previous owner's writes are refused from then on,
  and reads the partition read_committed from its start.
* **Handing over** (`given_up`): the shard stops being served, its appends in flight finish, and
  the share-partitions and share sessions of its groups are dropped from memory. What the old
  owner's consumers held is not written: the new owner finds those records available again with
  their delivery counts, as after a lock timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from cohort.coordinator_common.runtime import CoordinatorRuntime
from cohort.upstream import UpstreamLogError, UpstreamRecordLog, ensure_topic, transactional_id

log = logging.getLogger("cohort.share")
E = ErrorCode
RETRY_S = 2.0
NOT_READY = "the share coordinator's state topic on the upstream is not ready"


class UpstreamShareState:
    """See the module docstring. ``manager`` is the share-partition manager, ``groups`` the group
    coordinator (whose shards this follows)."""

    def __init__(self, manager: Any, groups: Any, client: Mapping[str, Any], config: Any) -> None:
        self.manager, self.groups = manager, groups
        self.client = dict(client)
        self.topic = config["upstream.share.state.topic"]
        self.cluster = config["upstream.cluster.name"]
        self.replication = config["upstream.groups.replication.factor"]
        self.timeout_s = config["upstream.request.timeout.ms"] / 1000
        self.runtimes: list[CoordinatorRuntime] = []
        self._topic_ready: asyncio.Future | None = None
        self._loading: dict[int, asyncio.Task] = {}
        self._closed = False

    # --- placement -----------------------------------------------------------------------------

    def shard_of(self, group_id: str) -> int:
        return self.groups.partition_of(self.groups.runtime_for(group_id))

    def runtime_for(self, group_id: str) -> CoordinatorRuntime:
        if not self.runtimes:
            raise LookupError(NOT_READY)
        return self.runtimes[self.shard_of(group_id)]

    def serving(self, group_id: str) -> tuple[int, str | None]:
        """(E.none, None) when the group's share-partitions are served here, else why not."""
        if not self.groups.serving(group_id):
            return self.groups.unserved(group_id)
        if not self.runtimes:
            return E.coordinator_load_in_progress, NOT_READY
        runtime = self.runtimes[self.shard_of(group_id)]
        if not runtime.loaded:
            return runtime.unserved  # NOT_COORDINATOR once another instance took it over
        return E.none, None

    # --- following the group shards --------------------------------------------------------------

    async def taken(self, p: int) -> None:
        """Group shard ``p`` is served here now: load its share state (fencing the previous owner)."""
        if not await self._ready():
            return
        runtime = self.runtimes[p]
        if runtime.loaded:
            return
        task = self._loading.get(p)
        if task is None or task.done():
            task = self._loading[p] = asyncio.ensure_future(self._load(p))
        await asyncio.shield(task)

    async def _load(self, p: int, delay: float = 0.0) -> None:
        runtime = self.runtimes[p]
        await asyncio.sleep(delay)
        if runtime.lost:
            runtime.reset(self.manager.new_state_shard())
        while not self._closed and self.groups.runtimes[p].loaded:
            try:
                count, _ = await runtime.load()
                log.info("%s: share state served from here (%d records)", runtime.name, count)
                return
            except OSError as exc:
                log.error("%s: cannot load the share state from the upstream: %s; retrying in %g s",
                          runtime.name, exc, RETRY_S)
                await asyncio.sleep(RETRY_S)

    async def given_up(self, p: int) -> None:
        """Group shard ``p`` goes to another instance (or was lost to it): stop serving its share
        state and forget its share-partitions (see the module docstring)."""
        task = self._loading.pop(p, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if not self.runtimes:
            return
        self.manager.forget_groups(lambda group_id: self.shard_of(group_id) == p)
        runtime = self.runtimes[p]
        await runtime.stop_serving()
        await runtime.hand_over(self.manager.new_state_shard())
        runtime.owned = True  # served again as soon as its group shard is

    def _lost(self, p: int, fenced: bool) -> None:
        """Shard ``p``'s state log refused a write: what this instance holds of its groups is
        dropped at once. Taken over by another instance (fenced), it loads again only once its
        group shard is taken here again; lost to a failure of the upstream, it is loaded again
        (fresh) once the upstream answers, while its group shard is still served here."""
        self.manager.forget_groups(lambda group_id: self.shard_of(group_id) == p)
        if not fenced and not self._closed:
            self._loading[p] = asyncio.ensure_future(self._load(p, delay=RETRY_S))

    async def _ready(self) -> bool:
        """The state topic exists with one partition per group shard (created on first need)."""
        if self._topic_ready is None:
            self._topic_ready = asyncio.ensure_future(self._ensure_topic())
        return await asyncio.shield(self._topic_ready)

    async def _ensure_topic(self) -> bool:
        shards = len(self.groups.runtimes)
        while not self._closed:
            try:
                _, count = await asyncio.get_running_loop().run_in_executor(
                    None, ensure_topic, self.client, self.topic, shards, self.replication, self.timeout_s)
            except UpstreamLogError as exc:
                log.error("%s; retrying in %g s", exc, RETRY_S)
                await asyncio.sleep(RETRY_S)
                continue
            if count != shards:
                log.error("upstream topic %s has %d partitions, but the groups have %d shards: share groups are "
                          "not served (delete the topic, or give it %d partitions)", self.topic, count, shards, shards)
                return False
            self.runtimes = [self.manager.state_runtime(
                f"{self.topic}-{k}", UpstreamRecordLog(self.topic, k, transactional_id(self.cluster, k, "share"),
                                                       self.client, timeout_s=self.timeout_s),
                on_lost=lambda reason, fenced, k=k: self._lost(k, fenced))
                for k in range(shards)]
            return True
        return False

    async def close(self) -> None:
        self._closed = True
        for task in self._loading.values():
            task.cancel()
        await asyncio.gather(*self._loading.values(), return_exceptions=True)
        for runtime in self.runtimes:
            runtime.unload()
        await asyncio.gather(*(r.log.close() for r in self.runtimes), return_exceptions=True)
