"""The broker's Prometheus metrics, built when `/metrics` is scraped.

Nothing here runs on the request path: the server and the coordinator runtime record into plain
counters and histograms (`cohort.stats`), and `render` reads them, with the groups and logs, in
one pass on the event loop when Prometheus asks. Lag series use the names kafka-lag-exporter
publishes (`kafka_consumergroup_group_lag` ... with `cluster_name`, `group`, `topic`, `partition`,
`member_host`, `consumer_id`, `client_id`), so its dashboards and alerts work unchanged;
everything else is `cohort_*`.

The families with a few series (requests, latencies, bytes, coordinator timings) go through
prometheus_client's collector and `generate_latest`. The ones with a series per group or per
partition are written as text here: `generate_latest` validates and escapes every label of every
sample (about 20 us a sample, measured with cProfile: 2.4 s for the 121,000 samples of 10,000
groups, all of it on the broker's event loop). `FleetRenderer` keeps them from one scrape to the
next and redoes only what changed since (bench/metrics_scrape.py has the figures).
"""

from __future__ import annotations

import asyncio
import itertools
import operator
from collections import Counter
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry

from cohort.protocol.versions import SUPPORTED
from cohort.stats import Histogram


def _histogram(name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, doc, labels=labels, unit="seconds")


def _add(family: HistogramMetricFamily, labels: list[str], h: Histogram) -> None:
    family.add_metric(labels, h.cumulative(), h.sum)


