"""Share groups across a kill -9 of the broker, under load: three share consumers and a producer.

What Kafka guarantees, and cohort must: a record whose ACCEPT was confirmed (the commit_sync
result for its partition said so) is never delivered again, every produced record is delivered
at least once, and the group resumes after the restart."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from cohort.librdkafka import RESTART_SAFE
from cohort_testing import ServerProcess, ShareLedger, produce_jobs

pytestmark = [pytest.mark.e2e, pytest.mark.heavy]

RECORDS = 3000
# Under load the consumers' prefetched records, acknowledged after the kill, fail with a
# transport error; they are delivered again after the restart, which takes a moment.
QUIET_S = 3.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    srv = ServerProcess(tmp_path / "data", "num.partitions=3", args=("--port", str(_free_port())),
                        log_path=str(tmp_path / "server.log")).start()
    yield srv
    srv.stop()


def test_no_accepted_record_is_delivered_again_after_a_kill_9(server):
    settings = {"bootstrap.servers": server.bootstrap, **RESTART_SAFE}
    topic, group = f"jobs-{uuid.uuid4().hex[:6]}", f"workers-{uuid.uuid4().hex[:6]}"
    admin = AdminClient(settings)
    for f in admin.create_topics([NewTopic(topic, 3)]).values():
        f.result(20)
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(20)
    del admin

    produced: list[bytes] = []
    stop = threading.Event()

    producer = threading.Thread(target=produce_jobs, args=(settings, topic, RECORDS, produced, stop, 50, 0.01),
                                name="producer")
    producer.start()
    consumers = [ShareConsumer({**settings, "group.id": group, "share.acknowledgement.mode": "explicit",
                                "log_level": 2}) for _ in range(3)]
    for c in consumers:
        c.subscribe([topic])
    ledger = ShareLedger()
    killed = False
    deadline = time.monotonic() + 120
    try:
        while True:
            assert time.monotonic() < deadline, (f"{len(ledger.delivered())} of {len(produced)} "
                                                 "records delivered before the deadline")
            if not killed and len(ledger.deliveries) >= RECORDS // 3:
                server.proc.kill()
                assert server.stop() == -9
                time.sleep(0.5)
                server.start()
                killed = True
            for c in consumers:
                ledger.poll(c)
            # Records whose acknowledgement the kill cut short come back once the broker is up
            # again; the run ends when every record was delivered and none came for QUIET_S.
            if (killed and not producer.is_alive() and ledger.quiet_for() >= QUIET_S
                    and set(produced) <= ledger.delivered()):
                break
    finally:
        stop.set()
        producer.join(30)
        for c in consumers:
            c.close()
    assert killed
    # every produced record was delivered, and none after its ACCEPT was confirmed
    assert set(produced) <= ledger.delivered()
    again = ledger.confirmed_then_delivered()
    assert again == [], f"{len(again)} confirmed records delivered again, e.g. {again[:5]}"
    assert len(ledger.confirmed) >= RECORDS * 0.9, f"acknowledgements not confirmed, by reason: {dict(ledger.refused)}"
