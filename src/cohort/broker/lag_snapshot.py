"""Lag from snapshot files written by the pipeline, for brokers whose end offsets are not local.

With `group.lag.source` set to a directory instead of `local`, the coordinator's lag comes from the
newest snapshot file in it. The format is deliberately small, so any job can write it:

    DIR/lag-<sample_seq, 20 digits>.json      e.g. lag-00000000000000000042.json

    {"format": "cohort-lag-snapshot/1",
     "sample_seq": 42,                          # increases with every snapshot
     "sample_time": "2026-07-01T00:00:10Z",      # when the offsets were read (ISO 8601, UTC)
     "groups": {"orders": {"payments": [120, 0, null, 5]}}}   # group -> topic -> lag per partition

A lag is `max(end offset - committed offset, 0)`; `null` (never committed) counts as 0, the reading
of the default reset policy `latest`. Writers write `lag-....json.tmp` and rename it, so a reader
never sees half a file; names that do not match are ignored, and the newest is the largest
sequence number.

`refresh()` does the file I/O: the server calls it off the event loop's critical path (before a
lag evaluation). A provider call (`provider(group_id, topic_id, num_partitions)`, the shard's
`lag_provider` signature) only reads the snapshot held in memory. A bad file (unreadable, not JSON,
wrong shape) is reported by `refresh()` in `error` and the previous snapshot stays in use.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

FORMAT = "cohort-lag-snapshot/1"
_NAME = re.compile(r"lag-(\d{20})\.json")


def snapshot_name(sample_seq: int) -> str:
    """The file name of a snapshot (what a writer renames its temporary file to)."""
    return f"lag-{sample_seq:020d}.json"


def write_snapshot(directory: str, sample_seq: int, sample_time: str,
                   groups: Mapping[str, Mapping[str, Sequence[int | None]]]) -> str:
    """Write one snapshot atomically (temporary file, fsync, rename); returns its path."""
    path = os.path.join(directory, snapshot_name(sample_seq))
    tmp = path + ".tmp"
    body = {"format": FORMAT, "sample_seq": sample_seq, "sample_time": sample_time,
            "groups": {g: {t: list(lags) for t, lags in topics.items()} for g, topics in groups.items()}}
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(body, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


class SnapshotError(ValueError):
    """A snapshot file that cannot be used."""


@dataclass(frozen=True)
class Snapshot:
    sample_seq: int
    sample_time: str
    lags: Mapping[tuple[str, str], tuple[int, ...]]  # (group, topic) -> lag per partition


def read_snapshot(path: str) -> Snapshot:
    """Parse and validate one snapshot file."""
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise SnapshotError(f"{path}: not a {FORMAT} file")
    seq, when, groups = body.get("sample_seq"), body.get("sample_time"), body.get("groups")
    if type(seq) is not int or not isinstance(when, str) or not isinstance(groups, dict):
        raise SnapshotError(f"{path}: sample_seq (int), sample_time (str) and groups (object) are required")
    lags: dict[tuple[str, str], tuple[int, ...]] = {}
    for group_id, topics in groups.items():
        if not isinstance(topics, dict):
            raise SnapshotError(f"{path}: group {group_id!r} must map topics to lag lists")
        for topic, values in topics.items():
            if not isinstance(values, list) or not all(v is None or type(v) is int for v in values):
                raise SnapshotError(f"{path}: lags of {group_id!r} / {topic!r} must be a list of integers or null")
            lags[(group_id, topic)] = tuple(0 if v is None or v < 0 else v for v in values)
    return Snapshot(seq, when, lags)


class SnapshotLagProvider:
    """The shard's lag provider over the newest snapshot in a directory."""

    def __init__(self, directory: str, topic_name: Callable[[uuid.UUID], str | None]):
        self.directory = directory
        self._topic_name = topic_name
        self.snapshot: Snapshot | None = None
        self.error: str | None = None
        self._loaded_name: str | None = None

    def newest(self) -> str | None:
        """The newest snapshot file's name, or None."""
        try:
            names = [n for n in os.listdir(self.directory) if _NAME.fullmatch(n)]
        except OSError as exc:
            self.error = f"{self.directory}: {exc.strerror or exc}"
            return None
        return max(names, default=None)

    def refresh(self) -> bool:
        """Load the newest snapshot if it is not the one in use; True if a new one was loaded."""
        name = self.newest()
        if name is None or name == self._loaded_name:
            return False
        try:
            snapshot = read_snapshot(os.path.join(self.directory, name))
        except SnapshotError as exc:
            self.error = str(exc)
            return False
        self.snapshot, self._loaded_name, self.error = snapshot, name, None
        return True

    def __call__(self, group_id: str, topic_id: uuid.UUID, num_partitions: int) -> list[int] | None:
        snapshot = self.snapshot
        name = self._topic_name(topic_id)
        if snapshot is None or name is None:
            return None
        lags = snapshot.lags.get((group_id, name))
        if lags is None:
            return None
        return list(lags[:num_partitions]) + [0] * (num_partitions - len(lags))