class BrokerCollector:
    """A Prometheus collector over a running `Server` (its public views only)."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def describe(self) -> list:
        return []  # collected on demand only: registering must not read the broker

    def collect(self):
        server = self.server
        yield from self._requests(server.stats)
        coordinator = getattr(server, "group_coordinator", None)
        if coordinator is not None:
            yield from self._coordinator(coordinator)
        share = getattr(server, "share_partitions", None)
        if share is not None and share.loaded:
            yield from self._share(share)
        proxy = getattr(server, "upstream_proxy", None)
        if proxy is not None:
            yield from self._cluster(proxy.cohort_cluster())

    @staticmethod
    def _cluster(cluster: dict):
        """The cohort cluster as this instance sees it: which instance owns which shard."""
        instances = GaugeMetricFamily("cohort_cluster_instances", "Instances of this cohort cluster, as this one last "
                                      "read its group on the upstream.")
        instances.add_metric([], len(cluster["instances"]))
        owner = GaugeMetricFamily("cohort_cluster_shard_owner", "1 for each group coordinator shard and the node id of "
                                  "the instance that owns it.", labels=["shard", "node_id", "endpoint"])
        for i in cluster["instances"]:
            for shard in i["shards"]:
                owner.add_metric([str(shard), str(i["node_id"]), f"{i['host']}:{i['port']}"], 1)
        yield from (instances, owner)
        if cluster["node_id"] is not None:
            node = GaugeMetricFamily("cohort_cluster_node_id", "This instance's coordinator node id.")
            node.add_metric([], cluster["node_id"])
            yield node

    @staticmethod
    def _share(share: Any):
        """Share groups (KIP-932): groups by state, acknowledgements, lock timeouts, sessions and
        each share-partition's records in flight."""
        groups = GaugeMetricFamily("cohort_share_groups", "Share groups by state.", labels=["state"])
        for state, n in sorted(share.group_states().items()):
            groups.add_metric([state], n)
        acks = CounterMetricFamily("cohort_share_acknowledgements", "Records acknowledged by share consumers, by "
                                   "type (accept, release, reject, renew, gap).", labels=["type"])
        for kind, n in sorted(share.acknowledgements.items()):
            acks.add_metric([kind], n)
        timeouts = CounterMetricFamily("cohort_share_lock_timeouts", "Acquired records whose lock ran out before "
                                       "they were acknowledged.")
        timeouts.add_metric([], share.lock_timeouts)
        sessions = GaugeMetricFamily("cohort_share_sessions", "Share sessions open on this broker.")
        sessions.add_metric([], len(share.sessions))
        labels = ["group", "topic", "partition"]
        in_flight = GaugeMetricFamily("cohort_share_records_in_flight", "Records between a share-partition's start "
                                      "and end offsets.", labels=labels)
        acquired = GaugeMetricFamily("cohort_share_records_acquired", "Records of a share-partition acquired by "
                                     "a consumer now.", labels=labels)
        lag = GaugeMetricFamily("cohort_share_lag", "Records of a share-partition not yet delivered for good "
                                "(end offset - start offset - records finished above the start).", labels=labels)
        for group, topic, partition, start, end, n_acquired, _, n_lag in share.partition_views():
            key = [group, topic, str(partition)]
            in_flight.add_metric(key, end - start)
            acquired.add_metric(key, n_acquired)
            lag.add_metric(key, n_lag)
        yield from (groups, acks, timeouts, sessions, in_flight, acquired, lag)

    @staticmethod
    def _requests(stats: Any):
        latency = _histogram("cohort_request_duration", "Time from a request's frame read to its response handed "
                             "to the socket, by API and version.", ["api", "version"])
        count = CounterMetricFamily("cohort_requests", "Requests answered, by API and version.",
                                    labels=["api", "version"])
        for (key, version), h in sorted(stats.latency.items()):
            labels = [SUPPORTED.get(key, (str(key),))[0], str(version)]
            _add(latency, labels, h)
            count.add_metric(labels, h.count)
        yield count
        yield latency
        received = CounterMetricFamily("cohort_network_received_bytes", "Bytes of request frames read, by "
                                       "listener.", labels=["listener"])
        sent = CounterMetricFamily("cohort_network_sent_bytes", "Bytes of response frames written, by listener.",
                                   labels=["listener"])
        opened = CounterMetricFamily("cohort_connections_opened", "Connections accepted, by listener.",
                                     labels=["listener"])
        current = GaugeMetricFamily("cohort_connections", "Connections open now, by listener.", labels=["listener"])
        for name, n in sorted(stats.bytes_in.items()):
            received.add_metric([name], n)
        for name, n in sorted(stats.bytes_out.items()):
            sent.add_metric([name], n)
        for name, n in sorted(stats.connections_opened.items()):
            opened.add_metric([name], n)
        for name, n in sorted(stats.connections_open.items()):
            current.add_metric([name], n)
        yield from (received, sent, opened, current)

    @staticmethod
    def _coordinator(coordinator: Any):
        log = coordinator.log
        append = _histogram("cohort_coordinator_append_duration", "Writing one batch of coordinator records "
                            "(before its fsync).", [])
        _add(append, [], log.append_seconds)
        fsync = _histogram("cohort_coordinator_fsync_duration", "One fsync of the coordinator log.", [])
        _add(fsync, [], log.fsync_seconds)
        assignor = _histogram("cohort_assignor_duration", "One run of a server-side assignor.", ["assignor"])
        for name, h in sorted(coordinator.assignor_seconds.items()):
            _add(assignor, [name], h)
        bumps = CounterMetricFamily("cohort_group_rebalances", "Group epoch bumps (consumer and share groups) and new "
                                    "generations (classic groups) since the broker started.", labels=["type"])
        for kind, n in sorted(coordinator.timeline.bumps.items()):
            bumps.add_metric([kind], n)
        ready = GaugeMetricFamily("cohort_coordinator_loaded", "1 once the group coordinator has replayed its log.")
        ready.add_metric([], 1 if coordinator.loaded else 0)
        served = GaugeMetricFamily("cohort_coordinator_shards_served", "Group coordinator shards served from this "
                                   "instance now (in a cohort cluster, the ones its membership assigned here).")
        served.add_metric([], sum(1 for r in coordinator.runtimes if r.loaded))
        yield from (append, fsync, assignor, bumps, ready, served)

