"""The sharded coordinator's hypothesis state machine with every shard's records also written to
an upstream-backed log (`UpstreamRecordLog` on a `cohort serve` standing in for the upstream).

Restarting a shard is a change of owner: a new log for the same shard fences the old one, reads
the shard's partition read_committed and replays it; the fresh shard must equal the live one, its
records must be exactly those the live shard wrote, and the old owner can no longer append. It
happens as a rule between steps, and to the busiest shard at the end of each example.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import settings
from hypothesis.stateful import precondition, rule
from hypothesis import strategies as st

from cohort.coordinator import decode, encode
from cohort.upstream import UpstreamLogError, UpstreamRecordLog, ensure_topic

from cg_helpers import dump
from test_stateful_shards import SHARDS, ShardedMachine

pytestmark = pytest.mark.timeout(600)


class UpstreamShardedMachine(ShardedMachine):
    bootstrap = ""  # set by the test from the upstream fixture

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.topic = f"__cohort_groups_{uuid.uuid4().hex[:8]}"
        ensure_topic(self._client(), self.topic, SHARDS, -1, 20)
        self.upstream_logs = [self._owner(p)[0] for p in range(SHARDS)]
        self.written = [0] * SHARDS  # records of self.logs[p] already appended upstream

    def _client(self) -> dict:
        return {"bootstrap.servers": self.bootstrap}

    def _owner(self, p: int) -> tuple[UpstreamRecordLog, list]:
        log = UpstreamRecordLog(self.topic, p, f"cohort-sm-{self.topic}-{p}", self._client(), timeout_s=20)

        async def load():
            await log.open()
            return [r async for r in log.records()]

        return log, self.loop.run_until_complete(load())

    def _write_upstream(self) -> None:
        """Append what each shard wrote since the last step, as the runtime would."""
        async def append():
            futures = []
            for p, log in enumerate(self.upstream_logs):
                new = self.logs[p][self.written[p]:]
                if new:
                    futures.append(log.append_records([encode(r) for r in new]))
                    self.written[p] = len(self.logs[p])
            await asyncio.gather(*futures)

        self.loop.run_until_complete(append())

    def _send(self, group, request):
        response = super()._send(group, request)
        self._write_upstream()
        return response

    @rule(ms=st.sampled_from([1_000, 20_000, 46_000]))
    def tick(self, ms):
        super().tick(ms)
        self._write_upstream()

    @precondition(lambda self: self.restarts < 3)
    @rule(p=st.integers(0, SHARDS - 1))
    def restart_one_shard(self, p):
        """A new owner takes shard p from the upstream; the old owner is fenced."""
        self._change_owner(p)

    def _change_owner(self, p):
        old = self.upstream_logs[p]
        new, records = self._owner(p)
        assert [decode(k, v) for _, k, v, _ in records] == [decode(*encode(r)) for r in self.logs[p]]
        fresh = self._fresh()
        for _, key, value, _ in records:
            fresh.replay(decode(key, value))
        fresh.on_loaded(self.now)
        assert dump(fresh) == dump(self.shards[p])
        async def zombie_append():
            await old.append_records([(b"\x00\x00zombie", None)])

        with pytest.raises(UpstreamLogError, match="fenced"):
            self.loop.run_until_complete(zombie_append())
        self.loop.run_until_complete(old.close())
        self.upstream_logs[p] = new
        self.shards[p].unload()
        self.shards[p] = fresh
        self.restarts += 1

    def teardown(self):
        # every example ends with its busiest shard taken over once more
        self._change_owner(max(range(SHARDS), key=lambda p: len(self.logs[p])))
        for log in self.upstream_logs:
            self.loop.run_until_complete(log.close())
        self.loop.close()


def test_the_sharded_machine_replays_from_the_upstream(upstream):
    UpstreamShardedMachine.bootstrap = upstream.bootstrap
    UpstreamShardedMachine.TestCase.settings = settings(max_examples=4, stateful_step_count=16, deadline=None)
    UpstreamShardedMachine.TestCase().runTest()
