"""Client-side assignors through a cohort instance in front of an upstream: Prepare and Install are
cohort's own APIs, so the instance advertises and serves them (the upstream knows nothing of
them), and cohort.client members computing their group's assignment consume through it."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from cohort.client import Consumer, ServerSideAssignor
from cohort.protocol.extensions import INSTALL_ASSIGNMENT_KEY, PREPARE_ASSIGNMENT_KEY
from cohort_testing import WireClient
from cohort.protocol.entities import build
from cohort.protocol.versions import request_schema
from test_upstream_groups import instance

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_an_instance_in_front_of_an_upstream_runs_client_side_assignors(tmp_path, upstream):
    srv = instance(tmp_path / "a", upstream)
    try:
        with WireClient(srv.port) as c:
            resp = c.request(18, 3, build(request_schema(18, 3), client_software_name="t", client_software_version="1"))
            served = {k.api_key for k in resp.api_keys}
        assert {PREPARE_ASSIGNMENT_KEY, INSTALL_ASSIGNMENT_KEY} <= served
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        for f in admin.create_topics([NewTopic("ca-upstream", 4)]).values():
            f.result(20)

        async def scenario():
            members = []
            for _ in range(2):
                m = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "ca-upstream-group"},
                             assignors=[ServerSideAssignor("range", name="client-range")])
                m.subscribe(["ca-upstream"])
                await m.start()
                members.append(m)
            for _ in range(600):
                if all(len(m.assignment()) == 2 for m in members):
                    break
                await asyncio.sleep(0.05)
            got = sorted(sorted(p for _, p in m.assignment()) for m in members)
            described = await asyncio.to_thread(
                lambda: admin.describe_consumer_groups(["ca-upstream-group"])["ca-upstream-group"].result(10))
            for m in members:
                await m.close()
            return got, described.partition_assignor

        assert asyncio.run(asyncio.wait_for(scenario(), 60)) == ([[0, 1], [2, 3]], "client-range")
    finally:
        assert srv.stop() == 0
