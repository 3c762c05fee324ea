"""TxnOffsetCommit in the group coordinator (KIP-98 / KIP-447): pending offsets invisible until the
producer's COMMIT marker, dropped by ABORT, UNSTABLE_OFFSET_COMMIT for RequireStable fetches, a
later plain commit that a COMMIT marker does not overwrite, Kafka's generation / member-epoch
checks for both group types, and a replay (records and batches as written) that rebuilds it all."""

from __future__ import annotations

from cohort.coordinator import Errors, OffsetFetchRequest
from cohort.coordinator.records import decode, encode, transaction_of
from cohort.coordinator.requests import (
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchTopic,
    TxnMarkerRequest,
    TxnOffsetCommitRequest,
)
from cohort.protocol.records import ABORT_MARKER, COMMIT_MARKER, TxnBatch

from cg_helpers import join, make_shard, run

PID, EPOCH = 7, 3


def txn_commit(group, offset, *, partition=0, pid=PID, generation=-1, member="", instance=None):
    topics = [OffsetCommitTopic("foo", [OffsetCommitPartition(partition, offset)])]
    return TxnOffsetCommitRequest(group, "tx", pid, EPOCH, topics, generation, member, instance)


def fetched(shard, group, stable=False, partitions=(0,)):
    r = shard.fetch_offsets(OffsetFetchRequest(group, [OffsetFetchTopic("foo", list(partitions))], require_stable=stable))
    return {p.partition: (p.committed_offset, p.error_code) for t in r.topics for p in t.partitions}


def codes(result):
    return [p.error_code for t in result.response.topics for p in t.partitions]


def replayed(log):
    """A fresh shard loaded from `log` ((records, transaction) per write) as the runtime loads it."""
    fresh = make_shard()
    for records, transaction in log:
        for record in records:
            fresh.replay(decode(*encode(record), transaction))
    return fresh


def write(shard, log, request, now=0):
    result = run(shard, request, now)
    log.append((result.records, result.transaction))
    return result


def test_pending_offsets_are_invisible_until_the_commit_marker():
    shard, log = make_shard(), []
    result = write(shard, log, txn_commit("g", 42))
    assert codes(result) == [Errors.NONE]
    assert result.transaction == TxnBatch(PID, EPOCH)  # written in the producer's transactional batch
    assert fetched(shard, "g") == {0: (-1, 0)}
    assert fetched(shard, "g", stable=True) == {0: (-1, Errors.UNSTABLE_OFFSET_COMMIT)}
    marker = write(shard, log, TxnMarkerRequest(PID, EPOCH, True))
    assert marker.transaction == TxnBatch(PID, EPOCH, COMMIT_MARKER)
    assert marker.records[0].key.groups == ("g",)  # what observers (/metrics) must read again
    assert fetched(shard, "g", stable=True) == {0: (42, 0)}
    assert fetched(replayed(log), "g", stable=True) == {0: (42, 0)}


def test_an_abort_marker_drops_the_pending_offsets():
    shard, log = make_shard(), []
    write(shard, log, OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 5)])]))
    write(shard, log, txn_commit("g", 42))
    result = write(shard, log, TxnMarkerRequest(PID, EPOCH, False))
    assert result.transaction.marker == ABORT_MARKER
    assert fetched(shard, "g", stable=True) == {0: (5, 0)}
    assert fetched(replayed(log), "g", stable=True) == {0: (5, 0)}


def test_a_plain_commit_after_the_transactional_one_wins_over_its_marker():
    shard, log = make_shard(), []
    write(shard, log, txn_commit("g", 42))
    write(shard, log, OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 50)])]))
    write(shard, log, TxnMarkerRequest(PID, EPOCH, True))
    assert fetched(shard, "g") == {0: (50, 0)}
    assert fetched(replayed(log), "g") == {0: (50, 0)}


def test_markers_touch_only_their_producer():
    shard, log = make_shard(), []
    write(shard, log, txn_commit("g", 1, partition=0, pid=1))
    write(shard, log, txn_commit("g", 2, partition=1, pid=2))
    write(shard, log, TxnMarkerRequest(1, EPOCH, True))
    assert fetched(shard, "g", stable=True, partitions=(0, 1)) == {0: (1, 0), 1: (-1, Errors.UNSTABLE_OFFSET_COMMIT)}
    write(shard, log, TxnMarkerRequest(2, EPOCH, False))
    assert fetched(shard, "g", stable=True, partitions=(0, 1)) == {0: (1, 0), 1: (-1, 0)}
    assert fetched(replayed(log), "g", stable=True, partitions=(0, 1)) == {0: (1, 0), 1: (-1, 0)}


