"""Burrow's consumer-lag evaluation rules, over a window of lag samples of one partition.

Burrow judges a partition by the window of its last commits; `cohort pipeline lag` has samples
(committed offset, lag, owner at each sample time) rather than commits, so the rules are stated
over samples, checked in this order (docs/pipeline.md, "Status"):

1. no sample in the window has a committed offset -> None (not evaluated: nothing to judge);
2. some sample has lag 0 -> OK (the consumer caught up within the window);
3. the committed offset went down between two samples -> ERR (Burrow's REWIND);
4. the committed offset never moved, lag > 0 throughout, and nobody owns the partition at the
   last sample -> STOP (the consumer stopped: no member is there to commit);
5. the committed offset never moved, lag > 0 throughout, and a member owns it -> STALL (a live
   consumer that makes no progress);
6. the committed offset moved, but lag never went down between two samples -> WARN (keeping
   pace at best, never catching up);
7. otherwise -> OK.

Rules 3-6 need at least two samples with a committed offset; with one, a lagging partition is OK.
A group's status is the worst of its partitions': OK < WARN < ERR, with STOP and STALL counting as
ERR (as Burrow does).
"""

from __future__ import annotations

from collections.abc import Sequence

OK, WARN, ERR, STOP, STALL = "OK", "WARN", "ERR", "STOP", "STALL"
GROUP_LEVEL = {OK: OK, WARN: WARN, ERR: ERR, STOP: ERR, STALL: ERR}
SEVERITY = {OK: 0, WARN: 1, STALL: 2, STOP: 3, ERR: 4}


def partition_status(committed: Sequence[int | None], lags: Sequence[int | None], owned_at_end: bool) -> str | None:
    """The status of one partition from its samples in time order (oldest first)."""
    points = [(c, lag) for c, lag in zip(committed, lags) if c is not None and lag is not None]
    if not points:
        return None
    offsets = [c for c, _ in points]
    window = [lag for _, lag in points]
    if min(window) == 0:
        return OK
    if len(points) < 2:
        return OK
    if any(b < a for a, b in zip(offsets, offsets[1:])):
        return ERR
    if offsets[0] == offsets[-1]:
        return STALL if owned_at_end else STOP
    if all(b >= a for a, b in zip(window, window[1:])):
        return WARN
    return OK


def group_status(statuses: Sequence[str | None]) -> str:
    """Burrow's group status: the worst partition's, with STOP and STALL read as ERR."""
    worst = max((SEVERITY[s] for s in statuses if s is not None), default=0)
    name = next(s for s, v in SEVERITY.items() if v == worst)
    return GROUP_LEVEL[name]
