"""The data plane with real clients (confluent-kafka, kafka-python): CreatePartitions with
running groups, an idempotent producer retrying through a socket proxy that withholds
responses, offsets_for_times inside compressed batches, delete_records."""

import socket
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from cohort_testing import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

FAST = ("group.consumer.heartbeat.interval.ms=300", "group.consumer.min.heartbeat.interval.ms=100",
        "group.consumer.session.timeout.ms=6000", "group.consumer.min.session.timeout.ms=1000",
        "num.partitions=1")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("dataplane")
    srv = ServerProcess(base / "data", *FAST, log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0, f"unclean shutdown, see {base / 'server.log'}"


def admin(server):
    return AdminClient({"bootstrap.servers": server.bootstrap})


def create(server, name, partitions, **configs):
    a = admin(server)  # held until the result arrives (a collected client cancels its requests)
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                              config={k.replace("_", "."): v for k, v in configs.items()})])[name].result(10)


def wait_for(predicate, timeout=30.0, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


class Member(threading.Thread):
    """A consumer polling in a thread, tracking what it is assigned."""

    def __init__(self, server, group, topic, protocol):
        super().__init__(daemon=True)
        conf = {"bootstrap.servers": server.bootstrap, "group.id": group, "enable.auto.commit": False,
                "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500}
        if protocol in ("consumer", "consumer-regex"):
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
        self.consumer = ck.Consumer(conf)
        self.topic = f"^{topic}$" if protocol == "consumer-regex" else topic  # a regex is resolved by the broker
        self.assigned: set[int] = set()
        self.stopping = threading.Event()
        self.seen: set[int] = set()

    def run(self):
        def on_assign(c, parts):
            self.assigned |= {p.partition for p in parts}

        def on_revoke(c, parts):
            self.assigned -= {p.partition for p in parts}

        self.consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        while not self.stopping.is_set():
            m = self.consumer.poll(0.1)
            if m is not None and m.error() is None:
                self.seen.add(m.partition())
        self.consumer.close()


@pytest.mark.parametrize("protocol", ["consumer", "consumer-regex", "classic"])
def test_create_partitions_reaches_running_groups(server, protocol):
    topic = f"grow-{protocol}"
    create(server, topic, 2)
    a = admin(server)
    member = Member(server, f"g-{protocol}", topic, protocol)
    member.start()
    try:
        assert wait_for(lambda: member.assigned == {0, 1}), member.assigned
        # validate_only changes nothing; a decrease is refused with Kafka's message
        a.create_partitions([NewPartitions(topic, 5)], validate_only=True)[topic].result(10)
        assert len(a.list_topics(topic, timeout=10).topics[topic].partitions) == 2
        with pytest.raises(ck.KafkaException) as shrink:
            a.create_partitions([NewPartitions(topic, 1)])[topic].result(10)
        assert shrink.value.args[0].code() == ck.KafkaError.INVALID_PARTITIONS
        assert "would not be an increase" in shrink.value.args[0].str()
        a.create_partitions([NewPartitions(topic, 5)])[topic].result(10)
        assert len(a.list_topics(topic, timeout=10).topics[topic].partitions) == 5
        assert wait_for(lambda: member.assigned == {0, 1, 2, 3, 4}), member.assigned
        p = ck.Producer({"bootstrap.servers": server.bootstrap})
        for part in range(5):
            p.produce(topic, value=b"x", partition=part)
        assert p.flush(10) == 0
        assert wait_for(lambda: member.seen == {0, 1, 2, 3, 4}), member.seen
    finally:
        member.stopping.set()
        member.join(30)


def test_create_partitions_errors(server):
    a = admin(server)
    create(server, "grow-errors", 3)
    with pytest.raises(ck.KafkaException) as same:
        a.create_partitions([NewPartitions("grow-errors", 3)])["grow-errors"].result(10)
    assert same.value.args[0].code() == ck.KafkaError.INVALID_PARTITIONS
    with pytest.raises(ck.KafkaException) as unknown:
        a.create_partitions([NewPartitions("no-such-topic", 3)])["no-such-topic"].result(10)
    assert unknown.value.args[0].code() == ck.KafkaError.UNKNOWN_TOPIC_OR_PART
    with pytest.raises(ck.KafkaException) as assignment:
        a.create_partitions([NewPartitions("grow-errors", 5, replica_assignment=[[1]])])["grow-errors"].result(10)
    assert assignment.value.args[0].code() == ck.KafkaError.INVALID_REPLICA_ASSIGNMENT
    a.create_partitions([NewPartitions("grow-errors", 5, replica_assignment=[[1], [1]])])["grow-errors"].result(10)
    assert len(a.list_topics("grow-errors", timeout=10).topics["grow-errors"].partitions) == 5


def test_describe_reports_authorized_operations(server):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    create(server, "described", 1)
    a = admin(server)
    t = a.describe_topics(TopicCollection(["described"]), include_authorized_operations=True)["described"].result(10)
    assert set(t.authorized_operations) == {AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE,
                                            AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
                                            AclOperation.ALTER_CONFIGS}
    plain = a.describe_topics(TopicCollection(["described"]))["described"].result(10)
    assert not plain.authorized_operations  # not asked: Kafka's "not provided"
    cluster = a.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                                  AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                                  AclOperation.DESCRIBE}


def test_delete_records_moves_the_log_start(server):
    from confluent_kafka import TopicPartition

    create(server, "trimmed", 1)
    p = ck.Producer({"bootstrap.servers": server.bootstrap})
    for i in range(10):
        p.produce("trimmed", value=b"%d" % i)
    assert p.flush(10) == 0
    a = admin(server)
    done = a.delete_records([TopicPartition("trimmed", 0, 4)])
    assert done[TopicPartition("trimmed", 0, 4)].result(10).low_watermark == 4
    c = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": "trim-reader", "auto.offset.reset": "earliest"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition("trimmed", 0), timeout=10)
        assert (low, high) == (4, 10)
        c.assign([TopicPartition("trimmed", 0, 4)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 6 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert got == [b"%d" % i for i in range(4, 10)]
    finally:
        c.close()
    beyond = a.delete_records([TopicPartition("trimmed", 0, 50)])
    with pytest.raises(ck.KafkaException) as exc:
        beyond[TopicPartition("trimmed", 0, 50)].result(10)
    assert exc.value.args[0].code() == ck.KafkaError.OFFSET_OUT_OF_RANGE


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WithholdingProxy:
    """A TCP proxy in front of the broker that, while ``withholding`` is set, holds every
    response back for ``delay`` seconds: longer than the client's request timeout, so it gives
    up on requests the broker has already carried out and sends them again."""

    def __init__(self, port, target, delay):
        self.target, self.delay = target, delay
        self.withholding = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", port))
        self.stopping = threading.Event()
        self.sockets = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, True), daemon=True).start()

    def _pipe(self, src, dst, responses):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if responses and self.withholding.is_set():
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.stopping.set()
        self.listener.close()
        for s in self.sockets:
            s.close()


def test_idempotent_producer_retrying_timed_out_requests_stores_each_record_once(tmp_path):
    proxy_port = free_port()
    srv = ServerProcess(tmp_path / "data", f"advertised.port={proxy_port}", "num.partitions=1",
                        log_path=str(tmp_path / "server.log")).start()
    proxy = WithholdingProxy(proxy_port, srv.port, delay=2.5)
    try:
        bootstrap = f"127.0.0.1:{proxy_port}"
        a = AdminClient({"bootstrap.servers": bootstrap})
        a.create_topics([NewTopic("retried", num_partitions=1, replication_factor=1)])["retried"].result(10)
        # librdkafka's client-side timeout for a request in flight is socket.timeout.ms
        p = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                         "request.timeout.ms": 1000, "socket.timeout.ms": 1000, "message.timeout.ms": 60000,
                         "retry.backoff.ms": 100})
        acked = []
        p.produce("retried", value=b"warm-up", on_delivery=lambda err, m: acked.append(err))
        assert p.flush(10) == 0 and acked == [None]
        proxy.withholding.set()
        total = 200
        for i in range(total):
            p.produce("retried", value=b"%d" % i, on_delivery=lambda err, m: acked.append(err))
            p.poll(0)
            time.sleep(0.01)
        time.sleep(4)  # requests time out and are retried while responses are withheld
        proxy.withholding.clear()
        assert p.flush(60) == 0
        assert len(proxy.sockets) // 2 >= 3, "the producer never timed out and reconnected"
        assert acked.count(None) == total + 1, [e for e in acked if e is not None][:3]
        c = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{srv.port}", "group.id": "check", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
        c.assign([ck.TopicPartition("retried", 0, 0)])
        values = []
        deadline = time.monotonic() + 30
        while len(values) < total + 1 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                values.append(m.value())
        time.sleep(0.5)
        m = c.poll(0.5)
        assert m is None or m.error() is not None, "more records stored than produced"
        c.close()
        assert values == [b"warm-up"] + [b"%d" % i for i in range(total)]  # each once, in order
    finally:
        proxy.close()
        assert srv.stop() == 0