def test_a_lost_append_reverts_pending_offsets_and_markers():
    shard = make_shard()
    run(shard, txn_commit("g", 42), 0)
    start = shard.last_written_offset
    result = shard.handle(TxnMarkerRequest(PID, EPOCH, True), 1)
    assert shard.state.offsets["g"][("foo", 0)].offset == 42  # applied at once ...
    assert fetched(shard, "g") == {0: (-1, 0)}  # ... but reads see it only once durable
    shard.revert(start)  # the marker never became durable
    assert "g" not in shard.state.offsets
    assert fetched(shard, "g", stable=True) == {0: (-1, Errors.UNSTABLE_OFFSET_COMMIT)}
    assert result.records


def test_consumer_group_members_commit_with_their_epoch_else_illegal_generation():
    shard = make_shard()
    run(shard, join("g", "a"), 0)
    epoch = shard.group("g").members["a"].member_epoch
    assert codes(run(shard, txn_commit("g", 1, generation=epoch, member="a"), 1)) == [Errors.NONE]
    assert codes(run(shard, txn_commit("g", 1, generation=epoch + 1, member="a"), 1)) == [Errors.ILLEGAL_GENERATION]
    assert codes(run(shard, txn_commit("g", 1, generation=epoch, member="zz"), 1)) == [Errors.UNKNOWN_MEMBER_ID]
    # without the consumer's group metadata (an old producer): accepted
    assert codes(run(shard, txn_commit("g", 1), 1)) == [Errors.NONE]


def test_a_missing_group_accepts_only_a_negative_generation():
    shard = make_shard()
    assert codes(run(shard, txn_commit("new", 1, generation=4), 0)) == [Errors.ILLEGAL_GENERATION]
    assert codes(run(shard, txn_commit("", 1), 0)) == [Errors.INVALID_GROUP_ID]
    assert codes(run(shard, txn_commit("new", 1), 0)) == [Errors.NONE]


def test_the_transaction_of_a_write_names_its_batch():
    assert transaction_of([]) is None
    shard = make_shard()
    assert run(shard, join("g", "a"), 0).transaction is None
    assert run(shard, OffsetCommitRequest("g", [OffsetCommitTopic("foo", [OffsetCommitPartition(0, 1)])]), 0).transaction is None


def test_lag_counts_up_to_the_last_stable_offset(tmp_path):
    """The coordinator's lag (lag assignor, /metrics) ends at the LSO: an open transaction's
    records are not lag until it commits."""
    from cohort.broker import Broker
    from cohort.config import Config
    from cohort.protocol.records import TRANSACTIONAL_FLAG, build_batch, check_produce_records
    from cohort.server.groups import BrokerLogOffsets

    b = Broker(Config({"log.dir": str(tmp_path)}))
    try:
        topic = b.create_topic("t", 1)
        log = b.log("t", 0)
        plain = bytearray(build_batch([(None, b"x")] * 3))
        log.append(plain, check_produce_records(plain))
        txn = bytearray(build_batch([(None, b"y")] * 2, producer_id=9, producer_epoch=0, base_sequence=0,
                                    attributes=TRANSACTIONAL_FLAG))
        log.append(txn, check_produce_records(txn))
        assert list(BrokerLogOffsets(b)[topic.id].end) == [3]
        log.append_marker(9, 0, True, 0)
        assert list(BrokerLogOffsets(b)[topic.id].end) == [6]
    finally:
        b.close()


def test_classic_group_members_commit_with_their_generation():
    from classic_helpers import classic_shard, join_req, sync_req

    shard = classic_shard()
    member = run(shard, join_req(member="", client="app"), 0).response.member_id  # v4+: a member id first
    run(shard, join_req(member=member, client="app"), 0)  # parked until the initial rebalance delay
    expired = shard.expire(3_000)
    shard.commit(expired.end_offset)
    [(_, joined)] = expired.completions
    generation = joined.generation_id
    run(shard, sync_req("g", member, generation, [(member, b"")]), 0)
    assert codes(run(shard, txn_commit("g", 1, generation=generation, member=member), 1)) == [Errors.NONE]
    assert codes(run(shard, txn_commit("g", 1, generation=generation + 1, member=member), 1)) == [Errors.ILLEGAL_GENERATION]
    assert codes(run(shard, txn_commit("g", 1, generation=generation, member="zombie"), 1)) == [Errors.UNKNOWN_MEMBER_ID]
    assert codes(run(shard, txn_commit("g", 1), 1)) == [Errors.NONE]  # no group metadata: accepted, never REBALANCE_IN_PROGRESS
