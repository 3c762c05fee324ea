"""Lag from log offsets and committed offsets (coordinator/lag.py and the shard's local provider)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cohort.coordinator import AlterGroupConfigRequest, CoordinatorConfig, Errors, OffsetCommitRequest
from cohort.coordinator.config import GroupConfig
from cohort.coordinator.lag import TopicOffsets, imbalance, member_loads, partition_lags
from cohort.coordinator.records import OffsetCommitValue
from cohort.coordinator.requests import OffsetCommitPartition, OffsetCommitTopic

from cg_helpers import BAR, FOO, image, make_shard, run

LAG_CONFIG = CoordinatorConfig(consumer_assignors=("lag", "uniform", "range"))


def commit(group: str, topic: str, offsets: dict[int, int]) -> OffsetCommitRequest:
    return OffsetCommitRequest(group, [OffsetCommitTopic(topic, [OffsetCommitPartition(p, o) for p, o in offsets.items()])])


def test_lag_is_end_minus_committed_and_never_negative():
    offsets = TopicOffsets(start=(0, 0, 10, 0), end=(100, 50, 60, 5))
    committed = {("t", 0): OffsetCommitValue(40), ("t", 1): OffsetCommitValue(50), ("t", 2): OffsetCommitValue(30),
                 ("t", 3): OffsetCommitValue(9)}  # p3: committed beyond the end (a truncated log)
    assert partition_lags(offsets, committed, "t", 4, False) == [60, 0, 30, 0]


@pytest.mark.parametrize("earliest, expected", [(False, [0, 0, 7]), (True, [100, 40, 7])])
def test_reset_policy_decides_without_a_usable_commit(earliest, expected):
    # p0 never committed, p1 committed below the log start (deleted records: the consumer resets)
    offsets = TopicOffsets(start=(0, 10, 0), end=(100, 50, 10))
    committed = {("t", 1): OffsetCommitValue(5), ("t", 2): OffsetCommitValue(3), ("other", 0): OffsetCommitValue(0)}
    assert partition_lags(offsets, committed, "t", 3, earliest) == expected


def test_partitions_beyond_the_known_offsets_count_zero_and_extra_offsets_are_ignored():
    offsets = TopicOffsets(start=(0, 0), end=(10, 20))
    assert partition_lags(offsets, None, "t", 4, True) == [10, 20, 0, 0]
    assert partition_lags(offsets, None, "t", 1, True) == [10]


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000), st.one_of(st.none(), st.integers(0, 2000))),
                max_size=20), st.booleans())
def test_lag_is_bounded_by_the_log(parts, earliest):
    starts = tuple(min(s, e) for s, e, _ in parts)
    ends = tuple(max(s, e) for s, e, _ in parts)
    committed = {("t", p): OffsetCommitValue(c) for p, (_, _, c) in enumerate(parts) if c is not None}
    lags = partition_lags(TopicOffsets(starts, ends), committed, "t", len(parts), earliest)
    for p, lag in enumerate(lags):
        assert 0 <= lag <= ends[p] - starts[p]
        c = committed.get(("t", p))
        if c is not None and c.offset >= starts[p]:
            assert lag == max(ends[p] - c.offset, 0)
        else:
            assert lag == (ends[p] - starts[p] if earliest else 0)


def test_member_loads_and_imbalance():
    loads = member_loads({"a": {FOO: (0, 1)}, "b": {FOO: (2,), BAR: (0,)}, "c": {}}, {FOO: [5, 10, 15], BAR: None})
    assert loads == {"a": 15, "b": 15, "c": 0}
    assert imbalance(loads.values()) == 1.5
    assert imbalance([0, 0]) == 1.0 and imbalance([]) == 1.0


def test_shard_computes_lag_from_fed_offsets_and_its_committed_offsets():
    shard = make_shard(LAG_CONFIG)
    assert shard.lag_provider("g", FOO, 6) is None  # nothing fed yet
    shard.update_log_offsets({FOO: TopicOffsets((0,) * 6, (10, 20, 30, 40, 50, 60))})
    run(shard, commit("g", "foo", {0: 10, 1: 5, 5: 100}), 0)
    assert shard.lag_provider("g", FOO, 6) == [0, 15, 0, 0, 0, 0]
    assert shard.lag_provider("g", BAR, 3) is None  # a topic without fed offsets
    assert run(shard, AlterGroupConfigRequest("g", {"consumer.offset.reset": "earliest"}), 0).response.error_code == 0
    assert shard.lag_provider("g", FOO, 6) == [0, 15, 30, 40, 50, 0]
    assert shard.lag_provider("other", FOO, 6) == [0, 0, 0, 0, 0, 0]  # default policy latest


def test_deleted_topic_has_no_lag_even_with_stale_offsets():
    shard = make_shard(LAG_CONFIG)
    shard.update_log_offsets({FOO: TopicOffsets((0,) * 6, (9,) * 6), BAR: TopicOffsets((0,) * 3, (9,) * 3)})
    run(shard, AlterGroupConfigRequest("g", {"consumer.offset.reset": "earliest"}), 0)
    assert shard.lag_provider("g", BAR, 3) == [9, 9, 9]
    shard.update_metadata(image(version=2, foo=6))  # bar deleted; the broker's offsets may lag behind
    assert shard.lag_provider("g", BAR, 3) is None
    assert shard.lag_provider("g", FOO, 6) == [9] * 6


def test_injected_provider_replaces_local_lag():
    calls = []

    def provider(group_id, topic_id, n):
        calls.append((group_id, topic_id, n))
        return [7] * n

    shard = make_shard(LAG_CONFIG, lag_provider=provider)
    shard.update_log_offsets({FOO: TopicOffsets((0,) * 6, (9,) * 6)})
    assert shard.lag_provider("g", FOO, 6) == [7] * 6 and calls == [("g", FOO, 6)]


@pytest.mark.parametrize("value", ["none", "EARLIEST", ""])
def test_offset_reset_config_is_validated(value):
    shard = make_shard(LAG_CONFIG)
    result = run(shard, AlterGroupConfigRequest("g", {"consumer.offset.reset": value}), 0)
    assert result.response.error_code == Errors.INVALID_CONFIG and result.records == []
    assert "consumer.offset.reset must be one of latest, earliest" in result.response.error_message


def test_offset_reset_is_described_when_the_lag_assignor_is_enabled():
    shard = make_shard(LAG_CONFIG)
    from cohort.coordinator import DescribeGroupConfigRequest

    def entries(s):
        return {e.name: (e.value, e.is_default) for e in s.describe_group_config(DescribeGroupConfigRequest("g")).configs}

    assert entries(shard)["consumer.offset.reset"] == ("latest", True)
    run(shard, AlterGroupConfigRequest("g", {"consumer.offset.reset": "earliest"}), 0)
    assert entries(shard)["consumer.offset.reset"] == ("earliest", False)
    assert "consumer.offset.reset" not in entries(make_shard())  # no lag assignor: not relevant


def test_group_config_read_back_keeps_a_valid_reset_policy_next_to_an_invalid_override():
    cfg = GroupConfig.lenient({"consumer.offset.reset": "earliest", "consumer.session.timeout.ms": "1"}, LAG_CONFIG)
    assert cfg.reset_to_earliest and cfg.session_timeout_ms is None


@pytest.mark.parametrize("props, message", [
    ({"group.lag.imbalance.ratio": "1"}, "greater than 1"),
    ({"group.lag.imbalance.ratio": "x"}, "must be a number"),
    ({"group.lag.imbalance.ratio": "nan"}, "greater than 1"),
    ({"group.lag.rebalance.interval.ms": "0"}, "must be positive"),
    ({"group.lag.rebalance.min.interval.ms": "-1"}, "must not be negative"),
    ({"group.lag.imbalance.evaluations": "0"}, "at least 1"),
    ({"group.lag.source": " "}, "group.lag.source"),
])
def test_lag_broker_settings_are_validated(props, message):
    with pytest.raises(ValueError, match=message):
        CoordinatorConfig.from_properties(props)


def test_lag_broker_settings_from_properties():
    config = CoordinatorConfig.from_properties({
        "group.lag.rebalance.interval.ms": "1000", "group.lag.rebalance.min.interval.ms": "5000",
        "group.lag.imbalance.ratio": "1.25", "group.lag.imbalance.evaluations": "3", "group.lag.source": "/snap"})
    assert (config.lag_rebalance_interval_ms, config.lag_rebalance_min_interval_ms, config.lag_imbalance_ratio,
            config.lag_imbalance_evaluations, config.lag_source) == (1000, 5000, 1.25, 3, "/snap")
    defaults = CoordinatorConfig()
    assert (defaults.lag_rebalance_interval_ms, defaults.lag_imbalance_ratio, defaults.lag_source) == (
        30_000, 1.5, "local")
