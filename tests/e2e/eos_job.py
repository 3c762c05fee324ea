"""An exactly-once consume-transform-produce job (confluent-kafka), run as a child process by
test_exactly_once.py: it reads `eos-in` read_committed in a consumer group, writes `out-<value>`
to the same partition of `eos-out` and commits the input offsets in the same transaction. On any
error it exits (status 3); whoever restarts it resumes from the group's committed offsets, and
its init_transactions() fences and aborts whatever the previous run left open.

Usage: python eos_job.py BOOTSTRAP GROUP_PROTOCOL [MAX_RECORDS_PER_S]

MAX_RECORDS_PER_S paces the job so that a test's faults land while input remains: unpaced, it can
copy the whole input between two of the test's samples.
"""

from __future__ import annotations

import os
import sys
import time

import confluent_kafka as ck

IN, OUT, GROUP, TXN_ID = "eos-in", "eos-out", "eos-group", "eos-job"


def say(what: str) -> None:
    """A timestamped line in the job's log: where a run spent its time when a test reads it."""
    print(f"{time.strftime('%H:%M:%S')} pid {os.getpid()}: {what}", file=sys.stderr, flush=True)


def main() -> int:
    bootstrap, protocol = sys.argv[1], sys.argv[2]
    max_rate = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    classic = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500} if protocol == "classic" else {}
    debug = {"debug": os.environ["EOS_DEBUG"]} if os.environ.get("EOS_DEBUG") else {}  # e.g. EOS_DEBUG=eos,cgrp
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "group.protocol": protocol,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed", **classic, **debug})
    producer = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID,
                            "transaction.timeout.ms": 10_000, "linger.ms": 5, **debug})
    try:
        say("starts")
        producer.init_transactions(60)
        say("transactions initialised")
        consumer.subscribe([IN])
        started, copied = time.monotonic(), 0
        while True:
            msgs = [m for m in consumer.consume(1000, 0.5) if not m.error()]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(OUT, value=b"out-" + m.value(), partition=m.partition())
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
            if not copied:
                say(f"first commit, partitions {sorted(tp.partition for tp in positions)}")
            copied += len(msgs)
            if max_rate:
                time.sleep(max(0.0, started + copied / max_rate - time.monotonic()))
    except ck.KafkaException as exc:
        say(f"stops: {exc}")
        return 3
    finally:
        consumer.close()


if __name__ == "__main__":
    sys.exit(main())
