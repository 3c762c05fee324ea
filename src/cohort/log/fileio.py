"""The few system calls the log makes when it changes files, behind one swappable object.

Segments call ``fileio.IO.pwrite(...)`` and friends instead of ``os`` directly, so tests can
install :class:`FaultyIO` and make a disk "fill up" (ENOSPC) or fail (EIO) at a chosen moment,
then give the space back, without root or a real small filesystem.
"""

from __future__ import annotations

import errno
import os
import resource
import threading
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Iterator


class OsIO:
    """The real thing."""

    def open(self, path: str, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, pos: int) -> int:
        return os.pwrite(fd, data, pos)

    def write(self, fd: int, data: bytes) -> int:
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)


class FaultyIO(OsIO):
    """A disk with a byte budget and switchable failures.

    * ``space``: bytes that may still be written (``None`` = unlimited). A write larger than
      what is left writes the part that fits and then fails with ENOSPC, like a real full disk
      (a short write), so callers must cope with half-written data.
    * ``fail_fsync`` / ``fail_write``: raise EIO from fsync / from every write.
    """

    def __init__(self, space: int | None = None) -> None:
        self.space = space
        self.fail_fsync = False
        self.fail_write = False
        self.writes = 0

    def _charge(self, fd: int, data, pos: int | None) -> int:
        if self.fail_write:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        n = len(data)
        if self.space is not None and n > self.space:
            fits = self.space
            if fits:
                if pos is None:
                    os.write(fd, bytes(data[:fits]))
                else:
                    os.pwrite(fd, bytes(data[:fits]), pos)
            self.space = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.space is not None:
            self.space -= n
        self.writes += 1
        return os.write(fd, data) if pos is None else os.pwrite(fd, data, pos)

    def pwrite(self, fd: int, data, pos: int) -> int:
        return self._charge(fd, data, pos)

    def write(self, fd: int, data: bytes) -> int:
        return self._charge(fd, data, None)

    def fsync(self, fd: int) -> None:
        if self.fail_fsync:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.fsync(fd)


IO: OsIO = OsIO()


def replace_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably: a temporary file, fsynced, renamed over
    it (raises OSError; the old file is intact then)."""
    fd = IO.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        IO.write(fd, data)
        IO.fsync(fd)
    finally:
        os.close(fd)
    os.replace(path + ".tmp", path)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        IO.fsync(fd)
    finally:
        os.close(fd)


class OpenFiles:
    """A bounded, least-recently-used set of open segment files, shared by every log.

    A segment opens its file on first use and keeps it until this cache needs the slot for
    another (or the segment closes), so the number of descriptors is bounded by ``limit``, not
    by the number of partitions. Eviction closes the segment's log and index descriptors; the
    next use opens them again (on Linux an fsync through the new descriptor flushes pages
    written through the old one: they belong to the file, not the descriptor).

    Segments used from a worker thread are pinned while the thread works (:func:`worker`):
    closing a descriptor under another thread would let the number be reused by an unrelated
    file. Calls may come from any thread.
    """

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 1)
        self._lru: "OrderedDict[Any, None]" = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # lifetime count, for tests and metrics
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._lru)

    def fd(self, seg: Any) -> int:
        """``seg``'s open descriptor, opening it (and evicting another) if needed.

        Only the thread that owns the logs evicts. In a :func:`worker` context a segment used
        is pinned until the context ends, and nothing is evicted (the cache may then exceed its
        limit until the owner's next open), so no thread closes a descriptor another is using.
        """
        worker = getattr(_local, "pinned", None)
        with self._lock:
            if seg._fd < 0:
                seg._fd = seg._open_fd()
                self.opened += 1
                self._lru[seg] = None
                if worker is None and len(self._lru) > self.limit:
                    self._shrink(seg)
            else:
                self._lru.move_to_end(seg)
            if worker is not None and seg not in worker:
                worker.add(seg)
                seg._pins += 1
            return seg._fd

    def _shrink(self, keep: Any) -> None:
        for _ in range(len(self._lru)):
            if len(self._lru) <= self.limit:
                return
            victim = next(iter(self._lru))
            if victim is keep or victim._pins:
                self._lru.move_to_end(victim)
                continue
            del self._lru[victim]
            victim._close_fds()
            self.evicted += 1

    def forget(self, seg: Any) -> None:
        """``seg`` is closing: drop it (its caller closes the descriptors)."""
        with self._lock:
            self._lru.pop(seg, None)

    def unpin(self, seg: Any) -> None:
        with self._lock:
            seg._pins -= 1


_local = threading.local()


@contextmanager
def worker() -> Iterator[None]:
    """Mark this thread as a worker for the logs (compaction, a coordinator-log fsync): the
    segments it touches stay open until the block ends, and it never evicts another's."""
    pinned: set[Any] = set()
    _local.pinned = pinned
    try:
        yield
    finally:
        _local.pinned = None
        for seg in pinned:
            FILES.unpin(seg)


def in_worker(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` inside :func:`worker` (for ``run_in_executor``)."""
    with worker():
        return fn(*args)


def default_open_files_limit() -> int:
    """A quarter of the process's soft open-file limit (each cached segment may hold a log and
    an index descriptor; sockets need the rest), at least 16."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 65536
    return max(16, soft // 4)


FILES = OpenFiles(default_open_files_limit())
