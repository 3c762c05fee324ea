"""The HTTP listener: /metrics checked against what real clients did, /healthz, /readyz, the JSON
the dashboard reads, and the off switch."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import confluent_kafka as ck
import pytest
from kafka import KafkaConsumer
from prometheus_client.parser import text_string_to_metric_families

from cohort.config import Config, ConfigError
from cohort.server.http import parse_address
from cohort_testing import ServerProcess, ServerThread


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("http")
    srv = ServerProcess(base / "data", "http.listener=127.0.0.1:0", "metrics.cluster.name=test-cluster",
                        log_path=str(base / "server.log")).start()
    yield srv
    assert srv.stop() == 0


def get(srv, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{srv.http_port}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def scrape(srv) -> dict[tuple[str, tuple], float]:
    _, content_type, text = get(srv, "/metrics")
    assert content_type.startswith("text/plain; version=")  # the Prometheus text format
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def test_health_and_readiness(broker):
    assert get(broker, "/healthz")[::2] == (200, "ok\n")
    assert get(broker, "/readyz")[::2] == (200, "ready\n")
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(broker, "/no-such-page")
    assert missing.value.code == 404


def test_metrics_follow_what_clients_did(broker):
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(25):
        producer.produce("m-topic", b"v", partition=0)
    assert producer.flush(20) == 0
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "m-group", "group.protocol": "consumer",
                            "enable.auto.commit": False, "auto.offset.reset": "earliest", "client.id": "m-client"})
    try:
        consumer.subscribe(["m-topic"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        consumer.commit(offsets=[ck.TopicPartition("m-topic", 0, 10)], asynchronous=False)
        s = scrape(broker)
        assert value(s, "kafka_partition_latest_offset", cluster_name="test-cluster", topic="m-topic",
                     partition="0") == 25
        assert value(s, "kafka_partition_earliest_offset", cluster_name="test-cluster", topic="m-topic",
                     partition="0") == 0
        assert value(s, "cohort_log_size_bytes", topic="m-topic", partition="0") > 0
        (member_id,) = [dict(k[1])["consumer_id"] for k in s if k[0] == "kafka_consumergroup_group_lag"
                        and dict(k[1])["group"] == "m-group"]
        labels = dict(cluster_name="test-cluster", group="m-group", topic="m-topic", partition="0",
                      member_host="/127.0.0.1", consumer_id=member_id, client_id="m-client")
        assert value(s, "kafka_consumergroup_group_lag", **labels) == 15
        assert value(s, "kafka_consumergroup_group_offset", **labels) == 10
        assert value(s, "kafka_consumergroup_group_sum_lag", cluster_name="test-cluster", group="m-group") == 15
        assert value(s, "kafka_consumergroup_group_max_lag", cluster_name="test-cluster", group="m-group") == 15
        assert value(s, "cohort_groups", type="consumer", state="Stable") == 1
        assert value(s, "cohort_group_members", group="m-group", type="consumer") == 1
        assert value(s, "cohort_group_epoch", group="m-group", type="consumer") >= 1
        assert value(s, "cohort_group_rebalances_total", type="consumer") >= 1
        assert value(s, "cohort_assignor_duration_seconds_count", assignor="uniform") >= 1
        assert value(s, "cohort_coordinator_fsync_duration_seconds_count") >= 1
        assert value(s, "cohort_coordinator_loaded") == 1
        assert value(s, "cohort_coordinator_shards_served") == 1
        assert value(s, "cohort_requests_total", api="Produce", version="10") >= 1
        assert value(s, "cohort_request_duration_seconds_count", api="OffsetCommit", version="9") == 1
        assert value(s, "cohort_request_duration_seconds_bucket", api="OffsetCommit", version="9", le="+Inf") == 1
        assert value(s, "cohort_requests_total", api="ConsumerGroupHeartbeat", version="1") >= 1
        assert value(s, "cohort_network_received_bytes_total", listener="PLAINTEXT") > 25
        assert value(s, "cohort_network_sent_bytes_total", listener="PLAINTEXT") > 0
        assert value(s, "cohort_connections", listener="PLAINTEXT") >= 2  # the producer's and the consumer's
    finally:
        consumer.close()
    # a classic group (kafka-python) shows up under its own type
    classic = KafkaConsumer("m-topic", bootstrap_servers=broker.bootstrap, group_id="m-classic",
                            auto_offset_reset="earliest")
    try:
        got, deadline = 0, time.monotonic() + 30
        while got < 25 and time.monotonic() < deadline:
            got += sum(len(batch) for batch in classic.poll(500).values())
        assert got == 25
        s = scrape(broker)
        assert value(s, "cohort_groups", type="classic", state="Stable") == 1
        assert value(s, "cohort_group_rebalances_total", type="classic") >= 1
    finally:
        classic.close()
    before = value(scrape(broker), "cohort_requests_total", api="Produce", version="10")
    producer.produce("m-topic", b"v", partition=0)
    producer.flush(10)
    assert value(scrape(broker), "cohort_requests_total", api="Produce", version="10") == before + 1


def test_dashboard_json(broker):
    status, _, body = get(broker, "/api/groups")
    groups = {g["group_id"]: g for g in json.loads(body)["groups"]}
    assert status == 200 and groups["m-group"]["type"] == "consumer" and groups["m-group"]["lag"] == 16
    detail = json.loads(get(broker, "/api/groups/m-group")[2])
    assert detail["partitions"] == [{"topic": "m-topic", "partition": 0, "committed": 10, "end": 26, "lag": 16,
                                     "member_id": None}]  # the member left
    assert [p["epoch"] for p in detail["timeline"]][-1] == detail["epoch"]
    with pytest.raises(urllib.error.HTTPError) as missing:
        get(broker, "/api/groups/none-such")
    assert missing.value.code == 404
    topics = {t["name"]: t for t in json.loads(get(broker, "/api/topics")[2])["topics"]}
    assert topics["m-topic"]["partitions"][0]["end"] == 26 and "__consumer_offsets" not in topics


def test_readiness_waits_for_the_coordinator(tmp_path):
    with ServerThread(tmp_path, {"http.listener": "127.0.0.1:0"}) as srv:
        port = srv.server.http.port
        url = f"http://127.0.0.1:{port}/readyz"
        assert urllib.request.urlopen(url, timeout=10).status == 200
        srv.call(lambda: setattr(srv.server.group_coordinator, "loaded", False))  # as during a replay
        with pytest.raises(urllib.error.HTTPError) as loading:
            urllib.request.urlopen(url, timeout=10)
        assert loading.value.code == 503
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10).status == 200
        srv.call(lambda: setattr(srv.server.group_coordinator, "loaded", True))


def test_the_listener_can_be_off(tmp_path):
    with ServerThread(tmp_path, {"http.listener": ""}) as srv:
        assert srv.server.http is None
    assert Config()["http.listener"] == "127.0.0.1:9308"  # the documented default


@pytest.mark.parametrize("text", ["nonsense", "127.0.0.1:99999", "host:port"])
def test_a_bad_address_is_a_config_error(text):
    with pytest.raises(ConfigError, match="http.listener: expected host:port"):
        parse_address(text)


def test_scrapes_follow_commits_produces_and_membership(broker):
    """What a scrape keeps from the previous one is rebuilt when offsets, log ends or members move."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for _ in range(5):
        producer.produce("cache-t", b"v", partition=0)
    assert producer.flush(10) == 0

    def commit(offset):
        request = ConsumerGroupTopicPartitions("cache-g", [ck.TopicPartition("cache-t", 0, offset)])
        admin.alter_consumer_group_offsets([request])["cache-g"].result(10)

    labels = dict(cluster_name="test-cluster", group="cache-g", topic="cache-t", partition="0", member_host="",
                  consumer_id="", client_id="")
    commit(1)
    assert value(scrape(broker), "kafka_consumergroup_group_lag", **labels) == 4
    assert value(scrape(broker), "kafka_consumergroup_group_lag", **labels) == 4  # unchanged, served again
    commit(3)
    s = scrape(broker)
    assert value(s, "kafka_consumergroup_group_lag", **labels) == 2
    assert value(s, "kafka_consumergroup_group_offset", **labels) == 3
    producer.produce("cache-t", b"v", partition=0)
    producer.flush(10)
    assert value(scrape(broker), "kafka_consumergroup_group_lag", **labels) == 3
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "cache-g", "group.protocol": "consumer",
                            "enable.auto.commit": False, "client.id": "cache-client"})
    try:
        consumer.subscribe(["cache-t"])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        s = scrape(broker)
        owned = [dict(k[1]) for k in s if k[0] == "kafka_consumergroup_group_lag" and dict(k[1])["group"] == "cache-g"]
        assert [o["client_id"] for o in owned] == ["cache-client"]  # the member now owns the partition
        assert value(s, "cohort_group_members", group="cache-g", type="consumer") == 1
    finally:
        consumer.close()
    admin.delete_consumer_groups(["cache-g"])["cache-g"].result(10)
    assert not [k for k in scrape(broker) if dict(k[1]).get("group") == "cache-g"]


def test_a_taken_http_port_is_a_one_line_error(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "cohort", "serve", "--port", "0", "--data-dir", str(tmp_path / "d"),
                               "-o", f"http.listener=127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(f"cohort serve: http.listener 127.0.0.1:{port}: ")
