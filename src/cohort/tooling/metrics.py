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
groups, all of it on the broker's event loop), while these are built from label strings escaped
once per group, topic and member (bench/metrics_scrape.py has the figures).
"""

from __future__ import annotations

import asyncio
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
        bumps = CounterMetricFamily("cohort_group_rebalances", "Group epoch bumps (consumer groups) and new "
                                    "generations (classic groups) since the broker started.", labels=["type"])
        for kind, n in sorted(coordinator.timeline.bumps.items()):
            bumps.add_metric([kind], n)
        ready = GaugeMetricFamily("cohort_coordinator_loaded", "1 once the group coordinator has replayed its log.")
        ready.add_metric([], 1 if coordinator.loaded else 0)
        yield from (append, fsync, assignor, bumps, ready)

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


class _Family:
    __slots__ = ("head", "lines")

    def __init__(self, name: str, kind: str, doc: str) -> None:
        self.head = f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"
        self.lines: list[str] = []

    def text(self) -> str:
        return self.head + "".join(self.lines)


CHUNK = 1000  # groups or partitions rendered between two turns of the event loop


class FleetRenderer:
    """The families with a series per partition or per group, as exposition text.

    A group's lag and offset lines are kept from one scrape to the next and rebuilt only when
    its committed offsets, the log end offsets of those partitions or its members changed, so
    a scrape of a mostly idle fleet costs a check per partition rather than two formatted lines."""

    def __init__(self) -> None:
        self._groups: dict[str, tuple] = {}
        self._topics: dict[str, str] = {}

    def _topic(self, name: str) -> str:
        escaped = self._topics.get(name)
        if escaped is None:
            escaped = self._topics[name] = _escape(name)
        return escaped

    async def text(self, server: Any) -> str:
        """Yields to the event loop every CHUNK groups or partitions, so a scrape of a large fleet
        never holds the broker up for long; each group is read whole within one step."""
        cluster = _escape(server.config["metrics.cluster.name"])
        latest = _Family("kafka_partition_latest_offset", "gauge", "A partition's log end offset.")
        earliest = _Family("kafka_partition_earliest_offset", "gauge", "A partition's log start offset.")
        size = _Family("cohort_log_size_bytes", "gauge", "A partition's log size on disk.")
        ends: dict[tuple[str, int], int] = {}
        for n, p in enumerate(server.partitions(), 1):
            if n % CHUNK == 0:
                await asyncio.sleep(0)
            t = self._topic(p.topic)
            ends[(p.topic, p.partition)] = p.end
            labels = f'{{cluster_name="{cluster}",topic="{t}",partition="{p.partition}"}} '
            latest.lines.append(f"kafka_partition_latest_offset{labels}{p.end}\n")
            earliest.lines.append(f"kafka_partition_earliest_offset{labels}{p.start}\n")
            size.lines.append(f'cohort_log_size_bytes{{topic="{t}",partition="{p.partition}"}} {p.size}\n')
        families = [latest, earliest, size]
        coordinator = getattr(server, "group_coordinator", None)
        if coordinator is None or not coordinator.loaded:
            return "".join(f.text() for f in families)
        count = _Family("cohort_groups", "gauge", "Groups by type and state.")
        members = _Family("cohort_group_members", "gauge", "Members of each group.")
        epochs = _Family("cohort_group_epoch", "gauge", "Each group's epoch (a classic group's generation).")
        lag = _Family("kafka_consumergroup_group_lag", "gauge",
                      "Log end offset minus the group's committed offset, per partition with a commit.")
        offset = _Family("kafka_consumergroup_group_offset", "gauge", "The group's committed offset.")
        max_lag = _Family("kafka_consumergroup_group_max_lag", "gauge", "The largest partition lag of a group.")
        sum_lag = _Family("kafka_consumergroup_group_sum_lag", "gauge", "The sum of a group's partition lags.")
        by_state: Counter = Counter()
        previous, kept = self._groups, {}
        for n, g in enumerate(coordinator.group_lags(), 1):
            if n % CHUNK == 0:
                await asyncio.sleep(0)
            by_state[(g.type, g.state)] += 1
            committed = g.committed
            key = (tuple(committed.values()), tuple([ends.get(tp) for tp in committed]), g.members_key, g.epoch)
            cached = previous.get(g.group_id)
            if cached is None or cached[0] != key:
                # the label strings survive a change of offsets; members or partitions rebuild them
                labels = cached[1] if cached is not None and cached[0][2:] == key[2:] and cached[1][0] == tuple(
                    committed) else self._labels(cluster, g)
                cached = (key, labels, *self._group_lines(g, labels, ends))
            kept[g.group_id] = cached
            members.lines.append(cached[2])
            epochs.lines.append(cached[3])
            if committed:
                lag.lines.append(cached[4])
                offset.lines.append(cached[5])
                max_lag.lines.append(cached[6])
                sum_lag.lines.append(cached[7])
        self._groups = kept  # groups gone since are forgotten
        for (kind, state), n in sorted(by_state.items()):
            count.lines.append(f'cohort_groups{{type="{kind}",state="{state}"}} {n}\n')
        imbalance = _Family("cohort_lag_imbalance", "gauge", "Heaviest member's assigned lag over the mean, at the "
                            "lag assignor's last evaluation of the group.")
        moves = _Family("cohort_lag_rebalances", "counter", "Lag-driven epoch bumps (the lag assignor moved "
                        "partitions) since the broker started.")
        for gid, state in sorted(coordinator.shard.lag_balance.items()):
            imbalance.lines.append(f'cohort_lag_imbalance{{group="{_escape(gid)}"}} {state.last_imbalance!r}\n')
            moves.lines.append(f'cohort_lag_rebalances_total{{group="{_escape(gid)}"}} {state.rebalances}\n')
        families += [count, members, epochs, lag, offset, max_lag, sum_lag, imbalance, moves]
        return "".join(f.text() for f in families)

    def _labels(self, cluster: str, g: Any) -> tuple:
        """(partitions, the label text of each, the group's members line, epoch line, group labels)."""
        gid = _escape(g.group_id)
        owners = g.owners() if g.committed else {}
        head = f'{{cluster_name="{cluster}",group="{gid}",topic="'
        nobody = '",member_host="",consumer_id="",client_id=""} '
        tails: dict = {}
        texts = []
        for topic, partition in g.committed:
            who = owners.get((topic, partition))
            if who is None:
                tail = nobody
            else:
                tail = tails.get(who)
                if tail is None:
                    tail = tails[who] = (f'",member_host="{_escape(who[0])}",consumer_id="{_escape(who[1])}",'
                                         f'client_id="{_escape(who[2])}"}} ')
            texts.append(f'{head}{self._topic(topic)}",partition="{partition}{tail}')
        return (tuple(g.committed), texts, f'cohort_group_members{{group="{gid}",type="{g.type}"}} {g.members}\n',
                f'cohort_group_epoch{{group="{gid}",type="{g.type}"}} {g.epoch}\n',
                f'{{cluster_name="{cluster}",group="{gid}"}} ')

    @staticmethod
    def _group_lines(g: Any, labels: tuple, ends: dict) -> tuple:
        """(members line, epoch line, lag lines, offset lines, max lag line, sum lag line) of one group."""
        _, texts, member_line, epoch_line, group_labels = labels
        if not g.committed:
            return member_line, epoch_line, "", "", "", ""
        lag_lines, offset_lines = [], []
        total = biggest = 0
        for (tp, value), text in zip(g.committed.items(), texts):
            at = value.offset
            end = ends.get(tp, at)
            behind = end - at if end > at else 0
            total += behind
            if behind > biggest:
                biggest = behind
            lag_lines.append(f"kafka_consumergroup_group_lag{text}{behind}\n")
            offset_lines.append(f"kafka_consumergroup_group_offset{text}{at}\n")
        return (member_line, epoch_line, "".join(lag_lines), "".join(offset_lines),
                f"kafka_consumergroup_group_max_lag{group_labels}{biggest}\n",
                f"kafka_consumergroup_group_sum_lag{group_labels}{total}\n")


async def render(server: Any, registry: CollectorRegistry, fleet: FleetRenderer) -> bytes:
    """The whole /metrics answer: the library's families, then the fleet's."""
    from prometheus_client import generate_latest

    return generate_latest(registry) + (await fleet.text(server)).encode("utf-8")
