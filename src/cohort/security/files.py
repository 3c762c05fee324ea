"""Owner-only files: the data directory holds credentials, keys and every group's offsets.

The broker sets its umask to 077 at start (new directories 0700, files 0600) and tightens the
data directory itself; files written here go through :func:`replace_atomically`. Secrets that
cohort reads from elsewhere (keys, credential files) draw a WARNING when others can read them.
"""

from __future__ import annotations

import logging
import os
import stat

_log = logging.getLogger("cohort.security")


def restrict_new_files() -> None:
    """Everything the process creates from now on is owner-only."""
    os.umask(0o077)


def tighten(directory: str) -> None:
    """Make ``directory`` owner-only (0700) if it is not."""
    mode = stat.S_IMODE(os.stat(directory).st_mode)
    if mode & 0o077:
        os.chmod(directory, mode & 0o700)
        _log.info("%s was readable by others (mode %o); made it owner-only", directory, mode)


def warn_if_loose(path: str) -> None:
    """WARNING if a secret at ``path`` is readable or writable by group or others."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return
    if mode & 0o077:
        _log.warning("%s is accessible to other users (mode %o); it holds secrets: chmod 600 it", path, mode)


def replace_atomically(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` durably: owner-only temp file, fsync, rename, fsync the directory."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
