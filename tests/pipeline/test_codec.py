"""The stored group-sample format: every wide row survives encode and decode, and scores the same."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort import assignors
from cohort.pipeline import codec
from cohort.pipeline.fleet import FleetParams, generate
from cohort.pipeline.group_samples import from_flat
from cohort.pipeline.scoring import score_batches

T0 = dt.datetime(2026, 7, 1, tzinfo=dt.timezone.utc)
NAMES = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@st.composite
def wide_rows(draw):
    """Wide rows whose values need not make sense together: the codec carries them, it does not judge them."""
    n_rows = draw(st.integers(0, 6))
    rows = []
    for seq in range(n_rows):
        topics = sorted(draw(st.sets(NAMES, max_size=4)))
        racks = sorted(draw(st.sets(NAMES, max_size=4)))
        members = sorted(draw(st.sets(NAMES, max_size=5)))
        instances = [draw(st.none() | NAMES) for _ in members]
        position = st.integers(-1, 70)
        n_parts = draw(st.integers(0, 9))
        rows.append({
            "sample_seq": seq,
            "sample_time": T0 + dt.timedelta(seconds=seq),
            "group_id": draw(NAMES),
            "topics": topics, "racks": racks, "members": members, "member_instances": instances,
            "member_racks": [draw(position) for _ in members],
            "member_topics": draw(st.lists(st.tuples(position, position), max_size=6)),
            "partition_topics": [draw(position) for _ in range(n_parts)],
            "partitions": [draw(st.integers(-1, 2**31 - 1)) for _ in range(n_parts)],
            "lags": [draw(st.integers(-1, 2**63 - 1)) for _ in range(n_parts)],
            "owners": [draw(position) for _ in range(n_parts)],
            "replica_racks": draw(st.lists(st.tuples(position, position), max_size=12)),
        })
    return rows


def wide_table(rows: list[dict]) -> pa.Table:
    columns = {}
    for field in codec.SCHEMA:
        values = [r[field.name] for r in rows]
        if field.name in codec.PACKED:
            flat = [x for v in values for item in v for x in (item if isinstance(item, tuple) else (item,))]
            counts = np.array([len(v) * (2 if field.name in ("member_topics", "replica_racks") else 1) for v in values], np.int64)
            columns[field.name] = codec.pack(counts, np.array(flat, np.int64), codec.PACKED[field.name])
        else:
            columns[field.name] = pa.array(values, field.type)
    return pa.table(columns, schema=codec.SCHEMA)


@settings(max_examples=150, deadline=None)
@given(wide_rows(), st.integers(0, 5))
def test_decode_gives_back_every_wide_row(rows, cut):
    wide = wide_table(rows)
    stored = codec.encode(wide)
    assert stored.schema.equals(codec.STORED_SCHEMA)
    batch = stored.combine_chunks().to_batches()[0] if stored.num_rows else pa.RecordBatch.from_pylist([], codec.STORED_SCHEMA)
    assert pa.Table.from_batches([codec.decode(batch)]).equals(wide)
    # A slice of a batch (as Spark's batches are cut) decodes to the same slice.
    start = min(cut, wide.num_rows)
    assert pa.Table.from_batches([codec.decode(batch.slice(start))]).equals(wide.slice(start))
    assert codec.to_pylist(stored) == codec.to_pylist(wide)


def fleet_rows(groups: int = 300, samples: int = 2) -> pa.Table:
    p, m = generate(np.arange(groups), FleetParams(samples=samples, partitions=12))
    return from_flat(p, m)


def test_a_fleet_round_trips_and_scores_the_same_stored_or_wide():
    wide = fleet_rows()
    stored = codec.encode(wide)
    assert pa.Table.from_batches(list(map(codec.decode, stored.to_batches(max_chunksize=37)))).equals(wide)
    found = [assignors.get(name) for name in ("uniform", "range", "lag")]
    from_stored = pa.Table.from_batches(list(score_batches(stored.to_batches(max_chunksize=50), found)))
    from_wide = pa.Table.from_batches(list(score_batches(wide.to_batches(max_chunksize=50), found)))
    assert from_stored.num_rows == 3 * wide.num_rows
    assert from_stored.equals(from_wide)


def test_a_wide_batch_is_decoded_as_is():
    batch = fleet_rows(5, 1).to_batches()[0]
    assert codec.decode(batch) is batch


def test_decode_reads_a_body_whose_buffer_is_not_aligned():
    stored = codec.encode(fleet_rows(20, 1)).combine_chunks().to_batches()[0]
    body = stored.column(4)
    _, offsets, data = body.buffers()
    shifted = pa.py_buffer(b"\0" + data.to_pybytes())[1:]
    assert np.frombuffer(shifted, np.uint8).ctypes.data % 8 != 0
    moved = pa.Array.from_buffers(pa.binary(), len(body), [None, offsets, shifted])
    batch = pa.RecordBatch.from_arrays([*stored.columns[:4], moved], schema=codec.STORED_SCHEMA)
    assert pa.Table.from_batches([codec.decode(batch)]).equals(pa.Table.from_batches([codec.decode(stored)]))


def _with_body(batch: pa.RecordBatch, body: list[bytes]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([*batch.columns[:4], pa.array(body, pa.binary())], schema=codec.STORED_SCHEMA)


@pytest.mark.parametrize("damage", ["cut", "short", "header"])
def test_a_body_that_does_not_match_its_header_is_a_clear_error(damage):
    stored = codec.encode(fleet_rows(3, 1)).combine_chunks().to_batches()[0]
    body = stored.column(4).to_pylist()
    if damage == "cut":
        body[1] = body[1][:-8]  # one lag missing
    elif damage == "short":
        body[2] = body[2][:8]
    else:
        words = np.frombuffer(body[0], "<i4").copy()
        words[3] += 1  # one more partition than the body holds
        body[0] = words.tobytes()
    row = {"cut": 1, "short": 2, "header": 0}[damage]
    with pytest.raises(codec.CodecError, match=f"group sample {row}:"):
        codec.decode(_with_body(stored, body))


def test_names_that_do_not_match_the_bodies_are_a_clear_error():
    stored = codec.encode(fleet_rows(3, 1)).combine_chunks().to_batches()[0]
    names = stored.column(3).to_pylist()
    names[1] = names[1] + b"x"
    batch = pa.RecordBatch.from_arrays([*stored.columns[:3], pa.array(names, pa.binary()), stored.column(4)],
                                       schema=codec.STORED_SCHEMA)
    with pytest.raises(codec.CodecError, match="names"):
        codec.decode(batch)


def test_encode_refuses_instances_that_do_not_match_the_members():
    wide = fleet_rows(2, 1)
    rows = wide.to_pylist()
    rows[0]["member_instances"] = rows[0]["member_instances"][:-1]
    with pytest.raises(ValueError, match="one entry"):
        codec.encode(pa.Table.from_pylist(rows, schema=codec.SCHEMA))


def test_both_formats_cut_batches_on_the_same_column():
    assert codec.SCHEMA.names[codec.GROUP_COLUMN] == codec.STORED_SCHEMA.names[codec.GROUP_COLUMN] == "group_id"
