"""An instance in front of an upstream outlives the upstream's outages under load: a short one,
and one longer than every librdkafka timeout inside it (40 s: the coordinator lookups of group
admin requests outlive their requests, librdkafka#4605). It keeps running, serves again once the
upstream is back, and no acknowledged commit is lost. Longer ones: bench/upstream_outage.py."""

import pytest

from upstream_outage import run

pytestmark = [pytest.mark.e2e, pytest.mark.heavy, pytest.mark.timeout(400)]


def test_an_instance_outlives_upstream_outages_of_2_and_40_seconds_under_load(tmp_path):
    rows = run(tmp_path, [2, 40])
    outages, end = rows[:-1], rows[-1]
    assert [r["outage_s"] for r in outages] == [2, 40]
    for r in outages:
        assert r["instance_running"], r
        assert r["lost"] == [], r
    assert end == {"instance_exit_status": 0}
