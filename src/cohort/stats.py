"""Counters and latency histograms cheap enough for the request path.

The broker records into these plain objects (a bisect and two additions per observation, no lock:
everything that records runs on the event loop thread, except fsync timings, which are recorded
after the worker thread hands the result back). `cohort.tooling.metrics` turns them into
Prometheus families when `/metrics` is scraped, so nothing on the hot path knows about Prometheus.
"""

from __future__ import annotations

from bisect import bisect_left

# Upper bounds in seconds, Prometheus' convention (le); +Inf is implied.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                   5.0, 10.0, 30.0)


class Histogram:
    """Observations of one quantity: per-bucket counts (not cumulative), their count and sum."""

    __slots__ = ("buckets", "counts", "count", "sum")

    def __init__(self, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.buckets, value)] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs as Prometheus exposes them, ending with +Inf."""
        out, total = [], 0
        for bound, n in zip((*map(repr, self.buckets), "+Inf"), self.counts):
            total += n
            out.append((bound, total))
        return out


class RequestStats:
    """Per (API key, version): a latency histogram (frame read to response written) and bytes."""

    __slots__ = ("latency", "by_codec", "bytes_in", "bytes_out", "connections_opened", "connections_open")

    def __init__(self) -> None:
        self.latency: dict[tuple[int, int], Histogram] = {}
        self.by_codec: dict[int, Histogram] = {}  # id() of a version's codec (they live as long as the process)
        self.bytes_in: dict[str, int] = {}  # listener -> bytes read
        self.bytes_out: dict[str, int] = {}  # listener -> bytes written
        self.connections_opened: dict[str, int] = {}  # listener -> connections accepted
        self.connections_open: dict[str, int] = {}  # listener -> connections open now

    def histogram(self, api_key: int, version: int, codec: object = None) -> Histogram:
        """The latency histogram of one API version (found by its codec's id on the hot path)."""
        h = self.latency.get((api_key, version))
        if h is None:
            h = self.latency[(api_key, version)] = Histogram()
        if codec is not None:
            self.by_codec[id(codec)] = h
        return h
