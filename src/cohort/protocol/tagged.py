"""Drop unknown tagged fields from a request body, so kio can parse it.

The Kafka spec says a receiver must skip tagged fields it does not know; kio 0.6.5 raises
``KeyError`` instead. When that happens the codec walks the body once more with this module,
guided by the same kio schema, copies every byte except unknown tags, and parses the result.
Known tags are copied verbatim. The fast path (no unknown tags) never comes here.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import fields
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from cohort.protocol.bounds import FIXED_SIZES as _FIXED


class Truncated(ValueError):
    """The body ended inside a field."""


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Decode an unsigned varint at ``pos``; return (value, next position)."""
    value = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise Truncated("varint runs past the end")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 35:
            raise Truncated("varint too long")


def write_uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


@functools.cache
def _plan(entity: type) -> tuple[tuple[tuple[Any, ...], ...], frozenset[int]]:
    """Per entity type: the untagged fields as (shape, detail, nullable) and the known tags."""
    plan = []
    tags = set()
    for f in fields(entity):
        tag = get_field_tag(f)
        if tag is not None:
            tags.add(int(tag))
            continue
        cls = classify_field(f)
        nullable = is_optional(f)
        if isinstance(cls, EntityField):
            plan.append(("entity", cls.type_, nullable))
        elif isinstance(cls, EntityTupleField):
            plan.append(("entities", cls.type_, nullable))
        elif isinstance(cls, PrimitiveTupleField):
            plan.append(("primitives", get_schema_field_type(f), nullable))
        else:
            plan.append(("primitive", get_schema_field_type(f), nullable))
    return tuple(plan), frozenset(tags)


class _Scrubber:
    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self.out = bytearray()
        self.dropped = 0

    def _need(self, pos: int, n: int) -> int:
        if n < 0 or pos + n > len(self.buf):
            raise Truncated("field runs past the end of the body")
        return pos + n

    def _copy(self, start: int, end: int) -> None:
        self.out += self.buf[start:end]

    def primitive(self, kafka_type: str, pos: int, flexible: bool) -> int:
        start = pos
        size = _FIXED.get(kafka_type)
        if size is not None:
            pos = self._need(pos, size)
        elif flexible:
            n, pos = read_uvarint(self.buf, pos)
            pos = self._need(pos, n - 1 if n else 0)
        elif kafka_type == "string":
            pos = self._need(pos, 2)
            (n,) = struct.unpack_from(">h", self.buf, start)
            pos = self._need(pos, max(n, 0))
        else:
            pos = self._need(pos, 4)
            (n,) = struct.unpack_from(">i", self.buf, start)
            pos = self._need(pos, max(n, 0))
        self._copy(start, pos)
        return pos

    def array_length(self, pos: int, flexible: bool) -> tuple[int, int]:
        start = pos
        if flexible:
            n, pos = read_uvarint(self.buf, pos)
            count = n - 1
        else:
            pos = self._need(pos, 4)
            (count,) = struct.unpack_from(">i", self.buf, start)
        self._copy(start, pos)
        return max(count, 0), pos

    def entity(self, entity: type, pos: int) -> int:
        flexible = entity.__flexible__
        plan, known = _plan(entity)
        for shape, detail, nullable in plan:
            if shape == "primitive":
                pos = self.primitive(detail, pos, flexible)
            elif shape == "primitives":
                count, pos = self.array_length(pos, flexible)
                for _ in range(count):
                    pos = self.primitive(detail, pos, flexible)
            elif shape == "entity":
                if nullable:
                    marker = self.buf[self._need(pos, 1) - 1]
                    self._copy(pos, pos + 1)
                    pos += 1
                    if marker == 0xFF:
                        continue
                pos = self.entity(detail, pos)
            else:
                count, pos = self.array_length(pos, flexible)
                for _ in range(count):
                    pos = self.entity(detail, pos)
        if flexible:
            pos = self.tags(pos, known)
        return pos

    def tags(self, pos: int, known: frozenset[int]) -> int:
        count, pos = read_uvarint(self.buf, pos)
        kept = bytearray()
        n_kept = 0
        for _ in range(count):
            start = pos
            tag, pos = read_uvarint(self.buf, pos)
            size, pos = read_uvarint(self.buf, pos)
            pos = self._need(pos, size)
            if tag in known:
                kept += self.buf[start:pos]
                n_kept += 1
            else:
                self.dropped += 1
        self.out += write_uvarint(n_kept)
        self.out += kept
        return pos


def strip_unknown_tags(entity: type, buf: bytes | memoryview, pos: int) -> bytes:
    """Return the body of ``entity`` starting at ``pos`` with unknown tagged fields removed.

    Raises :class:`Truncated` when the body ends early.
    """
    scrubber = _Scrubber(buf)
    scrubber.entity(entity, pos)
    return bytes(scrubber.out)
