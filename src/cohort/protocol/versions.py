"""Which (api_key, version) pairs cohort serves, with their kio readers and writers built once.

Building kio readers/writers costs about 10 ms per pair, so the table is built once per process
(at server start) and shared. The ranges are chosen so every real client negotiates a version
it handles (see docs/broker.md): the maxima cover what librdkafka, kafka-python, aiokafka,
kcat and kafkajs send; the minima are kio's (Kafka 4 removed older versions).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from cohort.protocol import extensions
from cohort.protocol.bounds import body_checker
from cohort.protocol.writers import entity_writer as response_writer

# api_key -> (name, min_version, max_version) that cohort can decode and answer.
SUPPORTED: dict[int, tuple[str, int, int]] = {
    0: ("Produce", 3, 10),
    1: ("Fetch", 4, 16),
    2: ("ListOffsets", 1, 7),
    3: ("Metadata", 0, 13),
    8: ("OffsetCommit", 2, 10),
    9: ("OffsetFetch", 1, 10),
    10: ("FindCoordinator", 0, 6),
    11: ("JoinGroup", 0, 9),
    12: ("Heartbeat", 0, 4),
    13: ("LeaveGroup", 0, 5),
    14: ("SyncGroup", 0, 5),
    15: ("DescribeGroups", 0, 5),
    16: ("ListGroups", 0, 5),
    17: ("SaslHandshake", 0, 1),
    18: ("ApiVersions", 0, 4),
    19: ("CreateTopics", 2, 7),
    20: ("DeleteTopics", 1, 6),
    21: ("DeleteRecords", 0, 2),
    22: ("InitProducerId", 0, 4),
    23: ("OffsetForLeaderEpoch", 2, 4),
    24: ("AddPartitionsToTxn", 0, 5),
    25: ("AddOffsetsToTxn", 0, 4),
    26: ("EndTxn", 0, 4),
    27: ("WriteTxnMarkers", 1, 1),
    28: ("TxnOffsetCommit", 0, 4),
    29: ("DescribeAcls", 1, 3),
    30: ("CreateAcls", 1, 3),
    31: ("DeleteAcls", 1, 3),
    32: ("DescribeConfigs", 1, 4),
    33: ("AlterConfigs", 0, 2),
    36: ("SaslAuthenticate", 0, 2),
    37: ("CreatePartitions", 0, 3),
    42: ("DeleteGroups", 0, 2),
    44: ("IncrementalAlterConfigs", 0, 1),
    47: ("OffsetDelete", 0, 0),
    50: ("DescribeUserScramCredentials", 0, 0),
    51: ("AlterUserScramCredentials", 0, 0),
    60: ("DescribeCluster", 0, 1),
    61: ("DescribeProducers", 0, 0),
    65: ("DescribeTransactions", 0, 0),
    66: ("ListTransactions", 0, 1),
    68: ("ConsumerGroupHeartbeat", 0, 1),
    69: ("ConsumerGroupDescribe", 0, 1),
    76: ("ShareGroupHeartbeat", 1, 1),
    77: ("ShareGroupDescribe", 1, 1),
    78: ("ShareFetch", 1, 2),
    79: ("ShareAcknowledge", 1, 2),
    90: ("DescribeShareGroupOffsets", 0, 1),
    91: ("AlterShareGroupOffsets", 0, 0),
    92: ("DeleteShareGroupOffsets", 0, 0),
    # cohort's own, for client-side assignors (see cohort.protocol.extensions)
    extensions.PREPARE_ASSIGNMENT_KEY: ("ConsumerGroupPrepareAssignment", 0, 0),
    extensions.INSTALL_ASSIGNMENT_KEY: ("ConsumerGroupInstallAssignment", 0, 0),
}

API_VERSIONS_KEY = 18
API_VERSIONS_MAX = SUPPORTED[API_VERSIONS_KEY][2]


@dataclass(frozen=True, slots=True)
class ApiCodec:
    """Everything needed to decode one request version and encode its response."""

    api_key: int
    version: int
    request_type: type
    check_request: Callable[[Any, int, int], int]
    read_request: Callable[[Any, int], tuple[Any, int]]
    # Small bodies that passed check_request: a steady heartbeat repeats the same bytes, and a
    # check is a pure function of them (see codec.decode_request).
    checked: dict[bytes, None]
    request_header_flexible: bool
    response_type: type
    write_response: Callable[[bytearray, Any], None]  # appends the body (cohort.protocol.writers)
    response_header_flexible: bool


def request_schema(api_key: int, version: int) -> type:
    """The request class of a pair: cohort's extensions (cohort.protocol.extensions), else kio's."""
    own = extensions.SCHEMAS.get((api_key, version))
    return own[0] if own is not None else load_request_schema(api_key, version)


def response_schema(api_key: int, version: int) -> type:
    """The response class of a pair: cohort's extensions, else kio's."""
    own = extensions.SCHEMAS.get((api_key, version))
    return own[1] if own is not None else load_response_schema(api_key, version)


def _build(api_key: int, version: int) -> ApiCodec:
    req, resp = request_schema(api_key, version), response_schema(api_key, version)
    return ApiCodec(
        api_key=api_key,
        version=version,
        request_type=req,
        check_request=body_checker(req),
        read_request=entity_reader(req),
        checked={},
        request_header_flexible=req.__header_schema__.__version__ >= 2,
        response_type=resp,
        write_response=response_writer(resp),
        # ApiVersions responses always use header v0 (kio encodes this in the schema).
        response_header_flexible=resp.__header_schema__.__version__ >= 1,
    )


class VersionTable:
    """The codecs for every supported pair; ``get`` is a dict lookup on the hot path.

    A pair's codec is built the first time it is asked for: building all of them (about 200
    pairs, each importing kio's schema modules) cost a second of CPU at every start, most of it
    for versions no client of this process would use."""

    def __init__(self, supported: dict[int, tuple[str, int, int]] = SUPPORTED) -> None:
        self.ranges = {k: (lo, hi) for k, (_, lo, hi) in supported.items()}
        self.names = {k: name for k, (name, _, _) in supported.items()}
        self._codecs: dict[tuple[int, int], ApiCodec] = {}

    def get(self, api_key: int, version: int) -> ApiCodec | None:
        codec = self._codecs.get((api_key, version))
        if codec is None:
            found = self.ranges.get(api_key)
            if found is None or not found[0] <= version <= found[1]:
                return None
            codec = self._codecs[(api_key, version)] = _build(api_key, version)
        return codec

    def codec(self, api_key: int, version: int) -> ApiCodec:
        codec = self.get(api_key, version)
        if codec is None:
            raise KeyError((api_key, version))
        return codec

    def pairs(self) -> list[tuple[int, int]]:
        """Every supported (api_key, version)."""
        return [(k, v) for k, (lo, hi) in self.ranges.items() for v in range(lo, hi + 1)]


@functools.cache
def default_table() -> VersionTable:
    """The process-wide table."""
    return VersionTable()