def test_dynamic_broker_config_with_admin_client(server):
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, ResourceType

    a = admin(server)
    res = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.bytes", "123456789", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(10)
    described = a.describe_configs([ConfigResource(ResourceType.BROKER, "1")])
    got = list(described.values())[0].result(10)
    entry = got["log.retention.bytes"]
    assert entry.value == "123456789" and entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value and not entry.is_read_only
    assert got["node.id"].is_read_only
    assert got["log.retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value  # untouched
    assert got["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value  # given with -o at start
    fixed = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("node.id", "5", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as exc:
        a.incremental_alter_configs([fixed])[fixed].result(10)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    undo = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([undo])[undo].result(10)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_offsets_for_times_inside_compressed_batches(server, codec):
    topic = f"times-{codec}"
    create(server, topic, 1, message_timestamp_after_max_ms=str(2**62))
    base = 1_700_000_000_000
    p = ck.Producer({"bootstrap.servers": server.bootstrap, "compression.type": codec, "linger.ms": 100,
                     "enable.idempotence": True})
    for i in range(1000):
        p.produce(topic, value=b"%d" % i, timestamp=base + 10 * i)
    assert p.flush(20) == 0
    c = ck.Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"times-{codec}"})
    try:
        [found] = c.offsets_for_times([ck.TopicPartition(topic, 0, base + 5550)], timeout=10)
        assert found.offset == 555
        [later] = c.offsets_for_times([ck.TopicPartition(topic, 0, base + 5551)], timeout=10)
        assert later.offset == 556
    finally:
        c.close()


def test_keyless_produce_to_a_compacted_topic_fails_delivery(server):
    """(A batch mixing keyed and keyless records is refused as a whole, with one RecordError per
    keyless record: tests/server/test_data_plane.py, where the batch is built by hand.)"""
    create(server, "compacted-e2e", 1, cleanup_policy="compact")
    p = ck.Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5, "retries": 0})
    results = []
    p.produce("compacted-e2e", value=b"no key", on_delivery=lambda err, m: results.append(err))
    p.flush(10)
    assert [e.code() if e else None for e in results] == [ck.KafkaError.INVALID_RECORD]
    p.produce("compacted-e2e", key=b"k", value=b"keyed", on_delivery=lambda err, m: results.append(err))
    p.flush(10)
    assert results[-1] is None
