"""The broker's Prometheus metrics, built when `/metrics` is scraped.

Nothing here runs on the request path: the server and the coordinator runtime record into plain
counters and histograms (`cohort.stats`), and `BrokerCollector.collect` reads them, with the
groups and logs, in one pass on the event loop when Prometheus asks. Lag series use the names
kafka-lag-exporter publishes (`kafka_consumergroup_group_lag` ... with `cluster_name`, `group`,
`topic`, `partition`, `member_host`, `consumer_id`, `client_id`), so its dashboards and alerts
work unchanged; everything else is `cohort_*`.
"""

from __future__ import annotations

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
        cluster = server.config["metrics.cluster.name"]
        yield from self._requests(server.stats)
        coordinator = getattr(server, "group_coordinator", None)
        yield from self._logs(server, cluster)
        if coordinator is not None:
            yield from self._coordinator(coordinator)
            if coordinator.loaded:
                yield from self._groups(coordinator, server, cluster)

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

    @staticmethod
    def _logs(server: Any, cluster: str):
        latest = GaugeMetricFamily("kafka_partition_latest_offset", "A partition's log end offset.",
                                   labels=["cluster_name", "topic", "partition"])
        earliest = GaugeMetricFamily("kafka_partition_earliest_offset", "A partition's log start offset.",
                                     labels=["cluster_name", "topic", "partition"])
        size = GaugeMetricFamily("cohort_log_size", "A partition's log size on disk.", labels=["topic", "partition"],
                                 unit="bytes")
        for p in server.partitions():
            part = str(p.partition)
            latest.add_metric([cluster, p.topic, part], p.end)
            earliest.add_metric([cluster, p.topic, part], p.start)
            size.add_metric([p.topic, part], p.size)
        yield from (latest, earliest, size)

    @staticmethod
    def _groups(coordinator: Any, server: Any, cluster: str):
        groups = coordinator.groups()
        ends = server.end_offsets()
        by_state = Counter((g.type, g.state) for g in groups)
        count = GaugeMetricFamily("cohort_groups", "Groups by type and state.", labels=["type", "state"])
        for (kind, state), n in sorted(by_state.items()):
            count.add_metric([kind, state], n)
        members = GaugeMetricFamily("cohort_group_members", "Members of each group.", labels=["group", "type"])
        epoch = GaugeMetricFamily("cohort_group_epoch", "Each group's epoch (a classic group's generation).",
                                  labels=["group", "type"])
        labels = ["cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id"]
        lag = GaugeMetricFamily("kafka_consumergroup_group_lag", "Log end offset minus the group's committed "
                                "offset, per partition with a commit.", labels=labels)
        offset = GaugeMetricFamily("kafka_consumergroup_group_offset", "The group's committed offset.", labels=labels)
        max_lag = GaugeMetricFamily("kafka_consumergroup_group_max_lag", "The largest partition lag of a group.",
                                    labels=["cluster_name", "group"])
        sum_lag = GaugeMetricFamily("kafka_consumergroup_group_sum_lag", "The sum of a group's partition lags.",
                                    labels=["cluster_name", "group"])
        for g in groups:
            members.add_metric([g.group_id, g.type], len(g.members))
            epoch.add_metric([g.group_id, g.type], g.epoch)
            if not g.committed:
                continue
            owner = {tp: m for m in g.members for tp in m.assigned}
            lags = g.lag(ends)
            for (topic, partition), value in sorted(lags.items()):
                m = owner.get((topic, partition))
                row = [cluster, g.group_id, topic, str(partition), "" if m is None else m.host,
                       "" if m is None else m.member_id, "" if m is None else m.client_id]
                lag.add_metric(row, value)
                offset.add_metric(row, g.committed[(topic, partition)])
            max_lag.add_metric([cluster, g.group_id], max(lags.values()))
            sum_lag.add_metric([cluster, g.group_id], sum(lags.values()))
        imbalance = GaugeMetricFamily("cohort_lag_imbalance", "Heaviest member's assigned lag over the mean, at "
                                      "the lag assignor's last evaluation of the group.", labels=["group"])
        lag_moves = CounterMetricFamily("cohort_lag_rebalances", "Lag-driven epoch bumps (the lag assignor moved "
                                        "partitions) since the broker started.", labels=["group"])
        for gid, state in sorted(coordinator.shard.lag_balance.items()):
            imbalance.add_metric([gid], state.last_imbalance)
            lag_moves.add_metric([gid], state.rebalances)
        yield from (count, members, epoch, lag, offset, max_lag, sum_lag, imbalance, lag_moves)


def registry_for(server: Any) -> CollectorRegistry:
    """A registry holding only the broker's collector (not the client library's process globals)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(server))
    return registry
