"""The registry: built-ins by name, clear errors, and third-party assignors from entry points."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from cohort import assignors
from cohort.assignors import GroupSpec, MemberSubscription, TopicDescriber, TopicMetadata


def test_builtins_are_found_by_their_name():
    for name in ("uniform", "range", "lag"):
        assert assignors.get(name).name == name
    assert {"uniform", "range", "lag"} <= set(assignors.available())


def test_an_unknown_name_is_a_clear_error():
    with pytest.raises(assignors.UnknownAssignorError) as info:
        assignors.get("sticky")
    message = str(info.value)
    assert "sticky" in message and "uniform" in message and "range" in message


def test_register_rejects_something_that_is_not_an_assignor():
    with pytest.raises(TypeError):
        assignors.register(object())


def test_an_injected_assignor_is_used_by_name():
    class EverythingToFirst:
        name = "everything-to-first"

        def assign(self, spec, topics):
            first, *rest = spec.member_ids()
            out = {m: {} for m in rest}
            out[first] = {t: tuple(range(topics.num_partitions(t))) for t in spec.members[first].subscribed_topic_ids}
            return out

    assignors.register(EverythingToFirst())
    spec = GroupSpec.of({"b": MemberSubscription(frozenset({"t"})), "a": MemberSubscription(frozenset({"t"}))})
    result = assignors.get("everything-to-first").assign(spec, TopicDescriber({"t": TopicMetadata(2)}))
    assert result == {"a": {"t": (0, 1)}, "b": {}}


PLUGIN = """
class Reverse:
    name = "reverse"

    def assign(self, spec, topics):
        members = sorted(spec.members, reverse=True)
        out = {m: {} for m in members}
        for t in sorted(set().union(*(spec.members[m].subscribed_topic_ids for m in members))):
            subs = [m for m in members if t in spec.members[m].subscribed_topic_ids]
            for p in range(topics.num_partitions(t)):
                owner = subs[p % len(subs)]
                out[owner][t] = out[owner].get(t, ()) + (p,)
        return out
"""


def test_a_third_party_assignor_loads_from_the_entry_point_group(tmp_path):
    (tmp_path / "reverse_plugin.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "reverse_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: reverse-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[cohort.assignors]\nreverse = reverse_plugin:Reverse\n")
    spec = '{"topics": {"t": {"partitions": 3}}, "members": {"a": {"topics": ["t"]}, "b": {"topics": ["t"]}}}'
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "cohort", "assign", "--assignor", "reverse", "-"],
        input=spec, capture_output=True, text=True, env=env, check=True,
    )
    assert out.stdout.strip() == '{"a": {"t": [1]}, "b": {"t": [0, 2]}}'
