"""Check a request body against its schema before kio's native reader sees it.

kio 0.6.5's reader (Rust) reserves memory for an array's declared count before reading a single
element: Metadata v12 with a topic count of 2**32-1 asks for 34 GB and the process aborts
(``memory allocation of 34359738352 bytes failed``, SIGABRT; no Python handler runs). It also
reads a null (-1) array or string as ``None`` where the schema does not allow null. So every
request body is walked here first, guided by the same kio schema: each array count and each
string/bytes length is checked against the bytes left, nulls against the field's nullability,
and known tagged fields inside their declared size. Only a body that passes goes to kio, which
then never allocates more than the frame can hold.

The walk is generated as straight-line Python per entity type (built once, cached), so it costs
a few microseconds on the hot APIs (see docs/benchmarks.md, "bounded decoding").
"""

from __future__ import annotations

import functools
import struct
from dataclasses import fields
from typing import Any, Callable

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

FIXED_SIZES = {
    "int8": 1, "bool": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_FIXED = FIXED_SIZES
_VARIABLE = ("string", "bytes", "records")


class BodyError(ValueError):
    """The body does not fit its schema: a length or count past the end, a bad varint."""


class NullField(BodyError):
    """A null where the schema does not allow one (the rest of the body is well formed so far)."""


def _uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise BodyError("varint runs past the end")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:  # five bytes: an unsigned 32-bit varint at most
            raise BodyError("varint longer than five bytes")


def _kafka_type(f: Any, cls: Any) -> str:
    """The primitive type of a field ("entity" for structs and arrays of structs)."""
    if isinstance(cls, (EntityField, EntityTupleField)):
        return "entity"
    return get_schema_field_type(f)


def _null(where: str) -> None:
    raise NullField(f"{where} is null, which its schema does not allow")


def _past(where: str) -> None:
    raise BodyError(f"{where} runs past the end of the request")


class _Gen:
    """Writes one checker function per entity type into a shared namespace."""

    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "_h": struct.Struct(">h").unpack_from, "_i": struct.Struct(">i").unpack_from,
            "_uv": _uvarint, "_null": _null, "_past": _past, "BodyError": BodyError,
        }
        self.names: dict[type, str] = {}
        self.min_sizes: dict[type, int] = {}

    def checker(self, entity: type) -> str:
        name = self.names.get(entity)
        if name is not None:
            return name
        name = f"_check_{len(self.names)}_{entity.__name__}"
        self.names[entity] = name
        code = self._entity_code(entity, name)
        exec(compile(code, f"<bounds {entity.__qualname__}>", "exec"), self.ns)  # noqa: S102 - generated from kio's schema
        return name

    def min_size(self, entity: type) -> int:
        """Fewest bytes one encoded ``entity`` takes (counts times this must fit the frame)."""
        if entity not in self.min_sizes:
            size = 1 if entity.__flexible__ else 0  # the tag count
            for f in fields(entity):
                if get_field_tag(f) is not None:
                    continue
                cls = classify_field(f)
                kafka_type = _kafka_type(f, cls)
                if isinstance(cls, EntityField):
                    size += 1 if is_optional(f) else self.min_size(cls.type_)
                elif isinstance(cls, (EntityTupleField, PrimitiveTupleField)) or kafka_type in _VARIABLE:
                    size += 1 if entity.__flexible__ else (2 if kafka_type == "string" and not isinstance(cls, PrimitiveTupleField) else 4)
                else:
                    size += _FIXED[kafka_type]
            self.min_sizes[entity] = max(size, 1)
        return self.min_sizes[entity]

    def _entity_code(self, entity: type, name: str) -> str:
        flexible = entity.__flexible__
        lines = [f"def {name}(buf, pos, end):"]
        fixed = 0  # fixed-size bytes not yet added to pos
        known_tags: list[tuple[int, Any]] = []
        for f in fields(entity):
            tag = get_field_tag(f)
            if tag is not None:
                known_tags.append((int(tag), f))
                continue
            cls = classify_field(f)
            kafka_type = _kafka_type(f, cls)
            where = f"{entity.__name__}.{f.name}"
            if not isinstance(cls, (EntityField, EntityTupleField, PrimitiveTupleField)) and kafka_type in _FIXED:
                fixed += _FIXED[kafka_type]
                continue
            if fixed:
                lines.append(f"    pos += {fixed}")
                fixed = 0
            lines += ["    " + line for line in self._field_code(cls, kafka_type, is_optional(f), flexible, where)]
        if fixed:
            lines.append(f"    pos += {fixed}")
        if flexible:
            lines += ["    " + line for line in self._tags_code(known_tags, entity.__name__)]
        lines += ["    if pos > end:", f"        _past({entity.__name__!r})", "    return pos"]
        return "\n".join(lines) + "\n"

    def _count_code(self, nullable: bool, flexible: bool, where: str) -> list[str]:
        """Code leaving an array's element count in ``n`` (``-1`` for an allowed null)."""
        if flexible:  # a one-byte varint inline, longer ones in a call
            out = ["n = buf[pos]", "if n > 127:", "    n, pos = _uv(buf, pos, end)", "else:", "    pos += 1", "n -= 1"]
        else:
            out = ["n = _i(buf, pos)[0]", "pos += 4"]
        out += ["if n < 0:", "    if n != -1:", f"        raise BodyError('{where}: length ' + str(n))"]
        if not nullable:
            out += [f"    _null({where!r})"]
        return out

    def _field_code(self, cls: Any, kafka_type: str, nullable: bool, flexible: bool, where: str) -> list[str]:
        if isinstance(cls, EntityField):
            out: list[str] = []
            indent = ""
            if nullable:  # a nullable struct: int8 -1 for null, else present
                out += ["if pos >= end:", f"    _past({where!r})", "if buf[pos] == 0xFF:", "    pos += 1", "else:",
                        "    pos += 1"]
                indent = "    "
            out.append(f"{indent}pos = {self.checker(cls.type_)}(buf, pos, end)")
            return out
        if isinstance(cls, EntityTupleField):
            inner = self.checker(cls.type_)
            size = self.min_size(cls.type_)
            return self._count_code(nullable, flexible, where) + [
                f"if n * {size} > end - pos:",  # also when an earlier skip went past the end
                f"    raise BodyError('{where}: ' + str(n) + ' elements cannot fit in ' + str(end - pos) + ' bytes')",
                "for _ in range(n):",
                f"    pos = {inner}(buf, pos, end)",
            ]
        if isinstance(cls, PrimitiveTupleField):
            out = self._count_code(nullable, flexible, where)
            if kafka_type in _FIXED:
                size = _FIXED[kafka_type]
                return out + ["if n > 0:", f"    pos += n * {size}"]
            return out + [
                f"if n > end - pos:",
                f"    raise BodyError('{where}: ' + str(n) + ' elements cannot fit in ' + str(end - pos) + ' bytes')",
                "for _ in range(n):",
                *("    " + line for line in self._field_code(None, kafka_type, False, flexible, where + "[]")),
            ]
        # A string, bytes or records: skipped without a bounds check of its own. A skip past
        # the end makes the next read raise, the next count check fail (end - pos < 0) or the
        # entity's closing check fail, so nothing is allocated for it either way.
        if flexible:
            out = ["n = buf[pos]", "if n > 127:", "    n, pos = _uv(buf, pos, end)", "else:", "    pos += 1",
                   "if n > 1:", "    pos += n - 1"]
            if not nullable:
                out += ["elif n == 0:", f"    _null({where!r})"]
            return out
        if kafka_type == "string":
            out = ["n = _h(buf, pos)[0]", "pos += 2"]
        else:
            out = ["n = _i(buf, pos)[0]", "pos += 4"]
        out += ["if n > 0:", "    pos += n", "elif n < 0:", "    if n != -1:",
                f"        raise BodyError('{where}: length ' + str(n))"]
        if not nullable:
            out += [f"    _null({where!r})"]
        return out

    def _tags_code(self, known: list[tuple[int, Any]], where: str) -> list[str]:
        out = [
            "t = buf[pos]",
            "if t > 127:",
            "    t, pos = _uv(buf, pos, end)",
            "else:",
            "    pos += 1",
            "if t * 2 > end - pos:",
            f"    _past({where + ' tagged fields'!r})",
            "for _ in range(t):",
            "    tag, pos = _uv(buf, pos, end)",
            "    size, pos = _uv(buf, pos, end)",
            "    stop = pos + size",
            "    if stop > end:",
            f"        _past({where + ' tagged field'!r})",
        ]
        for tag, f in known:  # a known tag's value is parsed by kio: check it inside its size
            cls = classify_field(f)
            body = self._field_code(cls, _kafka_type(f, cls), is_optional(f), True, f"{where}.{f.name}")
            out += [f"    if tag == {tag}:", "        inner_end, end = end, stop"]
            out += ["        " + line for line in body]
            out += ["        end = inner_end", "        if pos > stop:", f"            _past({where + '.' + f.name!r})"]
        out.append("    pos = stop")
        return out


_GEN = _Gen()


CHECK_ERRORS = (BodyError, struct.error, IndexError)
"""What a checker raises: :class:`BodyError` (:class:`NullField` for a forbidden null), or
``struct.error`` / ``IndexError`` for a fixed-size field or a varint read past the buffer."""


@functools.cache
def body_checker(entity: type) -> Callable[[Any, int, int], int]:
    """``check(buf, pos, end) -> end of body``; raises one of :data:`CHECK_ERRORS`. The buffer
    must end at ``end`` for reads past it to raise (a frame does)."""
    return _GEN.ns[_GEN.checker(entity)]
