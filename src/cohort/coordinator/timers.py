"""Keyed timers with explicit time, in the manner of Kafka's `CoordinatorTimer`.

`schedule(key, deadline, payload)` replaces any timer with the same key; `cancel(key)` forgets it;
`pop_expired(now)` returns the payloads whose deadline is <= now, in deadline order, and forgets
them. A replaced or cancelled timer never fires. Nothing here reads a clock.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any


class Timers:
    __slots__ = ("_entries", "_heap", "_seq")

    def __init__(self) -> None:
        self._entries: dict[str, tuple[int, int, Any]] = {}
        self._heap: list[tuple[int, int, str]] = []
        self._seq = itertools.count()

    def schedule(self, key: str, deadline: int, payload: Any) -> None:
        seq = next(self._seq)
        self._entries[key] = (deadline, seq, payload)
        heapq.heappush(self._heap, (deadline, seq, key))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._entries):
            self._compact()

    def cancel(self, key: str) -> None:
        self._entries.pop(key, None)

    def deadline(self, key: str) -> int | None:
        entry = self._entries.get(key)
        return None if entry is None else entry[0]

    def payload(self, key: str) -> Any:
        entry = self._entries.get(key)
        return None if entry is None else entry[2]

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def next_deadline(self) -> int | None:
        heap, entries = self._heap, self._entries
        while heap:
            deadline, seq, key = heap[0]
            entry = entries.get(key)
            if entry is not None and entry[1] == seq:
                return deadline
            heapq.heappop(heap)
        return None

    def any_due(self, now: int, prefix: str) -> bool:
        """Whether a timer whose key starts with `prefix` is due at `now` (for callers choosing where
        to run `expire`, e.g. a worker thread for expensive ones).

        Only the heap's due part is visited: the items due at `now` form a subtree at its root, so
        the cost is the number of due items, not of timers (a loop wake with 100,000 session timers
        pending looks at a handful).
        """
        heap, entries = self._heap, self._entries
        size = len(heap)
        stack = [0] if size else []
        while stack:
            i = stack.pop()
            deadline, seq, key = heap[i]
            if deadline > now:
                continue
            if key.startswith(prefix):
                entry = entries.get(key)
                if entry is not None and entry[1] == seq:
                    return True
            child = 2 * i + 1
            stack.extend(range(child, min(child + 2, size)))
        return False

    def pop_expired(self, now: int) -> list[tuple[str, Any]]:
        expired = []
        heap, entries = self._heap, self._entries
        while heap and heap[0][0] <= now:
            _, seq, key = heapq.heappop(heap)
            entry = entries.get(key)
            if entry is not None and entry[1] == seq:
                del entries[key]
                expired.append((key, entry[2]))
        return expired

    def clear(self) -> None:
        self._entries.clear()
        self._heap.clear()

    def _compact(self) -> None:
        self._heap = [(d, s, k) for k, (d, s, _) in self._entries.items()]
        heapq.heapify(self._heap)
