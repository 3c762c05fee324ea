"""The topic metadata the coordinator reads: an immutable image supplied by the broker.

A group stores a 64-bit hash of its subscribed topics' metadata (name, id, partition count,
per-partition racks), as Kafka 4.1+ does (KIP-1101); a different hash on the next heartbeat
means a subscribed topic changed and the group epoch is bumped.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    racks: tuple[frozenset[str], ...] = ()  # per partition; empty = unknown

    def digest(self) -> bytes:
        h = hashlib.blake2b(digest_size=8)
        h.update(self.name.encode())
        h.update(b"\0")
        h.update(self.topic_id.bytes)
        h.update(self.num_partitions.to_bytes(4, "big", signed=True))
        for p, racks in enumerate(self.racks):
            h.update(p.to_bytes(4, "big"))
            h.update(",".join(sorted(racks)).encode())
            h.update(b"\0")
        return h.digest()


@dataclass(frozen=True)
class MetadataImage:
    """Topics by name and by id; `version` increases with every new image (regex records keep it)."""

    topics: tuple[TopicImage, ...] = ()
    version: int = 0
    by_name: dict[str, TopicImage] = field(init=False, repr=False, compare=False)
    by_id: dict[uuid.UUID, TopicImage] = field(init=False, repr=False, compare=False)
    _digests: dict[str, bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {t.name: t for t in self.topics})
        object.__setattr__(self, "by_id", {t.topic_id: t for t in self.topics})
        object.__setattr__(self, "_digests", {})

    @classmethod
    def of(cls, topics: Iterable[TopicImage], version: int = 0) -> "MetadataImage":
        return cls(tuple(topics), version)

    def topic(self, name: str) -> TopicImage | None:
        return self.by_name.get(name)

    def topic_names(self) -> Sequence[str]:
        return list(self.by_name)

    def topic_digest(self, name: str) -> bytes:
        digest = self._digests.get(name)
        if digest is None:
            topic = self.by_name.get(name)
            digest = b"" if topic is None else topic.digest()
            self._digests[name] = digest
        return digest

    def subscription_hash(self, names: Iterable[str]) -> int:
        """Hash of the metadata of the named topics that exist (0 when none exists)."""
        h = hashlib.blake2b(digest_size=8)
        empty = True
        for name in sorted(names):
            digest = self.topic_digest(name)
            if digest:
                h.update(digest)
                empty = False
        if empty:
            return 0
        return int.from_bytes(h.digest(), "big", signed=True) or 1

    def changed_topics(self, other: "MetadataImage") -> set[str]:
        """Names whose metadata differs between the two images (added, removed or altered)."""
        changed = {n for n in self.by_name.keys() ^ other.by_name.keys()}
        for name, topic in self.by_name.items():
            old = other.by_name.get(name)
            if old is not None and old != topic:
                changed.add(name)
        return changed


EMPTY_IMAGE = MetadataImage()
