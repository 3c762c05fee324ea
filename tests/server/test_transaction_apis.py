"""The transaction APIs over the wire: ACL denials and allows where Kafka checks them,
AddPartitionsToTxn failing as a whole (OPERATION_NOT_ATTEMPTED beside the bad partition),
KIP-890 verification of transactional produce, the fenced producer's errors by version, and
the admin APIs (ListTransactions, DescribeTransactions, DescribeProducers, WriteTxnMarkers)."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from cohort.protocol.records import TRANSACTIONAL_FLAG, build_batch
from cohort.security import acls as A
from cohort_testing import ServerThread, WireClient
from rawreq import ms, req, sub

ANON = "User:ANONYMOUS"


def init(c, txn_id, version=4, pid=-1, epoch=-1):
    return c.request(22, version, req(22, version, transactional_id=txn_id, transaction_timeout=ms(30000),
                                      producer_id=pid, producer_epoch=epoch))


def add_partitions(c, txn_id, pid, epoch, topic, partitions):
    topics = (sub(24, 3, "v3_and_below_topics", name=topic, partitions=tuple(partitions)),)
    r = c.request(24, 3, req(24, 3, v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                             v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics))
    return {(t.name, p.partition_index): p.partition_error_code for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition}


def txn_produce(c, txn_id, topic, pid, epoch, seq=0):
    batch = build_batch([(None, b"x")], producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                        attributes=TRANSACTIONAL_FLAG)
    part = sub(0, 9, "topic_data", "partition_data", index=0, records=batch)
    data = sub(0, 9, "topic_data", name=topic, partition_data=(part,))
    body = req(0, 9, transactional_id=txn_id, acks=-1, timeout=ms(1000), topic_data=(data,))
    return c.request(0, 9, body).responses[0].partition_responses[0].error_code


@pytest.fixture
def server(tmp_path):
    srv = ServerThread(str(tmp_path / "data"), {"num.partitions": 1}).start()
    srv.call(lambda: srv.server.broker.create_topic("t", 2))
    yield srv
    srv.stop()


def test_a_transaction_over_the_wire(server):
    with WireClient(server.port) as c:
        r = init(c, "tx")
        assert r.error_code == ErrorCode.none and r.producer_epoch == 0
        pid = r.producer_id
        # not added yet: KIP-890 verification refuses the transactional write
        assert txn_produce(c, "tx", "t", pid, 0) == ErrorCode.invalid_txn_state
        assert add_partitions(c, "tx", pid, 0, "t", [0]) == {("t", 0): ErrorCode.none}
        assert txn_produce(c, "tx", "t", pid, 0) == ErrorCode.none
        # one unknown partition: nothing is added
        assert add_partitions(c, "tx", pid, 0, "t", [1, 7]) == {("t", 1): ErrorCode.operation_not_attempted,
                                                                ("t", 7): ErrorCode.unknown_topic_or_partition}
        listed = c.request(66, 1, req(66, 1, state_filters=("Ongoing",), producer_id_filters=(), duration_filter=-1))
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("tx", "Ongoing")]
        described = c.request(65, 0, req(65, 0, transactional_ids=("tx", "nope"))).transaction_states
        assert [(d.transactional_id, d.error_code, d.transaction_state) for d in described] == [
            ("tx", ErrorCode.none, "Ongoing"), ("nope", ErrorCode.transactional_id_not_found, "")]
        assert [(t.topic, t.partitions) for t in described[0].topics] == [("t", (0,))]
        producers = c.request(61, 0, req(61, 0, topics=(sub(61, 0, "topics", name="t", partition_indexes=(0,)),)))
        [state] = producers.topics[0].partitions[0].active_producers
        assert (state.producer_id, state.current_txn_start_offset) == (pid, 0)
        # a second producer fences the first: its EndTxn v1 gets INVALID_PRODUCER_EPOCH, v2+ PRODUCER_FENCED
        assert init(c, "tx").error_code == ErrorCode.concurrent_transactions  # the open one is aborted first
        end = dict(transactional_id="tx", producer_id=pid, producer_epoch=0, committed=True)
        assert c.request(26, 1, req(26, 1, **end)).error_code == ErrorCode.invalid_producer_epoch
        assert c.request(26, 3, req(26, 3, **end)).error_code == ErrorCode.producer_fenced
        assert txn_produce(c, "tx", "t", pid, 0, seq=1) == ErrorCode.invalid_producer_epoch
        # the abort written by the fence leaves the partition stable with the record aborted
        log = server.server.broker.log("t", 0)
        assert server.call(lambda: log.last_stable_offset(log.end_offset)) == log.end_offset


def test_transactional_acls_deny_and_allow(tmp_path):
    srv = ServerThread(str(tmp_path / "data"), {"authorizer.class.name": "cohort", "num.partitions": 1}).start()
    try:
        srv.call(lambda: srv.server.broker.create_topic("t", 1))
        with WireClient(srv.port) as c:
            assert init(c, "tx").error_code == ErrorCode.transactional_id_authorization_failed
            fc = c.request(10, 4, req(10, 4, key_type=1, coordinator_keys=("tx",)))
            assert fc.coordinators[0].error_code == ErrorCode.transactional_id_authorization_failed
            markers = c.request(27, 1, req(27, 1, markers=(sub(27, 1, "markers", producer_id=1, producer_epoch=0,
                                                                transaction_result=False, coordinator_epoch=0, topics=(
                sub(27, 1, "markers", "topics", name="t", partition_indexes=(0,)),)),)))
            assert markers.markers[0].topics[0].partitions[0].error_code == ErrorCode.cluster_authorization_failed
        grant = [A.AclBinding(A.TRANSACTIONAL_ID, "tx", A.LITERAL, ANON, "*", A.WRITE, A.ALLOW)]
        srv.call(lambda: srv.server.authorizer.create(grant))
        with WireClient(srv.port) as c:
            r = init(c, "tx")
            assert r.error_code == ErrorCode.none
            # WRITE on the id, none on the topic: the partition is refused
            assert add_partitions(c, "tx", r.producer_id, r.producer_epoch, "t", [0]) == {
                ("t", 0): ErrorCode.topic_authorization_failed}
            srv.call(lambda: srv.server.authorizer.create([A.AclBinding(A.TOPIC, "t", A.LITERAL, ANON, "*", A.WRITE,
                                                                        A.ALLOW)]))
            assert add_partitions(c, "tx", r.producer_id, r.producer_epoch, "t", [0]) == {("t", 0): ErrorCode.none}
            add_offsets = c.request(25, 3, req(25, 3, transactional_id="tx", producer_id=r.producer_id,
                                               producer_epoch=r.producer_epoch, group_id="g"))
            assert add_offsets.error_code == ErrorCode.group_authorization_failed
    finally:
        srv.stop()
