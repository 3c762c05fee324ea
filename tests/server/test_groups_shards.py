"""Several group coordinator shards in one server: a shard that is loading answers
COORDINATOR_LOAD_IN_PROGRESS for its own groups while the others serve, and requests naming
groups of several shards get each group's own answer."""

from kio.schema.errors import ErrorCode as E
from rawreq import create_topics, req, sub

from cohort.coordinator import partition_for
from cohort_testing import ServerThread, WireClient
from test_groups_api import FAST, commit, describe, heartbeat, join, wait_loaded

SHARDS = 2


def _groups_on_each_shard() -> tuple[str, str]:
    by_shard: dict[int, str] = {}
    for n in range(100):
        by_shard.setdefault(partition_for(f"group-{n}", SHARDS), f"group-{n}")
    return by_shard[0], by_shard[1]


def test_a_loading_shard_answers_load_in_progress_while_the_other_serves(tmp_path):
    serving, loading = _groups_on_each_shard()
    with ServerThread(tmp_path / "data", dict(FAST, **{"offsets.topic.num.partitions": SHARDS})) as srv, \
            WireClient(srv.port) as c:
        wait_loaded(srv)
        coordinator = srv.server.group_coordinator
        assert [r.name for r in coordinator.runtimes] == ["__consumer_offsets-0", "__consumer_offsets-1"]
        assert c.request(19, 7, create_topics(7, ("s", 2))).topics[0].error_code == E.none
        epochs = {}
        for group in (serving, loading):
            joined = join(c, group, "m", ["s"])
            assert joined.error_code == E.none
            epochs[group] = joined.member_epoch
            assert commit(c, 9, group, {"s": {0: 5}}, epochs[group], "m") == {("s", 0): E.none}
        described = {g.group_id: g for g in describe(c, serving, loading)}  # one request, two shards
        assert {g: (d.error_code, d.group_state) for g, d in described.items()} == {
            serving: (E.none, "Stable"), loading: (E.none, "Stable")}

        stalled = coordinator.runtime_for(loading)
        srv.call(lambda: setattr(stalled, "loaded", False))  # as while that shard replays its log
        try:
            assert join(c, loading, "other", ["s"]).error_code == E.coordinator_load_in_progress
            assert commit(c, 9, loading, {"s": {0: 6}}, epochs[loading], "m") == {("s", 0): E.coordinator_load_in_progress}
            assert commit(c, 9, serving, {"s": {1: 7}}, epochs[serving], "m") == {("s", 1): E.none}
            assert join(c, serving, "other", ["s"]).error_code == E.none
            described = {g.group_id: g.error_code for g in describe(c, serving, loading)}
            assert described == {serving: E.none, loading: E.coordinator_load_in_progress}
            fetched = c.request(9, 8, req(9, 8, groups=tuple(
                sub(9, 8, "groups", group_id=g, member_id=None, member_epoch=-1, topics=None) for g in (serving, loading)),
                require_stable=False))
            by_group = {g.group_id: (g.error_code, {(t.name, p.partition_index): p.committed_offset
                                                     for t in g.topics for p in t.partitions}) for g in fetched.groups}
            assert by_group == {serving: (E.none, {("s", 0): 5, ("s", 1): 7}),
                                loading: (E.coordinator_load_in_progress, {})}
            listed = c.request(16, 5, req(16, 5, states_filter=(), types_filter=()))
            assert listed.error_code == E.coordinator_load_in_progress  # Kafka: a failed shard fails the listing
        finally:
            srv.call(lambda: setattr(stalled, "loaded", True))
        listed = c.request(16, 5, req(16, 5, states_filter=(), types_filter=()))
        assert listed.error_code == E.none and {serving, loading} <= {g.group_id for g in listed.groups}


def test_a_shard_handed_over_answers_not_coordinator_and_serves_again_once_taken_back(tmp_path):
    """What an instance of a cohort cluster does with a shard the cluster moves away and back
    (`GroupCoordinator.release` / `acquire`): NOT_COORDINATOR for its groups while the other
    shard serves, only owned shards listed, its timers stopped, its state replayed on return."""
    import asyncio

    kept, moved = _groups_on_each_shard()
    with ServerThread(tmp_path / "data", dict(FAST, **{"offsets.topic.num.partitions": SHARDS})) as srv, \
            WireClient(srv.port) as c:
        wait_loaded(srv)
        coordinator = srv.server.group_coordinator
        assert c.request(19, 7, create_topics(7, ("s", 2))).topics[0].error_code == E.none
        epochs = {}
        for group in (kept, moved):
            joined = join(c, group, "m", ["s"])
            epochs[group] = joined.member_epoch
            assert commit(c, 9, group, {"s": {0: 5}}, epochs[group], "m") == {("s", 0): E.none}
        shard = coordinator.partition_of(coordinator.runtime_for(moved))
        runtime = coordinator.runtimes[shard]

        def run(coro):
            return asyncio.run_coroutine_threadsafe(coro, srv.loop).result(30)

        run(coordinator.release([shard]))
        assert not runtime.loaded and not runtime.owned
        assert runtime.shard.next_deadline() is None  # a fresh shard: the old one's session timers went with it
        assert join(c, moved, "other", ["s"]).error_code == E.not_coordinator
        assert commit(c, 9, moved, {"s": {0: 6}}, epochs[moved], "m") == {("s", 0): E.not_coordinator}
        assert {g.group_id: g.error_code for g in describe(c, kept, moved)} == {kept: E.none, moved: E.not_coordinator}
        assert commit(c, 9, kept, {"s": {1: 7}}, epochs[kept], "m") == {("s", 1): E.none}
        listed = c.request(16, 5, req(16, 5, states_filter=(), types_filter=()))
        assert listed.error_code == E.none and {g.group_id for g in listed.groups} == {kept}

        run(coordinator.acquire([shard]))
        assert runtime.loaded and runtime.owned
        fetched = c.request(9, 8, req(9, 8, groups=(sub(9, 8, "groups", group_id=moved, member_id=None, member_epoch=-1,
                                                        topics=None),), require_stable=False))
        assert {(t.name, p.partition_index): p.committed_offset for t in fetched.groups[0].topics
                for p in t.partitions} == {("s", 0): 5}  # replayed: nothing the hand-over lost
        assert heartbeat(c, moved, "m", epochs[moved]).error_code == E.none  # the member is still known
        listed = c.request(16, 5, req(16, 5, states_filter=(), types_filter=()))
        assert {kept, moved} <= {g.group_id for g in listed.groups}
