"""The data plane over the wire, with raw requests: idempotent produce, record validation."""

import time

import pytest
from kio.schema.errors import ErrorCode

from cohort.protocol.records import TIMESTAMP_TYPE_FLAG, build_batch, decode_batch, read_header
from cohort_testing import WireClient
from rawreq import create_topics, fetch, list_offsets, ms, produce, req, sub


def part(resp):
    return resp.responses[0].partition_responses[0]


def end_offset(c, topic, partition=0):
    return c.request(2, 7, list_offsets(7, topic, partition, -1)).topics[0].partitions[0].offset


def new_topic(c, name, partitions=1, **configs):
    spec = sub(19, 7, "topics", name=name, num_partitions=partitions, replication_factor=-1, assignments=(),
               configs=tuple(sub(19, 7, "topics", "configs", name=k.replace("_", "."), value=v) for k, v in configs.items()))
    resp = c.request(19, 7, req(19, 7, topics=(spec,), timeout=ms(5000), validate_only=False))
    assert resp.topics[0].error_code == ErrorCode.none, resp.topics[0].error_message


def idem(seq, epoch=0, pid=None, n=1, value=b"v"):
    return build_batch([(None, value)] * n, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       timestamp=int(time.time() * 1000))


def test_idempotent_produce_as_kafka_answers_it(server):
    """The issue's raw Produce v9 run: a retry answers the original offset and appends nothing;
    a gap, a stale epoch and a new epoch not starting at 0 are refused; nothing is stored twice."""
    with WireClient(server.port) as c:
        new_topic(c, "idem")
        init = c.request(22, 4, req(22, 4, transactional_id=None, transaction_timeout=ms(1000), producer_id=-1, producer_epoch=-1))
        pid = init.producer_id
        assert part(c.request(0, 9, produce(9, "idem", 0, idem(0, pid=pid)))).base_offset == 0
        assert part(c.request(0, 9, produce(9, "idem", 0, idem(1, pid=pid)))).base_offset == 1
        again = part(c.request(0, 9, produce(9, "idem", 0, idem(1, pid=pid))))
        assert (again.error_code, again.base_offset) == (ErrorCode.none, 1)
        gap = part(c.request(0, 9, produce(9, "idem", 0, idem(5, pid=pid))))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number and gap.base_offset == -1
        assert part(c.request(0, 9, produce(9, "idem", 0, idem(0, epoch=1, pid=pid)))).base_offset == 2
        stale = part(c.request(0, 9, produce(9, "idem", 0, idem(2, epoch=0, pid=pid))))
        assert stale.error_code == ErrorCode.invalid_producer_epoch
        restart = part(c.request(0, 9, produce(9, "idem", 0, idem(3, epoch=2, pid=pid))))
        assert restart.error_code == ErrorCode.out_of_order_sequence_number
        unknown = part(c.request(0, 9, produce(9, "idem", 0, idem(41, pid=pid + 1000))))
        assert (unknown.error_code, unknown.base_offset) == (ErrorCode.none, 3)  # Kafka 4 accepts any sequence
        assert end_offset(c, "idem") == 4
        # sequences are per partition
        new_topic(c, "idem2", partitions=2)
        assert part(c.request(0, 9, produce(9, "idem2", 1, idem(0, pid=pid, epoch=1)))).base_offset == 0


def test_keyless_records_to_a_compacted_topic_are_refused_per_record(server):
    with WireClient(server.port) as c:
        new_topic(c, "compacted", cleanup_policy="compact")
        batch = build_batch([(b"k0", b"a"), (None, b"b"), (b"k2", b"c"), (None, b"d")], timestamp=int(time.time() * 1000))
        r = part(c.request(0, 9, produce(9, "compacted", 0, batch)))
        assert r.error_code == ErrorCode.invalid_record
        assert [(e.batch_index, e.batch_index_error_message) for e in r.record_errors] == [
            (1, "Compacted topic cannot accept message without key in topic partition compacted-0."),
            (3, "Compacted topic cannot accept message without key in topic partition compacted-0.")]
        assert r.error_message.startswith("One or more records have been rejected due to 2 record errors")
        assert end_offset(c, "compacted") == 0
        keyed = build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000), compression=2)
        assert part(c.request(0, 9, produce(9, "compacted", 0, keyed))).error_code == ErrorCode.none
        keyless_gzip = build_batch([(None, b"v")], timestamp=int(time.time() * 1000), compression=1)
        assert part(c.request(0, 9, produce(9, "compacted", 0, keyless_gzip))).error_code == ErrorCode.invalid_record


def test_timestamp_bounds_and_log_append_time(server):
    with WireClient(server.port) as c:
        new_topic(c, "bounded", message_timestamp_before_max_ms="60000", message_timestamp_after_max_ms="60000")
        now = int(time.time() * 1000)
        future = part(c.request(0, 9, produce(9, "bounded", 0, build_batch([(None, b"a"), (None, b"b")],
                                                                         timestamps=[now, now + 3_600_000]))))
        assert future.error_code == ErrorCode.invalid_timestamp
        assert [e.batch_index for e in future.record_errors] == [1]
        assert future.error_message == "One or more records have been rejected due to invalid timestamp"
        past = part(c.request(0, 9, produce(9, "bounded", 0, build_batch([(None, b"a")], timestamp=now - 3_600_000))))
        assert past.error_code == ErrorCode.invalid_timestamp
        ok = part(c.request(0, 9, produce(9, "bounded", 0, build_batch([(None, b"a")], timestamp=now))))
        assert ok.error_code == ErrorCode.none and ok.log_append_time is None

        new_topic(c, "appended", message_timestamp_type="LogAppendTime")
        before = int(time.time() * 1000)
        r = part(c.request(0, 9, produce(9, "appended", 0, build_batch([(None, b"x")] * 3, timestamp=12345, compression=3))))
        after = int(time.time() * 1000)
        assert r.error_code == ErrorCode.none
        stamped = int(r.log_append_time.timestamp() * 1000)
        assert before <= stamped <= after
        got = c.request(1, 12, fetch(12, [("appended", [(0, 0)])]))
        data = got.responses[0].partitions[0].records
        h = read_header(data)
        assert h.attributes & TIMESTAMP_TYPE_FLAG and h.max_timestamp == stamped and h.compression == 3
        assert [rec.timestamp for rec in decode_batch(data)] == [stamped] * 3  # CRC rewritten, payload as sent


