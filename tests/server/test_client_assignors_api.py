"""Client-side assignors over TCP: cohort's tagged ClientAssignors / ShouldComputeAssignment on
ConsumerGroupHeartbeat v1, and ConsumerGroupPrepareAssignment / InstallAssignment (API keys 1000
and 1001), beside a confluent-kafka (librdkafka) KIP-848 member that names no assignor."""

import datetime
import time

import confluent_kafka as ck
import pytest
from kio.schema.errors import ErrorCode as E
from rawreq import create_topics, req

from cohort.protocol import extensions as x
from cohort_testing import ServerThread, WireClient
from test_groups_api import FAST, c, describe, topic_ids, wait_loaded  # noqa: F401 - c is a fixture

PREPARE, INSTALL = x.PREPARE_ASSIGNMENT_KEY, x.INSTALL_ASSIGNMENT_KEY


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = ServerThread(tmp_path_factory.mktemp("client-assignors"), FAST).start()
    wait_loaded(s)
    with WireClient(s.port) as c:
        assert c.request(19, 7, create_topics(7, ("ca6", 6), ("ca2", 2))).topics[0].error_code == E.none
    yield s
    s.stop()


def heartbeat(c, group, member, epoch, topics=None, assignors=None, owned=None):
    parts = None if owned is None else tuple(x.HeartbeatTopicPartitions(topic_id=t, partitions=tuple(ps))
                                             for t, ps in owned.items())
    return c.request(68, 1, x.ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member, member_epoch=epoch,
        rebalance_timeout=datetime.timedelta(milliseconds=30000 if epoch == 0 else -1),
        subscribed_topic_names=None if topics is None else tuple(topics), topic_partitions=parts,
        client_assignors=assignors))


def affinity(metadata: bytes):
    return (x.ClientAssignor(name="affinity", minimum_version=0, maximum_version=1, reason=0, metadata_version=1,
                             metadata_bytes=metadata),)


def test_api_versions_advertise_prepare_and_install(c):
    resp = c.request(18, 3, req(18, 3, client_software_name="t", client_software_version="1"))
    served = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert served[PREPARE] == (0, 0) and served[INSTALL] == (0, 0) and served[68] == (0, 1)


def test_a_member_computes_the_assignment_and_every_member_receives_its_share_and_metadata(c):
    ids = topic_ids(c, "ca6", "ca2")
    r = heartbeat(c, "cg1", "m-a", 0, ["ca6", "ca2"], affinity(b"state:a"), {})
    assert r.error_code == E.none and r.should_compute_assignment
    r = heartbeat(c, "cg1", "m-b", 0, ["ca6"], affinity(b"state:b"), {})
    assert r.error_code == E.none and not r.should_compute_assignment

    p = c.request(PREPARE, 0, x.ConsumerGroupPrepareAssignmentRequest(group_id="cg1", member_id="m-b", member_epoch=0))
    assert p.error_code == E.invalid_request  # m-b was not chosen
    p = c.request(PREPARE, 0, x.ConsumerGroupPrepareAssignmentRequest(group_id="cg1", member_id="m-a", member_epoch=0))
    assert (p.error_code, p.assignor_name, p.group_epoch) == (E.none, "affinity", 2)
    assert [(m.member_id, m.assignor_metadata, m.assignor_version) for m in p.members] == [
        ("m-a", b"state:a", 1), ("m-b", b"state:b", 1)]
    assert {(t.topic_name, t.num_partitions) for t in p.topics} == {("ca6", 6), ("ca2", 2)}

    def member(mid, parts, meta):
        return x.InstalledMember(member_id=mid, metadata_version=1, metadata_bytes=meta, topic_partitions=tuple(
            x.InstalledTopicPartitions(topic_id=t, partitions=ps) for t, ps in parts.items()))

    bad = c.request(INSTALL, 0, x.ConsumerGroupInstallAssignmentRequest(
        group_id="cg1", member_id="m-a", member_epoch=0, group_epoch=2, error=0,
        members=(member("m-a", {ids["ca6"]: (0, 1)}, b""), member("m-b", {ids["ca6"]: (1, 2)}, b""))))
    assert bad.error_code == E.invalid_request and "more than once" in bad.error_message
    bad = c.request(INSTALL, 0, x.ConsumerGroupInstallAssignmentRequest(
        group_id="cg1", member_id="m-a", member_epoch=0, group_epoch=2, error=0,
        members=(member("m-b", {ids["ca2"]: (0,)}, b""),)))
    assert bad.error_code == E.invalid_request and "does not subscribe" in bad.error_message
    ok = c.request(INSTALL, 0, x.ConsumerGroupInstallAssignmentRequest(
        group_id="cg1", member_id="m-a", member_epoch=0, group_epoch=2, error=0,
        members=(member("m-a", {ids["ca2"]: (0, 1), ids["ca6"]: (5,)}, b"you:a"),
                 member("m-b", {ids["ca6"]: (0, 1, 2, 3, 4)}, b"you:b"))))
    assert ok.error_code == E.none

    r = heartbeat(c, "cg1", "m-a", 0, ["ca6", "ca2"], None, {})
    assert r.member_epoch == 2 and not r.should_compute_assignment
    assert {tp.topic_id: tuple(tp.partitions) for tp in r.assignment.topic_partitions} == {
        ids["ca2"]: (0, 1), ids["ca6"]: (5,)}
    assert (r.assignment.error, r.assignment.metadata_version, r.assignment.metadata_bytes) == (0, 1, b"you:a")
    r = heartbeat(c, "cg1", "m-b", 0, ["ca6"], None, {})
    assert r.member_epoch == 2 and r.assignment.metadata_bytes == b"you:b"
    (group,) = describe(c, "cg1")
    assert (group.assignor_name, group.group_state) == ("affinity", "Stable")


def test_a_member_that_names_no_assignor_keeps_the_group_on_a_server_side_assignor(srv, c):
    """librdkafka sends no ClientAssignors: the group is not assigned on a member."""
    r = heartbeat(c, "cg-mixed", "m-a", 0, ["ca6"], affinity(b""), {})
    assert r.should_compute_assignment  # alone, it computes
    consumer = ck.Consumer({"bootstrap.servers": f"127.0.0.1:{srv.port}", "group.id": "cg-mixed",
                            "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["ca6"])
        deadline = time.monotonic() + 20
        while not consumer.assignment():
            assert time.monotonic() < deadline, "librdkafka got no partitions"
            consumer.poll(0.2)
            heartbeat(c, "cg-mixed", "m-a", 0, ["ca6"], None, {})
        (group,) = describe(c, "cg-mixed")
        assert group.assignor_name == "uniform"  # the broker's default, as the seeds say
        r = heartbeat(c, "cg-mixed", "m-a", 0, ["ca6"], None, {})
        assert not r.should_compute_assignment and r.member_epoch == group.assignment_epoch
        p = c.request(PREPARE, 0, x.ConsumerGroupPrepareAssignmentRequest(group_id="cg-mixed", member_id="m-a",
                                                                          member_epoch=r.member_epoch))
        assert p.error_code == E.invalid_request
    finally:
        consumer.close()
