"""The few system calls the log makes when it changes files, behind one swappable object.

Segments call ``fileio.IO.pwrite(...)`` and friends instead of ``os`` directly, so tests can
install :class:`FaultyIO` and make a disk "fill up" (ENOSPC) or fail (EIO) at a chosen moment,
then give the space back, without root or a real small filesystem.
"""

from __future__ import annotations

import errno
import os


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


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        IO.fsync(fd)
    finally:
        os.close(fd)