def registry_for(server: Any) -> CollectorRegistry:
    """A registry holding only the broker's collector (not the client library's process globals)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server))
    return registry


def _escape(value: str) -> str:
    """A label value in the text format (backslash, double quote and newline escaped)."""
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


_GROUP_FAMILIES = (
    ("cohort_group_members", "gauge", "Members of each group."),
    ("cohort_group_epoch", "gauge", "Each group's epoch (a classic group's generation)."),
    ("kafka_consumergroup_group_lag", "gauge",
     "Log end offset minus the group's committed offset, per partition with a commit."),
    ("kafka_consumergroup_group_offset", "gauge", "The group's committed offset."),
    ("kafka_consumergroup_group_max_lag", "gauge", "The largest partition lag of a group."),
    ("kafka_consumergroup_group_sum_lag", "gauge", "The sum of a group's partition lags."),
)
_MEMBERS, _EPOCH, _LAG, _OFFSET, _MAX_LAG, _SUM_LAG = range(6)
_LAG_FAMILIES = (_LAG, _MAX_LAG, _SUM_LAG)  # what a moved log end changes
_NUMBERED = (_LAG, _OFFSET, _MAX_LAG, _SUM_LAG)  # a template per family, filled in at once
_offset_of = operator.attrgetter("offset")  # map() with it: a third cheaper than a comprehension


def _head(name: str, kind: str, doc: str) -> str:
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


def _template(labels: str) -> str:
    """Label text for a bytes %-template (a label value may hold a '%')."""
    return labels.replace("%", "%%")


class _GroupLines:
    """One group's part of each per-group family, and what it was built from. The members and
    epoch lines are bytes; the lag, offset, max and sum lag lines are %-templates over the label
    text (a %d per value) with their values kept beside them, so that the renderer fills in a
    whole family with one formatting call when numbers move."""

    __slots__ = ("kind", "state", "members_key", "partitions", "ends_of", "at", "lines", "values")

    def __init__(self) -> None:
        self.kind = self.state = ""
        self.members_key: Any = None
        self.partitions: tuple = ()  # (topic, partition) of each committed offset
        self.ends_of: Any = None  # their log ends from the renderer's list of ends by slot
        self.at: tuple = ()  # those offsets
        self.lines = [b"", b"", b"", b"", b"", b""]  # by family (_MEMBERS ... _SUM_LAG)
        self.values: list[tuple] = [(), (), (), (), (), ()]  # the numbers of each _NUMBERED template


CHUNK = 1000  # groups or partitions rendered between two turns of the event loop


class FleetRenderer:
    """The families with a series per partition or per group, as exposition text.

    Work follows change, not fleet size: the coordinator runtime names the groups its records
    touched since the last scrape (`ChangeFeed`), classic groups are checked for what they change
    in memory, and partitions for moved log ends. Only those groups' lines are rebuilt (a moved
    log end rebuilds only the lag lines of the groups with a commit on it), and only the families
    with a rebuilt line are joined again; the others are served as the bytes of the last scrape.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()  # one scrape at a time: a scrape yields to the loop midway
        self._reset("")

    def _reset(self, cluster: str) -> None:
        self._cluster = cluster  # in every label text
        self._topics: dict[str, str] = {}
        self._partitions: dict[tuple[str, int], tuple] = {}  # -> (start, end, size, its three lines)
        self._partition_text = b""
        self._slots: dict[tuple[str, int], int] = {}  # a partition's place in _ends, kept for good
        self._ends: list[int | None] = []  # log end offsets by slot (None: the partition is gone)
        self._reset_groups(None)

    def _reset_groups(self, coordinator: Any) -> None:
        self._source = coordinator  # the coordinator whose changes this follows
        self._subscription = None if coordinator is None else coordinator.changes.subscribe()
        self._groups: dict[str, _GroupLines] = {}
        self._sorted: list[_GroupLines] | None = None  # in group id order; None after groups came or went
        self._readers: dict[tuple[str, int], set[_GroupLines]] = {}  # partition -> groups with a commit on it
        self._classic: dict[str, tuple] = {}
        self._states: Counter = Counter()  # (type, state) -> groups
        self._family_text: list[bytes] = [b""] * len(_GROUP_FAMILIES)
        self._stale = set(range(len(_GROUP_FAMILIES)))  # families to write again
        self._layout: list[bytes] = [b""] * len(_GROUP_FAMILIES)  # every group's template, joined
        self._relayout = set(_NUMBERED)  # templates to join again (labels changed, groups came or went)

    def _topic(self, name: str) -> str:
        escaped = self._topics.get(name)
        if escaped is None:
            escaped = self._topics[name] = _escape(name)
        return escaped

    async def exposition(self, server: Any) -> list[bytes]:
        """These families, as pieces of text to send one after the other (joining 18 MB at
        10,000 groups would cost a copy). Yields to the event loop every CHUNK groups or
        partitions, so a scrape of a large fleet never holds the broker up for long; each group
        is read whole within one step."""
        async with self._lock:
            return await self._exposition(server)

    async def _exposition(self, server: Any) -> list[bytes]:
        cluster = _escape(server.config["metrics.cluster.name"])
        if cluster != self._cluster:
            self._reset(cluster)
        coordinator = getattr(server, "group_coordinator", None)
        ends, moved = await self._read_partitions(server.partitions())
        if coordinator is None or not coordinator.loaded:
            return [self._partition_text]
        if self._source is not coordinator:
            self._reset_groups(coordinator)
        await self._read_groups(coordinator, ends, moved)
        out = [self._partition_text]
        states = "".join(f'cohort_groups{{type="{kind}",state="{state}"}} {n}\n'
                         for (kind, state), n in sorted(self._states.items()))
        out.append((_head("cohort_groups", "gauge", "Groups by type and state.") + states).encode())
        if self._stale:
            if self._sorted is None:
                self._sorted = [self._groups[gid] for gid in sorted(self._groups)]
                self._relayout.update(_NUMBERED)
            ordered = self._sorted
            for n in sorted(self._stale):
                name, kind, doc = _GROUP_FAMILIES[n]
                head = _head(name, kind, doc).encode()
                if n not in _NUMBERED:
                    self._family_text[n] = b"".join([head, *[g.lines[n] for g in ordered]])
                else:
                    if n in self._relayout:
                        self._layout[n] = b"".join([g.lines[n] for g in ordered])
                    numbers = tuple(itertools.chain.from_iterable([g.values[n] for g in ordered]))
                    self._family_text[n] = head + self._layout[n] % numbers
                await asyncio.sleep(0)
            self._stale.clear()
            self._relayout.clear()
        out += self._family_text
        imbalance = [_head("cohort_lag_imbalance", "gauge", "Heaviest member's assigned lag over the mean, at the "
                           "lag assignor's last evaluation of the group.")]
        moves = [_head("cohort_lag_rebalances", "counter", "Lag-driven epoch bumps (the lag assignor moved "
                       "partitions) since the broker started.")]
        for gid, state in sorted(coordinator.lag_balance().items()):
            imbalance.append(f'cohort_lag_imbalance{{group="{_escape(gid)}"}} {state.last_imbalance!r}\n')
            moves.append(f'cohort_lag_rebalances_total{{group="{_escape(gid)}"}} {state.rebalances}\n')
        out.append(("".join(imbalance) + "".join(moves)).encode())
        return out

    def _slot(self, tp: tuple[str, int]) -> int:
        slot = self._slots.get(tp)
        if slot is None:
            slot = self._slots[tp] = len(self._ends)
            self._ends.append(None)
        return slot

    async def _read_partitions(self, views: list) -> tuple[list, set]:
        """Log end offsets by slot, and the partitions whose end moved (or that came or went)."""
        known, seen = self._partitions, {}
        ends, slot_of = self._ends, self._slot
        moved: set[tuple[str, int]] = set()
        changed = False
        for n, p in enumerate(views, 1):
            if n % CHUNK == 0:
                await asyncio.sleep(0)
            tp = (p.topic, p.partition)
            entry = known.get(tp)
            if entry is None or entry[0] != p.start or entry[1] != p.end or entry[2] != p.size:
                if entry is None or entry[1] != p.end:
                    moved.add(tp)
                    ends[slot_of(tp)] = p.end
                t = self._topic(p.topic)
                labels = f'{{cluster_name="{self._cluster}",topic="{t}",partition="{p.partition}"}} '
                entry = (p.start, p.end, p.size, f"kafka_partition_latest_offset{labels}{p.end}\n",
                         f"kafka_partition_earliest_offset{labels}{p.start}\n",
                         f'cohort_log_size_bytes{{topic="{t}",partition="{p.partition}"}} {p.size}\n')
                changed = True
            seen[tp] = entry
        if len(seen) != len(known):
            changed = True
            for tp in known.keys() - seen.keys():
                moved.add(tp)
                ends[self._slots[tp]] = None
        if changed:
            self._partitions = seen
            ordered = list(seen.values())
            self._partition_text = "".join((
                _head("kafka_partition_latest_offset", "gauge", "A partition's log end offset."),
                *[e[3] for e in ordered],
                _head("kafka_partition_earliest_offset", "gauge", "A partition's log start offset."),
                *[e[4] for e in ordered],
                _head("cohort_log_size_bytes", "gauge", "A partition's log size on disk."),
                *[e[5] for e in ordered])).encode()
        return ends, moved

    async def _read_groups(self, coordinator: Any, ends: list, moved: set) -> None:
        """Rebuild the groups that changed; only the lag lines of those whose partitions moved."""
        changed = self._subscription.take()
        live = coordinator.live_classic()
        if changed is None:
            reread: Any = None  # every group
            self._stale.update(range(len(_GROUP_FAMILIES)))
        else:
            reread, committed = changed
            classic = self._classic
            reread.update(gid for gid, key in live.items() if classic.get(gid) != key)
            reread.update(classic.keys() - live.keys())
            committed -= reread
            if committed:  # new offsets on the same partitions: only offset and lag lines
                reread.update(await self._read_offsets(coordinator, committed, ends))
        self._classic = live
        if reread is None:
            ids = coordinator.group_ids()
            gone = self._groups.keys() - set(ids)
        else:
            ids = sorted(reread)
            gone = set()
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            found = coordinator.group_lags(only=chunk)  # read and rendered within one loop turn
            for g in found:
                self._rebuild(g, ends)
            if found:
                self._stale.update(range(len(_GROUP_FAMILIES)))
            if len(found) != len(chunk):
                gone.update(set(chunk) - {g.group_id for g in found})
            await asyncio.sleep(0)
        for gid in gone:
            self._forget(gid)
        if reread is not None and moved:
            readers = self._readers
            lagging = list(set().union(*[readers[tp] for tp in moved if tp in readers]))
            if lagging:
                self._stale.update(_LAG_FAMILIES)
            lag_lines = self._lag_values
            for start in range(0, len(lagging), CHUNK):
                for lines in lagging[start:start + CHUNK]:
                    lag_lines(lines, ends)
                await asyncio.sleep(0)

    async def _read_offsets(self, coordinator: Any, group_ids: set[str], ends: list) -> list[str]:
        """Offset and lag lines of groups whose only records were offset commits; returns the
        groups that need reading whole (new to this renderer, or a partition came or went)."""
        whole = []
        moved = False
        groups, lag_lines = self._groups, self._lag_values
        ids = list(group_ids)
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start:start + CHUNK]
            for gid, committed in zip(chunk, coordinator.committed_offsets(chunk)):
                lines = groups.get(gid)
                if lines is None or committed is None or tuple(committed) != lines.partitions:
                    whole.append(gid)
                    continue
                at = tuple(map(_offset_of, committed.values()))
                if at == lines.at:
                    continue  # the same offsets committed again (auto-commit with nothing consumed)
                lines.at = lines.values[_OFFSET] = at
                lag_lines(lines, ends)
                moved = True
            await asyncio.sleep(0)
        if moved:
            self._stale.update((_OFFSET, *_LAG_FAMILIES))
        return whole

    def _rebuild(self, g: Any, ends: list) -> None:
        """Every line of one group, from the coordinator's view of it now (the caller marks the
        families stale)."""
        gid = g.group_id
        lines = self._groups.get(gid)
        if lines is None:
            lines = self._groups[gid] = _GroupLines()
            self._sorted = None
        else:
            self._drop_state(lines)
        self._states[(g.type, g.state)] += 1
        lines.kind, lines.state = g.type, g.state
        committed = g.committed
        partitions = tuple(committed)
        if partitions != lines.partitions:
            readers = self._readers
            for tp in lines.partitions:
                if tp not in committed:
                    group = readers[tp]
                    group.discard(lines)
                    if not group:
                        del readers[tp]
            for tp in partitions:
                readers.setdefault(tp, set()).add(lines)
            slots = [self._slot(tp) for tp in partitions]
            lines.ends_of = operator.itemgetter(*slots, slots[0]) if slots else None
        if partitions != lines.partitions or g.members_key != lines.members_key or not lines.lines[_MEMBERS]:
            self._labels(lines, g, partitions)  # owners are looked up again only when members or partitions move
            self._relayout.update(_NUMBERED)
        lines.partitions, lines.members_key = partitions, g.members_key
        lines.at = lines.values[_OFFSET] = tuple(map(_offset_of, committed.values()))
        eid = _escape(gid)
        lines.lines[_MEMBERS] = f'cohort_group_members{{group="{eid}",type="{g.type}"}} {g.members}\n'.encode()
        lines.lines[_EPOCH] = f'cohort_group_epoch{{group="{eid}",type="{g.type}"}} {g.epoch}\n'.encode()
        self._lag_values(lines, ends)

    def _labels(self, lines: _GroupLines, g: Any, partitions: tuple) -> None:
        """The label text of each committed partition (with the member holding it) and of the group."""
        gid = _escape(g.group_id)
        cluster = self._cluster
        owners = g.owners() if partitions else {}
        head = f'{{cluster_name="{cluster}",group="{gid}",topic="'
        nobody = '",member_host="",consumer_id="",client_id=""} '
        tails: dict = {}
        texts = []
        for topic, partition in partitions:
            who = owners.get((topic, partition))
            if who is None:
                tail = nobody
            else:
                tail = tails.get(who)
                if tail is None:
                    tail = tails[who] = (f'",member_host="{_escape(who[0])}",consumer_id="{_escape(who[1])}",'
                                         f'client_id="{_escape(who[2])}"}} ')
            texts.append(f'{head}{self._topic(topic)}",partition="{partition}{tail}')
        texts = [_template(text) for text in texts]
        out = lines.lines
        out[_LAG] = "".join([f"kafka_consumergroup_group_lag{text}%d\n" for text in texts]).encode()
        out[_OFFSET] = "".join([f"kafka_consumergroup_group_offset{text}%d\n" for text in texts]).encode()
        if partitions:
            group_labels = _template(f'{{cluster_name="{cluster}",group="{gid}"}} ')
            out[_MAX_LAG] = f"kafka_consumergroup_group_max_lag{group_labels}%d\n".encode()
            out[_SUM_LAG] = f"kafka_consumergroup_group_sum_lag{group_labels}%d\n".encode()
        else:
            out[_MAX_LAG] = out[_SUM_LAG] = b""  # no lag without a commit

    @staticmethod
    def _lag_values(lines: _GroupLines, ends: list) -> None:
        """A group's lag, max lag and sum lag values at these log ends (none without a commit).
        The usual case is a few C calls: the ends looked up at once, subtracted."""
        at = lines.at
        values = lines.values
        if not at:
            values[_LAG] = values[_MAX_LAG] = values[_SUM_LAG] = ()
            return
        known = lines.ends_of(ends)  # one more than `at` (so that it is a tuple): zip and map stop at `at`
        try:
            behind = tuple(map(operator.sub, known, at))
        except TypeError:  # a partition that is gone (or not yet read): no lag
            behind = tuple([0 if end is None else end - a for end, a in zip(known, at)])
        if min(behind) < 0:  # committed past the log end
            behind = tuple([b if b > 0 else 0 for b in behind])
        values[_LAG] = behind
        values[_MAX_LAG] = (max(behind),)
        values[_SUM_LAG] = (sum(behind),)

    def _drop_state(self, lines: _GroupLines) -> None:
        key = (lines.kind, lines.state)
        self._states[key] -= 1
        if not self._states[key]:
            del self._states[key]

    def _forget(self, gid: str) -> None:
        """A group that is gone: its lines, its place among a partition's readers, its state count."""
        lines = self._groups.pop(gid, None)
        if lines is None:
            return
        self._drop_state(lines)
        for tp in lines.partitions:
            group = self._readers.get(tp)
            if group is not None:
                group.discard(lines)
                if not group:
                    del self._readers[tp]
        self._sorted = None
        self._stale.update(range(len(_GROUP_FAMILIES)))


async def render(server: Any, registry: CollectorRegistry, fleet: FleetRenderer) -> list[bytes]:
    """The whole /metrics answer in pieces: the library's families, then the fleet's."""
    from prometheus_client import generate_latest

    return [generate_latest(registry), *await fleet.exposition(server)]
