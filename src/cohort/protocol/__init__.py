"""Kafka wire protocol: framing, request/response codec on top of kio, version table, record batches.

Sans-IO: everything here works on bytes; sockets live in :mod:`cohort.server`.
"""

from cohort.protocol.codec import (
    DecodedRequest,
    MalformedRequest,
    UnsupportedApi,
    decode_request,
    encode_response,
    peek_header,
)
from cohort.protocol.versions import VersionTable

__all__ = [
    "DecodedRequest",
    "MalformedRequest",
    "UnsupportedApi",
    "VersionTable",
    "decode_request",
    "encode_response",
    "peek_header",
]
