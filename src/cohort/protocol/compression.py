"""Decompression of record batch payloads, for the few places that must read records inside a
compressed batch (ListOffsets by timestamp, validation of compacted topics' keys).

Kafka's codecs: 1 gzip, 2 snappy (as written by snappy-java: the "xerial" framing of raw
snappy blocks, or plain raw snappy from some clients), 3 lz4 (the LZ4 frame format), 4 zstd.
Batches are stored as the producer sent them; cohort never recompresses.
"""

from __future__ import annotations

import struct
import zlib

import cramjam

GZIP, SNAPPY, LZ4, ZSTD = 1, 2, 3, 4
NAMES = {0: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = 16  # magic, int32 version, int32 minimum compatible version
_INT32 = struct.Struct(">i")
# A batch's records never expand beyond this (Kafka's batches are limited by message.max.bytes;
# this bounds what a hostile batch can make the broker allocate).
MAX_DECOMPRESSED = 256 * 1024 * 1024


class CompressionError(ValueError):
    """The payload cannot be decompressed with the batch's codec."""


def decompress(codec: int, payload: bytes | bytearray | memoryview) -> bytes:
    try:
        if codec == GZIP:
            d = zlib.decompressobj(wbits=47)  # gzip or zlib header
            out = d.decompress(payload, MAX_DECOMPRESSED)
            if d.unconsumed_tail:
                raise CompressionError(f"gzip payload expands beyond {MAX_DECOMPRESSED} bytes")
            return out
        if codec == SNAPPY:
            return _snappy(bytes(payload))
        if codec == LZ4:
            return bytes(cramjam.lz4.decompress(bytes(payload)))
        if codec == ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(payload)))
    except CompressionError:
        raise
    except Exception as exc:  # noqa: BLE001 - each codec has its own error types
        raise CompressionError(f"{NAMES.get(codec, codec)} payload cannot be decompressed: {exc}") from None
    raise CompressionError(f"unknown compression codec {codec}")


def _snappy(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = _XERIAL_HEADER
    while pos < len(data):
        if pos + 4 > len(data):
            raise CompressionError("xerial snappy block length is cut short")
        (n,) = _INT32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise CompressionError("xerial snappy block runs past the payload")
        out += cramjam.snappy.decompress_raw(data[pos : pos + n])
        if len(out) > MAX_DECOMPRESSED:
            raise CompressionError(f"snappy payload expands beyond {MAX_DECOMPRESSED} bytes")
        pos += n
    return bytes(out)


def compress(codec: int, data: bytes) -> bytes:
    """Compress a batch payload the way Kafka's Java client does (tools and tests write
    batches with it; the broker itself never recompresses)."""
    if codec == GZIP:
        c = zlib.compressobj(wbits=31)
        return c.compress(data) + c.flush()
    if codec == SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(data))
        return _XERIAL_MAGIC + _INT32.pack(1) + _INT32.pack(1) + _INT32.pack(len(block)) + block
    if codec == LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise CompressionError(f"unknown compression codec {codec}")
