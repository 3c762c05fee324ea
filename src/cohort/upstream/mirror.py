"""Committed offsets copied into the upstream's own group offsets, so lag tools that read the
upstream (Burrow, kafka-lag-exporter, `kafka-consumer-groups.sh` pointed at it) keep working.

cohort is the groups' coordinator; the upstream never sees their members, so each group is an
empty group there and takes admin commits (OffsetCommit without a member, as
`kafka-consumer-groups.sh --reset-offsets` does). Every `period` the groups whose offsets changed
are written, each with its current offsets; a failure is logged and retried with the next change.
Offsets cohort deletes (OffsetDelete, DeleteGroups, expiry) are not removed upstream.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from cohort.protocol.entities import error_name
from cohort.upstream.admin import GroupAdmin
from cohort.upstream.membership import describe_error

log = logging.getLogger("cohort.upstream")


class OffsetMirror:
    def __init__(self, client: Mapping[str, Any], changes: Any, committed: Callable[[list[str]], list[Any]],
                 group_ids: Callable[[], list[str]], *, period_s: float = 1.0, timeout_s: float = 30.0) -> None:
        """``changes``: a subscription to the coordinator's record feed (`take()`);
        ``committed(group_ids)``: each group's {(topic, partition): committed value} or None."""
        self._client = dict(client)
        self._changes, self._committed, self._group_ids = changes, committed, group_ids
        self._period, self._timeout = period_s, timeout_s
        self._mirrored: dict[str, dict[tuple[str, int], int]] = {}  # what the upstream has, as far as we know
        self._admin: Any = None
        self._warned: dict[str, float] = {}

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._period)
            taken = self._changes.take()
            groups = self._group_ids() if taken is None else sorted(taken[1])
            if not groups:
                continue
            batch = {}
            for gid, offsets in zip(groups, self._committed(groups)):
                now = {tp: v.offset for tp, v in (offsets or {}).items()}
                if now and now != self._mirrored.get(gid):
                    batch[gid] = now
            if batch:
                done = await loop.run_in_executor(None, self._send, batch)
                self._mirrored.update(done)

    def _send(self, batch: dict[str, dict[tuple[str, int], int]]) -> dict[str, dict[tuple[str, int], int]]:
        """Admin-commit each group's offsets upstream; returns those the upstream took."""
        if self._admin is None:
            self._admin = GroupAdmin(self._client, self._timeout)
        done = {}
        for gid, offsets in batch.items():
            try:
                result = self._admin.commit_offsets(gid, offsets)
                failed = sorted(tp for tp, code in result.items() if code)
                if failed:
                    (t, p) = failed[0]
                    raise RuntimeError(f"{len(failed)} partitions refused, e.g. {t}-{p}: {error_name(result[t, p])}")
                done[gid] = offsets
            except Exception as exc:  # noqa: BLE001 - logged; retried when the group's offsets change again
                now = time.monotonic()
                if now - self._warned.get(gid, float("-inf")) >= 60:
                    self._warned[gid] = now
                    log.warning("cannot mirror the offsets of group %s to the upstream: %s", gid,
                                describe_error(exc))
        return done
