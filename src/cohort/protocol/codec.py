"""Request decoding and response encoding on top of kio, with kio's gaps wrapped.

A frame here is the bytes after the 4-byte size prefix. Request headers are parsed by hand
(cheap, and lets us skip header tags); bodies are checked against their schema (see
:mod:`.bounds`: kio's native reader aborts the process on a count it cannot allocate), then go
through kio's native reader. Unknown tagged fields, which kio rejects, are stripped and the body
parsed again (see :mod:`.tagged`).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

from cohort.protocol.bounds import BodyError, NullField
from cohort.protocol.tagged import Truncated, read_uvarint, strip_unknown_tags
from cohort.protocol.versions import API_VERSIONS_KEY, ApiCodec, VersionTable

_HEAD = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_CLIENT_ID_LENGTH = struct.Struct(">h")
_RESPONSE_HEAD = bytes(8)  # size, correlation id (filled in)
_FLEXIBLE_RESPONSE_HEAD = bytes(9)  # ... and an empty tag section
UNSUPPORTED_VERSION = 35


# Bodies up to this size that passed the bounds check are remembered (up to this many per API
# version), so a repeated one (a steady heartbeat, a Metadata poll) costs a dict lookup.
CHECKED_BODY_MAX = 256
CHECKED_BODIES = 4096


class MalformedRequest(ValueError):
    """The frame cannot be parsed; Kafka closes the connection in this case."""


class InvalidRequest(MalformedRequest):
    """The frame parses, but a field the schema does not allow to be null is null.

    The server answers INVALID_REQUEST where the response has a top-level error code, and
    closes the connection otherwise.
    """

    def __init__(self, message: str, api_key: int, version: int, correlation_id: int, codec: "ApiCodec") -> None:
        super().__init__(message)
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.codec = codec


class UnsupportedApi(ValueError):
    """The (api_key, version) pair is not served. ApiVersions answers it; others close."""

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported api_key={api_key} version={version}")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


@dataclass(slots=True, eq=False)
class DecodedRequest:
    """One decoded request. Not frozen: a frozen dataclass's constructor sets each field through
    `object.__setattr__`, a cost every request paid; nothing changes these after decoding."""

    api_key: int
    version: int
    correlation_id: int
    client_id: str | None
    body: Any
    codec: ApiCodec


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame, or MalformedRequest if too short."""
    if len(frame) < 8:
        raise MalformedRequest(f"frame of {len(frame)} bytes is shorter than a request header")
    return _HEAD.unpack_from(frame, 0)


def skip_request_header(frame: bytes, flexible: bool) -> tuple[str | None, int]:
    """Parse client_id (always a legacy nullable string) and, for header v2, skip its tags:
    (client_id, where the body starts)."""
    if len(frame) < 10:
        raise MalformedRequest("request header truncated")
    (n,) = _CLIENT_ID_LENGTH.unpack_from(frame, 8)
    pos = 10
    client_id = None
    if n >= 0:
        if pos + n > len(frame):
            raise MalformedRequest("client_id runs past the end of the frame")
        try:
            client_id = frame[pos : pos + n].decode()
        except UnicodeDecodeError as exc:
            raise MalformedRequest("client_id is not UTF-8") from exc
        pos += n
    elif n != -1:
        raise MalformedRequest(f"bad client_id length {n}")
    if flexible:
        if pos < len(frame) and frame[pos] == 0:  # no tags: the usual header
            return client_id, pos + 1
        try:
            count, pos = read_uvarint(frame, pos)
            for _ in range(count):
                _, pos = read_uvarint(frame, pos)
                size, pos = read_uvarint(frame, pos)
                pos += size
        except Truncated as exc:
            raise MalformedRequest(f"request header tags: {exc}") from exc
        if pos > len(frame):
            raise MalformedRequest("request header tags run past the end of the frame")
    return client_id, pos


