"""cohort's generated response writers against kio's own: the same bytes for every response
schema cohort serves, and an error wherever kio gives one."""

from __future__ import annotations

import datetime
import io
import uuid
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer as kio_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag, get_schema_field_type, is_optional

from cohort.protocol.entities import build, nested
from cohort.protocol.versions import SUPPORTED, default_table
from cohort.protocol.writers import entity_writer, uvarint

RESPONSES = sorted({(k, v) for k, (_, lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1)})

_INTS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}
_UINTS = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}


def _primitive(ktype: str) -> st.SearchStrategy:
    if ktype in _INTS:
        bits = _INTS[ktype]
        return st.integers(-(2 ** bits), 2 ** bits - 1)
    if ktype in _UINTS:
        return st.integers(0, 2 ** _UINTS[ktype] - 1)
    return {
        "float64": st.floats(allow_nan=False),
        "bool": st.booleans(),
        "error_code": st.sampled_from(list(ErrorCode)),
        "string": st.text(max_size=12),
        "bytes": st.binary(max_size=12),
        "records": st.binary(max_size=12),
        "uuid": st.uuids(),
        "timedelta_i32": st.integers(-(2 ** 31), 2 ** 31 - 1).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        "timedelta_i64": st.integers(-(2 ** 40), 2 ** 40).map(lambda ms: datetime.timedelta(milliseconds=ms)),
        "datetime_i64": st.integers(0, 2 ** 42).map(
            lambda ms: datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)),
    }[ktype]


def entities(cls: type, depth: int = 0) -> st.SearchStrategy:
    """Instances of a kio entity class: every field a valid value of its kind, optional fields
    sometimes None, tagged fields sometimes at their default (which is then not written)."""
    parts = {}
    for f in fields(cls):
        kind = classify_field(f)
        if isinstance(kind, (EntityField, EntityTupleField)):
            one = st.deferred(lambda t=kind.type_: entities(t, depth + 1))
        else:
            one = _primitive(get_schema_field_type(f))
        value = st.lists(one, max_size=0 if depth > 3 else 3).map(tuple) if kind.is_array else one
        if is_optional(f):
            value = st.none() | value
        if get_field_tag(f) is not None:
            value = st.just(get_tagged_field_default(f)) | value
        parts[f.name] = value
    return st.builds(cls, **parts)


def kio_bytes(cls: type, entity) -> bytes:
    buf = io.BytesIO()
    kio_writer(cls)(buf, entity)
    return buf.getvalue()


def ours(cls: type, entity) -> bytes:
    buf = bytearray()
    entity_writer(cls)(buf, entity)
    return bytes(buf)


@st.composite
def responses(draw):
    api_key, version = draw(st.sampled_from(RESPONSES))
    cls = default_table().codec(api_key, version).response_type
    return cls, draw(entities(cls))


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(responses())
def test_same_bytes_as_kio_for_every_served_response(case):
    cls, entity = case
    try:
        expected = kio_bytes(cls, entity)
    except Exception:  # noqa: BLE001 - kio refuses the value: so must we
        with pytest.raises(Exception):
            ours(cls, entity)
        return
    assert ours(cls, entity) == expected


@pytest.mark.parametrize("api_key,version", RESPONSES)
def test_every_served_response_compiles_and_encodes_its_empty_form(api_key, version):
    from cohort.protocol.entities import error_response, has_top_level_error

    cls = default_table().codec(api_key, version).response_type
    entity_writer(cls)
    if has_top_level_error(cls):
        entity = error_response(cls, ErrorCode.unknown_server_error, "message")
        assert ours(cls, entity) == kio_bytes(cls, entity)


def test_values_kio_refuses_are_refused():
    cls = default_table().codec(26, 3).response_type  # EndTxn v3
    with pytest.raises(Exception):
        kio_bytes(cls, cls(throttle_time=datetime.timedelta(0), error_code=5))
    with pytest.raises(AttributeError):  # a plain int is not an ErrorCode for kio either
        ours(cls, cls(throttle_time=datetime.timedelta(0), error_code=5))
    with pytest.raises(Exception):  # out of the int32 range
        ours(cls, cls(throttle_time=datetime.timedelta(days=30), error_code=ErrorCode.none))


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 2 ** 31 - 1])
def test_uvarint(n):
    from kio.serial.writers import write_unsigned_varint

    buf = io.BytesIO()
    write_unsigned_varint(buf, n)
    assert uvarint(n) == buf.getvalue()


def test_uuid_none_is_the_zero_uuid():
    cls = default_table().codec(3, 12).response_type  # Metadata v12: topic ids
    topic = nested(cls, "topics")
    entity = build(topic, error_code=ErrorCode.none, name="t", topic_id=None, is_internal=False, partitions=(),
                   topic_authorized_operations=0)
    assert ours(topic, entity) == kio_bytes(topic, entity)
    assert uuid.UUID(int=0).bytes in ours(topic, entity)
