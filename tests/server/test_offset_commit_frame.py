"""The OffsetCommit answer written directly (`_group_codec.offset_commit_frame`) is byte for byte
what the generic path (response entities, then the compiled writer) gives, on every version it
writes, for any topics, partitions, error codes and rejections."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from cohort.protocol.codec import encode_response
from cohort.protocol.versions import default_table
from cohort.server import _group_codec as wire

TABLE = default_table()
CODES = st.sampled_from([0, 3, 22, 25, 27, 28, 29, 110, 113])
NAMES = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=140)


@st.composite
def commits(draw):
    """(body, result, rejected) as the handler has them: topics in request order (names may repeat,
    as a request may list a topic twice), result keyed by (name, partition), rejections too."""
    topics = []
    for name in draw(st.lists(NAMES, max_size=4)):
        parts = draw(st.lists(st.integers(-1, 2**31 - 1), max_size=140))
        topics.append(SimpleNamespace(name=name, partitions=[SimpleNamespace(partition_index=p) for p in parts]))
    keys = [(t.name, p.partition_index) for t in topics for p in t.partitions]
    result = {k: draw(CODES) for k in keys if draw(st.booleans())}
    rejected = {k: ErrorCode(draw(st.sampled_from([3, 29, 100]))) for k in keys if draw(st.integers(0, 5)) == 0}
    return SimpleNamespace(topics=topics), result, rejected


@settings(max_examples=300, deadline=None)
@given(commits(), st.integers(2, 9), st.integers(-2**31, 2**31 - 1))
def test_the_direct_frame_matches_the_generic_encoder(commit, version, correlation_id):
    body, result, rejected = commit
    codec = TABLE.codec(8, version)
    generic = encode_response(correlation_id, codec, wire.offset_commit_response(
        codec.response_type, body, version, None, result, rejected))
    assert wire.offset_commit_frame(correlation_id, body, version, result, rejected) == generic


def test_versions_it_does_not_write_take_the_generic_path():
    body = SimpleNamespace(topics=[])
    assert wire.offset_commit_frame(1, body, 10, {}, {}) is None
    assert wire.offset_commit_frame(1, body, 1, {}, {}) is None


def test_lengths_at_the_varint_boundaries():
    for size in (126, 127, 128, 16382, 16383, 16384):
        body = SimpleNamespace(topics=[SimpleNamespace(name="t" * size,
                                                       partitions=[SimpleNamespace(partition_index=p) for p in range(size)])])
        for version in (7, 8, 9):
            codec = TABLE.codec(8, version)
            generic = encode_response(5, codec, wire.offset_commit_response(codec.response_type, body, version, None, {}, {}))
            assert wire.offset_commit_frame(5, body, version, {}, {}) == generic, (size, version)