def test_size_and_format_checks(server):
    with WireClient(server.port) as c:
        new_topic(c, "small", max_message_bytes="200")
        big = part(c.request(0, 9, produce(9, "small", 0, build_batch([(None, b"x" * 300)]))))
        assert big.error_code == ErrorCode.message_too_large
        two = part(c.request(0, 9, produce(9, "small", 0, build_batch([(None, b"a")]) + build_batch([(None, b"b")]))))
        assert two.error_code == ErrorCode.invalid_record
        zstd_v6 = part(c.request(0, 6, produce(6, "small", 0, build_batch([(None, b"a")], compression=4))))
        assert zstd_v6.error_code == ErrorCode.unsupported_compression_type
        control = part(c.request(0, 9, produce(9, "small", 0, build_batch([(None, b"a")], attributes=0x20))))
        assert control.error_code == ErrorCode.invalid_record
        no_seq = part(c.request(0, 9, produce(9, "small", 0, build_batch([(None, b"a")], producer_id=5, producer_epoch=0))))
        assert no_seq.error_code == ErrorCode.invalid_record
        assert end_offset(c, "small") == 0


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_list_offsets_by_timestamp_finds_the_record_inside_compressed_batches(server, codec):
    topic = f"times-{codec}"
    base = 1_700_000_000_000
    with WireClient(server.port) as c:
        new_topic(c, topic, message_timestamp_after_max_ms=str(2**62))
        for b in range(10):
            batch = build_batch([(None, b"r%d" % i) for i in range(b * 100, b * 100 + 100)],
                                timestamps=[base + 10 * i for i in range(b * 100, b * 100 + 100)], compression=codec)
            assert part(c.request(0, 9, produce(9, topic, 0, batch))).error_code == ErrorCode.none

        def lookup(ts):
            p = c.request(2, 7, list_offsets(7, topic, 0, ts)).topics[0].partitions[0]
            return p.offset, p.timestamp

        assert lookup(base + 5550) == (555, base + 5550)
        assert lookup(base + 5551) == (556, base + 5560)  # the first record at or after
        assert lookup(base) == (0, base)
        assert lookup(base + 10_000) == (-1, -1)  # after every record
        assert lookup(-3) == (999, base + 9990)  # MAX_TIMESTAMP


def test_max_timestamp_is_the_record_holding_it(server):
    with WireClient(server.port) as c:
        new_topic(c, "maxts", message_timestamp_after_max_ms=str(2**62))
        base = 1_700_000_000_000
        batch = build_batch([(None, b"a"), (None, b"b"), (None, b"c")], timestamps=[base + 100, base + 400, base + 250], compression=1)
        assert part(c.request(0, 9, produce(9, "maxts", 0, batch))).error_code == ErrorCode.none
        p = c.request(2, 7, list_offsets(7, "maxts", 0, -3)).topics[0].partitions[0]
        assert (p.offset, p.timestamp) == (1, base + 400)  # KAFKA-16310: not the batch's last offset


def test_offset_for_leader_epoch(server):
    with WireClient(server.port) as c:
        new_topic(c, "epochs")
        assert part(c.request(0, 9, produce(9, "epochs", 0, build_batch([(None, b"a")] * 3)))).error_code == ErrorCode.none

        def ask(leader_epoch, current=-1, topic="epochs", partition=0):
            p = sub(23, 4, "topics", "partitions", partition=partition, current_leader_epoch=current, leader_epoch=leader_epoch)
            t = sub(23, 4, "topics", topic=topic, partitions=(p,))
            r = c.request(23, 4, req(23, 4, replica_id=-1, topics=(t,))).topics[0].partitions[0]
            return r.error_code, r.leader_epoch, r.end_offset

        assert ask(0) == (ErrorCode.none, 0, 3)
        assert ask(0, current=0) == (ErrorCode.none, 0, 3)
        assert ask(5) == (ErrorCode.none, -1, -1)  # an epoch this leader never had
        assert ask(0, current=2)[0] == ErrorCode.unknown_leader_epoch
        assert ask(0, topic="no-such")[0] == ErrorCode.unknown_topic_or_partition
        assert ask(0, partition=7)[0] == ErrorCode.unknown_topic_or_partition


def test_transactional_records_without_transactions_are_refused(server):
    with WireClient(server.port) as c:
        new_topic(c, "no-txn")
        batch = build_batch([(None, b"a")], producer_id=77, producer_epoch=0, base_sequence=0, attributes=0x10,
                            timestamp=int(time.time() * 1000))
        r = part(c.request(0, 9, produce(9, "no-txn", 0, batch)))
        assert r.error_code == ErrorCode.transactional_id_authorization_failed
        assert end_offset(c, "no-txn") == 0
