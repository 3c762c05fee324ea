"""How an instance of a cohort cluster gets its node id: kept in its data dir, chosen free from
what the other members use, and given up by the right one of two instances that share it."""

import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cohort.upstream import identity
from cohort.upstream.identity import FIRST_NODE_ID, Identity, choose, free_node_id, must_yield


def test_an_identity_is_made_once_and_kept_in_the_data_dir(tmp_path):
    first = identity.load(str(tmp_path))
    assert first.node_id is None and len(first.instance_id) == 32
    assert identity.load(str(tmp_path)).instance_id != first.instance_id  # nothing saved yet
    identity.save(str(tmp_path), Identity(first.instance_id, 1000003))
    assert identity.load(str(tmp_path)) == Identity(first.instance_id, 1000003)
    assert oct(os.stat(tmp_path / identity.IDENTITY_FILE).st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("content", ["{", "[]", '{"node_id": 1}', '{"instance_id": "not-a-uuid"}', "\xff"])
def test_a_damaged_identity_file_is_a_one_line_error_naming_it(tmp_path, content):
    (tmp_path / identity.IDENTITY_FILE).write_text(content, encoding="latin-1")
    with pytest.raises(OSError, match=f"{identity.IDENTITY_FILE} is not a valid instance identity") as info:
        identity.load(str(tmp_path))
    assert "\n" not in str(info.value)


def test_a_saved_file_is_what_load_reads(tmp_path):
    identity.save(str(tmp_path), Identity("ab" * 16, None))
    raw = json.loads((tmp_path / identity.IDENTITY_FILE).read_text())
    assert raw == {"version": 1, "instance_id": "ab" * 16, "node_id": None}
    assert identity.load(str(tmp_path)) == Identity("ab" * 16, None)


def test_the_persisted_id_is_kept_unless_taken():
    assert choose(None, [], []) == FIRST_NODE_ID
    assert choose(1000005, [FIRST_NODE_ID], []) == 1000005
    assert choose(1000005, [1000005], []) == FIRST_NODE_ID
    assert choose(None, [FIRST_NODE_ID, FIRST_NODE_ID + 1], []) == FIRST_NODE_ID + 2
    assert choose(None, [FIRST_NODE_ID + 1], [FIRST_NODE_ID]) == FIRST_NODE_ID + 2  # an upstream broker's id
    assert choose(FIRST_NODE_ID, [], [FIRST_NODE_ID]) == FIRST_NODE_ID + 1


@given(st.sets(st.integers(FIRST_NODE_ID - 3, FIRST_NODE_ID + 20)))
def test_a_free_id_is_the_smallest_unused_from_the_first(taken):
    node = free_node_id(taken)
    assert node >= FIRST_NODE_ID and node not in taken
    assert all(n in taken for n in range(FIRST_NODE_ID, node))


ids = st.uuids().map(lambda u: u.hex)


@given(ids, st.booleans(), ids, st.booleans())
def test_exactly_one_of_two_instances_sharing_an_id_gives_it_up(a, a_set, b, b_set):
    if a == b:
        return
    assert must_yield(a, a_set, b, b_set) != must_yield(b, b_set, a, a_set)
    if a_set != b_set:  # a set id is never the one given up
        assert must_yield(a, a_set, b, b_set) == (not a_set)