def decode_request(frame: bytes, table: VersionTable) -> DecodedRequest:
    """Decode a whole request frame.

    Raises :class:`UnsupportedApi` for pairs not in ``table`` and :class:`MalformedRequest`
    for anything that does not parse.
    """
    api_key, version, correlation_id = peek_header(frame)
    codec = table.get(api_key, version)
    if codec is None:
        raise UnsupportedApi(api_key, version, correlation_id)
    client_id, pos = skip_request_header(frame, codec.request_header_flexible)
    end = len(frame)
    small = end - pos <= CHECKED_BODY_MAX
    if not small or frame[pos:] not in codec.checked:
        try:
            codec.check_request(frame, pos, end)
        except NullField as exc:
            raise InvalidRequest(str(exc), api_key, version, correlation_id, codec) from None
        except BodyError as exc:
            raise MalformedRequest(str(exc)) from None
        except (struct.error, IndexError):
            raise MalformedRequest("a field runs past the end of the request") from None
        if small:
            checked = codec.checked
            if len(checked) >= CHECKED_BODIES:
                checked.clear()
            checked[frame[pos:]] = None
    try:
        body, _ = codec.read_request(frame, pos)
    except KeyError as exc:
        if "tagged field" not in str(exc):
            raise MalformedRequest(f"cannot parse body: {exc!r}") from exc
        try:
            cleaned = strip_unknown_tags(codec.request_type, frame, pos)
            body, _ = codec.read_request(cleaned, 0)
        except Exception as exc2:  # noqa: BLE001 - any failure here means malformed input
            raise MalformedRequest(f"cannot parse body: {exc2!r}") from exc2
    except Exception as exc:  # noqa: BLE001 - kio raises several types on bad bytes
        raise MalformedRequest(f"cannot parse body: {exc!r}") from exc
    except BaseException as exc:
        # pyo3's PanicException (a Rust panic inside kio) derives from BaseException.
        if type(exc).__name__ != "PanicException":
            raise
        raise MalformedRequest(f"cannot parse body: {exc!r}") from None
    return DecodedRequest(api_key, version, correlation_id, client_id, body, codec)


def encode_response(correlation_id: int, codec: ApiCodec, response: Any) -> bytes:
    """Size-prefixed response frame: header v0 or v1 (as the API/version demands) + body."""
    buf = bytearray(_FLEXIBLE_RESPONSE_HEAD if codec.response_header_flexible else _RESPONSE_HEAD)
    _SIZE.pack_into(buf, 4, correlation_id)
    codec.write_response(buf, response)
    _SIZE.pack_into(buf, 0, len(buf) - 4)
    return bytes(buf)


def api_versions_fallback(correlation_id: int, ranges: dict[int, tuple[int, int]]) -> bytes:
    """The v0-format ApiVersions answer to a version we do not know: UNSUPPORTED_VERSION plus
    our ranges, so the client can retry with a version we serve (KIP-511)."""
    body = bytearray(_SIZE.pack(correlation_id))
    body += struct.pack(">hi", UNSUPPORTED_VERSION, len(ranges))
    for key in sorted(ranges):
        lo, hi = ranges[key]
        body += struct.pack(">hhh", key, lo, hi)
    return _SIZE.pack(len(body)) + bytes(body)


def frame_size(prefix: bytes) -> int:
    """The size announced by a 4-byte prefix (may be negative for garbage)."""
    return _SIZE.unpack(prefix)[0]


__all__ = [
    "API_VERSIONS_KEY",
    "DecodedRequest",
    "InvalidRequest",
    "MalformedRequest",
    "UnsupportedApi",
    "api_versions_fallback",
    "decode_request",
    "encode_response",
    "frame_size",
    "peek_header",
]


# ---------------------------------------------------------------- the client's side


class MalformedResponse(ValueError):
    """A response frame that is not the answer to the request it should answer."""


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """Size-prefixed request frame: the header the API/version demands (v1 or v2) + body."""
    from kio.serial import entity_writer

    schema = type(body)  # kio's class of this pair, or cohort's extension of it
    header = schema.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    entity_writer(header)(buf, header(request_api_key=api_key, request_api_version=version,
                                      correlation_id=correlation_id, client_id=client_id))
    entity_writer(schema)(buf, body)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame (without its size prefix)."""
    from kio.serial import entity_reader

    from cohort.protocol.versions import response_schema

    schema = response_schema(api_key, version)
    if len(frame) < 4:
        raise MalformedResponse(f"a response frame of {len(frame)} bytes")
    (correlation_id,) = _SIZE.unpack_from(frame, 0)
    start = 4 + (1 if schema.__header_schema__.__version__ >= 1 else 0)  # header v1: an empty tag buffer
    try:
        body, _ = entity_reader(schema)(frame, start)
    except Exception as exc:  # noqa: BLE001 - kio raises several types on bad bytes
        raise MalformedResponse(f"cannot parse the api {api_key} v{version} response: {exc!r}") from None
    return correlation_id, body
