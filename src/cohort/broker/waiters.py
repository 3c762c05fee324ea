"""Wake Fetch long-polls when data is appended to a partition they wait on."""

from __future__ import annotations

import asyncio
from typing import Iterable


class AppendWaiters:
    def __init__(self) -> None:
        self._by_key: dict[tuple[str, int], set[asyncio.Future]] = {}

    def notify(self, topic: str, partition: int) -> None:
        futures = self._by_key.pop((topic, partition), None)
        if futures:
            for fut in futures:
                if not fut.done():
                    fut.set_result(None)

    async def wait(self, keys: Iterable[tuple[str, int]], timeout: float) -> bool:
        """Wait until one of ``keys`` gets an append or ``timeout`` seconds pass; True if woken."""
        fut = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._by_key.setdefault(key, set()).add(fut)
        try:
            await asyncio.wait_for(fut, timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            for key in keys:
                waiting = self._by_key.get(key)
                if waiting is not None:
                    waiting.discard(fut)
                    if not waiting:
                        del self._by_key[key]
