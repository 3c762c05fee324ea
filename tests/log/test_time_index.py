"""The per-segment time index: lookups by timestamp equal a scan of every record, across
segments, restarts (trusted index) and a deleted or damaged index (rebuilt)."""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.log import PartitionLog
from cohort.protocol.records import build_batch, check_produce_records


def put(log, times, codec=0):
    data = bytearray(build_batch([(None, b"x" * 40)] * len(times), timestamps=times, compression=codec))
    log.append(data, check_produce_records(data))


def brute_first(all_times, target):
    for offset, ts in enumerate(all_times):
        if ts >= target:
            return offset, ts
    return None


def brute_max(all_times):
    if not all_times:
        return None
    top = max(all_times)
    return all_times.index(top), top


batches = st.lists(st.tuples(st.lists(st.integers(0, 5000), min_size=1, max_size=6), st.sampled_from([0, 1, 3])),
                   min_size=0, max_size=30)


@settings(max_examples=50, deadline=None)
@given(batches, st.lists(st.integers(-1, 5100), min_size=1, max_size=8))
def test_lookups_equal_a_scan(tmp_path_factory, spec, targets):
    d = str(tmp_path_factory.mktemp("t"))
    log = PartitionLog(d, segment_bytes=600, index_interval=200)
    all_times = []
    for times, codec in spec:
        put(log, times, codec)
        all_times += times
    for reopen in range(3):
        for t in targets:
            if t >= 0:
                assert log.offset_for_timestamp(t) == brute_first(all_times, t)
        assert log.max_timestamp() == brute_max(all_times)
        if reopen == 0:
            log.close()
            log = PartitionLog(d, segment_bytes=600, index_interval=200)  # sealed segments trust their .timeindex
        elif reopen == 1:
            log.close()
            for name in os.listdir(d):
                if name.endswith(".timeindex"):
                    with open(os.path.join(d, name), "r+b") as f:
                        f.truncate(max(os.path.getsize(os.path.join(d, name)) - 5, 0))
            log = PartitionLog(d, segment_bytes=600, index_interval=200)  # damaged: rebuilt
    log.close()


def test_sealed_segment_keeps_its_largest_timestamp_in_the_index(tmp_path):
    d = str(tmp_path / "p")
    log = PartitionLog(d, segment_bytes=300)
    put(log, [100, 900, 200])
    put(log, [300])
    put(log, [400])
    assert len(log.segments) >= 2
    log.close()
    log = PartitionLog(d, segment_bytes=300)
    first = log.segments[0]
    assert first.max_timestamp == 900  # read from the .timeindex, no scan
    assert log.offset_for_timestamp(500) == (1, 900)
    log.close()
