"""The broker's data plane: topics, their partition logs, and the coordinator's log.

Synchronous and single-threaded (called from the event loop); the I/O that leaves the loop
thread is the coordinator log's fsync and the build phase of compaction. Errors are Kafka error
codes so handlers can put them on the wire unchanged. Log housekeeping (time-based rolls and
flushes, retention, compaction) runs in :meth:`Broker.maintenance_loop`, a background task the
server starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import fcntl
import logging
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from typing import Callable, Mapping

from cohort.broker.coordinator_log import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC, CoordinatorLog
from cohort.broker.topics import (
    TOPIC_CONFIG_BROKER_DEFAULTS,
    BrokerState,
    MetadataStore,
    Topic,
    new_topic_id,
    topic_config_error,
    topic_name_error,
)
from cohort.broker.validation import RecordValidationError, TopicPolicy, validate
from cohort.config import DYNAMIC_BROKER, DYNAMIC_DEFAULT, Config, ConfigError
from cohort.log import OffsetOutOfRange, PartitionLog, compaction, fileio
from cohort.log.producer_state import AbortedTxn, ProducerStateError
from cohort.log.segment import now_ms
from cohort.security import files
from cohort.protocol.records import CONTROL_FLAG, TRANSACTIONAL_FLAG, iter_batches
from cohort.stats import Histogram

# Kafka error codes used by the data plane.
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
TOPIC_ALREADY_EXISTS = 36
KAFKA_STORAGE_ERROR = 56
INVALID_RECORD = 87
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
NOT_ENOUGH_REPLICAS = 19
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
POLICY_VIOLATION = 44
UNKNOWN_TOPIC_ID = 100

_log = logging.getLogger("cohort.broker")
_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<partition>\d+)$")
PRODUCER_ID_BLOCK = 1000
_NEVER = 2**62



class BrokerError(Exception):
    """A request-level failure with its Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class TopicSnapshot:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    start_offsets: tuple[int, ...]
    end_offsets: tuple[int, ...]
    internal: bool


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """What the coordinator needs to know about topics (field names match
    ``cohort.coordinator.metadata.TopicImage``). ``version`` increases whenever a topic is
    created or deleted; offsets change without bumping it. ``end_offsets`` are high watermarks."""

    version: int
    topics: Mapping[str, TopicSnapshot]
    topic_ids: Mapping[uuid.UUID, str]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error: int
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    log_append_time: int = -1
    record_errors: tuple[tuple[int, str], ...] = ()


class Broker:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.node_id: int = config["node.id"]
        self.data_dir = os.path.abspath(config["log.dir"])
        files.restrict_new_files()  # owner-only from here on: the data holds every group's offsets and credentials
        os.makedirs(self.data_dir, exist_ok=True)
        files.tighten(self.data_dir)
        self._lock_fd = os.open(os.path.join(self.data_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise OSError(f"data directory {self.data_dir} is in use by another cohort process") from None
        fileio.FILES.limit = config["log.open.files.max"] or fileio.default_open_files_limit()
        self.store = MetadataStore(self.data_dir)
        self.state: BrokerState = self.store.load()
        self.config_listeners: list[Callable[[], None]] = []
        self._load_dynamic_configs()
        self._next_producer_id = self.state.producer_id_block_end
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self.topic_version = 0
        self.append_listeners: list[Callable[[str, int], None]] = []
        self.topic_listeners: list[Callable[[], None]] = []
        self._ids = {t.id: t.name for t in self.state.topics.values()}
        self._policies: dict[str, TopicPolicy] = {}
        # Topics being created: their names are taken and their partitions count against
        # max.broker.partitions, but they are not served until their logs exist durably.
        self._creating: dict[str, int] = {}
        self._recording: dict[str, Topic] = {}  # created, their metadata being written
        self._storage = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="cohort-storage")
        self._growing = asyncio.Lock()  # one CreatePartitions at a time
        self._remove_orphans()
        for topic in self.state.topics.values():
            for p in range(topic.partitions):
                if not os.path.isdir(self._partition_dir(topic.name, p)):
                    _log.warning("topic %s: partition %d had no directory (a create cut short); created it empty",
                                 topic.name, p)
            self._open_partitions(topic)
        wanted = config["offsets.topic.num.partitions"]
        if OFFSETS_TOPIC not in self.state.topics:
            self.create_topic(OFFSETS_TOPIC, wanted, {"cleanup.policy": "compact"}, internal=True)
        shards = self.state.topics[OFFSETS_TOPIC].partitions
        if shards != wanted:  # Kafka too reads the setting only when it creates the topic
            _log.warning("offsets.topic.num.partitions is %d, but %s was created with %d partitions: the group "
                         "coordinator keeps %d shards (groups are placed by partition count)", wanted, OFFSETS_TOPIC,
                         shards, shards)
        append_seconds, fsync_seconds = Histogram(), Histogram()  # one pair over every shard's log
        self.coordinator_logs: list[CoordinatorLog] = []
        for p in range(shards):
            clog = CoordinatorLog(self.logs[(OFFSETS_TOPIC, p)], linger_ms=config["group.coordinator.append.linger.ms"],
                                  append_seconds=append_seconds, fsync_seconds=fsync_seconds)
            clog.add_listener(lambda p=p: self._notify_append(OFFSETS_TOPIC, p))
            self.coordinator_logs.append(clog)
        self.coordinator_log = self.coordinator_logs[0]  # the only one unless offsets.topic.num.partitions > 1
        wanted = config["transaction.state.log.num.partitions"]
        if TRANSACTION_STATE_TOPIC not in self.state.topics:
            self.create_topic(TRANSACTION_STATE_TOPIC, wanted, {"cleanup.policy": "compact"}, internal=True)
        self.transaction_logs: list[CoordinatorLog] = []
        for p in range(self.state.topics[TRANSACTION_STATE_TOPIC].partitions):
            tlog = CoordinatorLog(self.logs[(TRANSACTION_STATE_TOPIC, p)], append_seconds=append_seconds,
                                  fsync_seconds=fsync_seconds)
            tlog.add_listener(lambda p=p: self._notify_append(TRANSACTION_STATE_TOPIC, p))
            self.transaction_logs.append(tlog)
        wanted = config["share.coordinator.state.topic.num.partitions"]
        if SHARE_STATE_TOPIC not in self.state.topics:  # compacted: cohort writes whole snapshots (cohort.share.state)
            self.create_topic(SHARE_STATE_TOPIC, wanted, {"cleanup.policy": "compact"}, internal=True)
        self.share_state_logs: list[CoordinatorLog] = []
        for p in range(self.state.topics[SHARE_STATE_TOPIC].partitions):
            slog = CoordinatorLog(self.logs[(SHARE_STATE_TOPIC, p)], append_seconds=append_seconds,
                                  fsync_seconds=fsync_seconds)
            slog.add_listener(lambda p=p: self._notify_append(SHARE_STATE_TOPIC, p))
            self.share_state_logs.append(slog)
        self._coordinator_logs = {OFFSETS_TOPIC: self.coordinator_logs, TRANSACTION_STATE_TOPIC: self.transaction_logs,
                                  SHARE_STATE_TOPIC: self.share_state_logs}
        # KIP-890 verification of a producer's first transactional batch on a partition:
        # (transactional id, producer id, epoch, (topic, partition)) -> error code; set by the
        # transaction coordinator's host (none: transactional batches are refused).
        self.transaction_verifier: Callable[[str, int, int, tuple[str, int]], int] | None = None
        self.store.save(self.state)

    @property
    def cluster_id(self) -> str:
        return self.state.cluster_id

    # --- dynamic broker configs --------------------------------------------------------------

    def _dynamic_level(self, resource: str) -> str:
        return DYNAMIC_DEFAULT if resource == "" else DYNAMIC_BROKER

    def _load_dynamic_configs(self) -> None:
        """Apply the persisted dynamic configs; one that no longer parses is dropped with a
        WARNING rather than refusing to start."""
        for resource in ("", str(self.node_id)):
            values = dict(self.state.broker_configs.get(resource, {}))
            for name, text in list(values.items()):
                try:
                    self.config.set_dynamic(self._dynamic_level(resource), {name: text})
                except ConfigError as exc:
                    _log.warning("dynamic broker config %s=%r ignored: %s", name, text, exc)
                    del values[name]
            self.config.set_dynamic(self._dynamic_level(resource), values)

    async def set_dynamic_configs(self, resource: str, values: Mapping[str, str]) -> None:
        """Replace the dynamic configs of ``resource`` ("" = cluster default, or this node's
        id): validated, persisted, then applied to every log and announced to
        ``config_listeners`` (connection limits). Raises BrokerError."""
        level = self._dynamic_level(resource)
        before = self.config.dynamic(level)
        try:
            self.config.set_dynamic(level, values)
        except ConfigError as exc:
            raise BrokerError(INVALID_CONFIG, str(exc)) from None
        previous = self.state.broker_configs.get(resource)
        if values:
            self.state.broker_configs[resource] = dict(values)
        else:
            self.state.broker_configs.pop(resource, None)
        try:
            await asyncio.wrap_future(self._save())
        except OSError as exc:
            if previous is None:
                self.state.broker_configs.pop(resource, None)
            else:
                self.state.broker_configs[resource] = previous
            self.config.set_dynamic(level, before)
            raise BrokerError(KAFKA_STORAGE_ERROR, f"cannot persist broker configs: {exc}") from None
        self.reconfigure()

    def reconfigure(self) -> None:
        """Apply the current settings to every log and tell the listeners (after a change)."""
        self._policies.clear()
        for (name, _), log in self.logs.items():
            topic = self.state.topics.get(name)
            if topic is not None:
                self._apply_policy(topic, log)
                log.index_interval = int(self.topic_setting(topic, "index.interval.bytes"))
        for cb in self.config_listeners:
            cb()

    # --- lifecycle ---------------------------------------------------------------------------

    def _partition_dir(self, name: str, partition: int) -> str:
        return os.path.join(self.data_dir, f"{name}-{partition}")

    def topic_setting(self, topic: Topic, key: str) -> str:
        """A topic config's effective value: the topic's own, else the broker setting behind it."""
        if topic.internal and key == "cleanup.policy":
            return "compact"  # the coordinator's log is never deleted by retention
        if key in topic.configs:
            return topic.configs[key]
        if key == "segment.bytes":
            return str(self.config["offsets.topic.segment.bytes" if topic.internal else "log.segment.bytes"])
        if topic.internal and key == "segment.ms":
            return str(self.config["offsets.topic.roll.ms"])
        return str(self.config[TOPIC_CONFIG_BROKER_DEFAULTS[key]])

    def _apply_policy(self, topic: Topic, log: PartitionLog) -> None:
        """Set a log's roll / flush / retention knobs from the topic's configs (None = off)."""
        def limit(key: str) -> int | None:
            value = int(self.topic_setting(topic, key))
            return None if value < 0 or value >= _NEVER else value

        policy = set(self.topic_setting(topic, "cleanup.policy").split(","))
        log.segment_bytes = int(self.topic_setting(topic, "segment.bytes"))
        log.roll_ms = limit("segment.ms")
        log.flush_messages = None if topic.internal else limit("flush.messages")
        log.flush_ms = None if topic.internal else limit("flush.ms")
        deleting = "delete" in policy and not topic.internal
        log.retention_ms = limit("retention.ms") if deleting else None
        log.retention_bytes = limit("retention.bytes") if deleting else None

    def _open_partitions(self, topic: Topic) -> None:
        for p, log in enumerate(self._new_logs(topic)):
            self.logs[(topic.name, p)] = log

    def _new_logs(self, topic: Topic, first: int = 0) -> list[PartitionLog]:
        """Open (creating where missing) the partition logs of ``topic`` from partition
        ``first`` on. Touches no broker state, so it may run in the storage thread; a new log
        holds no file descriptor."""
        logs = []
        for p in range(first, topic.partitions):
            log = PartitionLog(self._partition_dir(topic.name, p), index_interval=int(self.topic_setting(topic, "index.interval.bytes")))
            self._apply_policy(topic, log)
            logs.append(log)
        return logs

    def _discard_logs(self, topic: Topic, logs: list[PartitionLog], first: int = 0) -> None:
        """Close and remove the directories of a create that did not complete."""
        for log in logs:
            log.close()
        for p in range(first, topic.partitions):
            shutil.rmtree(self._partition_dir(topic.name, p), ignore_errors=True)

    def _remove_orphans(self) -> None:
        """Delete partition directories of deleted topics (a crash after the metadata write of a
        DeleteTopics leaves them behind) and half-deleted ``*.deleted`` directories."""
        for entry in os.listdir(self.data_dir):
            path = os.path.join(self.data_dir, entry)
            if not os.path.isdir(path):
                continue
            if entry.endswith(".deleted"):
                shutil.rmtree(path, ignore_errors=True)
                continue
            m = _PARTITION_DIR.match(entry)
            if m is None:
                continue
            topic = self.state.topics.get(m["topic"])
            if topic is None or int(m["partition"]) >= topic.partitions:
                _log.warning("removing %s: its topic is not in the metadata (a create or delete cut short)", entry)
                shutil.rmtree(path, ignore_errors=True)

    async def drain_coordinator_logs(self) -> None:
        """Wait for every coordinator log's writes in flight (see ``CoordinatorLog.drain``)."""
        for logs in self._coordinator_logs.values():
            for clog in logs:
                await clog.drain()

    def close(self) -> None:
        """Flush and close every log; a failing fsync is logged (by the log) and the rest still
        close."""
        for log in self.logs.values():
            log.close()
        self.logs.clear()
        self._storage.shutdown(wait=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # --- topics ------------------------------------------------------------------------------

    @property
    def topics(self) -> dict[str, Topic]:
        return self.state.topics

    def topic_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        name = self._ids.get(topic_id)
        return None if name is None else self.state.topics[name]

    def validate_new_topic(self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str | None]) -> tuple[int, dict[str, str]]:
        """Resolve defaults and check a CreateTopics entry; raises BrokerError."""
        why = topic_name_error(name)
        if why:
            raise BrokerError(INVALID_TOPIC_EXCEPTION, why)
        if name in self.state.topics or name in self._creating:
            raise BrokerError(TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        if partitions == -1:
            partitions = self.config["num.partitions"]
        if partitions < 1:
            raise BrokerError(INVALID_PARTITIONS, f"number of partitions must be at least 1, got {partitions}")
        per_topic = self.config["max.partitions.per.topic"]
        if partitions > per_topic:
            raise BrokerError(INVALID_PARTITIONS, f"number of partitions {partitions} is larger than "
                                                  f"max.partitions.per.topic ({per_topic})")
        limit = self.config["max.broker.partitions"]
        held = len(self.logs) + sum(self._creating.values())
        if held + partitions > limit:
            raise BrokerError(POLICY_VIOLATION, f"{partitions} more partitions would make {held + partitions}, over "
                                                f"max.broker.partitions ({limit})")
        if replication_factor not in (-1, 1):
            raise BrokerError(INVALID_REPLICATION_FACTOR, f"replication factor {replication_factor} is larger than the 1 available broker")
        resolved = {}
        for key, value in configs.items():
            why = topic_config_error(key, value)
            if why:
                raise BrokerError(INVALID_CONFIG, why)
            if value is not None:
                resolved[key] = value
        return partitions, resolved

    def _snapshot(self) -> BrokerState:
        """What the metadata file should hold now: the served topics and those being recorded."""
        topics = dict(self.state.topics)
        topics.update(self._recording)
        return BrokerState(self.state.cluster_id, topics, self.state.producer_id_block_end,
                           {k: dict(v) for k, v in self.state.broker_configs.items()})

    def _save(self) -> concurrent.futures.Future:
        """Write the metadata file in the storage thread. Every write goes through that one
        thread in the order asked, each a whole snapshot, so the file never goes back in time."""
        return self._storage.submit(self.store.save, self._snapshot())

    def _persist_topic(self, name: str, topic: Topic | None) -> None:
        """Store `topic` under `name` (None removes it) and persist the metadata; if that
        fails, the previous entry is put back and the caller gets KAFKA_STORAGE_ERROR."""
        previous = self.state.topics.get(name)
        if topic is None:
            del self.state.topics[name]
        else:
            self.state.topics[name] = topic
        try:
            self._save().result()
        except OSError as exc:
            if previous is None:
                self.state.topics.pop(name, None)
            else:
                self.state.topics[name] = previous
            raise BrokerError(KAFKA_STORAGE_ERROR, f"cannot persist topic metadata: {exc}") from None

    def _new_topic(self, name: str, partitions: int, configs: Mapping[str, str | None] | None,
                   replication_factor: int, internal: bool) -> Topic:
        """A validated topic, not yet created (raises BrokerError)."""
        partitions, resolved = self.validate_new_topic(name, partitions, replication_factor, configs or {})
        return Topic(name, new_topic_id(), partitions, resolved, internal)

    def _make_logs(self, topic: Topic, first: int = 0) -> list[PartitionLog]:
        """:meth:`_new_logs`, or KAFKA_STORAGE_ERROR with whatever was made removed."""
        try:
            return self._new_logs(topic, first)
        except OSError as exc:
            self._discard_logs(topic, [], first)
            raise BrokerError(KAFKA_STORAGE_ERROR, f"cannot create the partitions of {topic.name!r}: {exc}") from None

    def _serve(self, topic: Topic, logs: list[PartitionLog]) -> Topic:
        self.state.topics[topic.name] = topic
        for p, log in enumerate(logs):
            self.logs[(topic.name, p)] = log
        self._topics_changed()
        return topic

    def create_topic(self, name: str, partitions: int = -1, configs: Mapping[str, str | None] | None = None, *, replication_factor: int = -1, internal: bool = False) -> Topic:
        """Create a topic synchronously (auto-creation, the internal topic, tools): its
        partitions first, then the metadata that records it."""
        topic = self._new_topic(name, partitions, configs, replication_factor, internal)
        logs = self._make_logs(topic)
        try:
            self._persist_topic(name, topic)
        except BrokerError:
            self._discard_logs(topic, logs)
            raise
        return self._serve(topic, logs)

    async def create_topic_async(self, name: str, partitions: int = -1, configs: Mapping[str, str | None] | None = None,
                                 *, replication_factor: int = -1) -> Topic:
        """:meth:`create_topic` for requests: the partition directories are made (and fsynced)
        in the storage thread while the event loop serves others; the metadata file records the
        topic only once they exist, and only then is it served. A crash in between leaves
        directories that the next start removes."""
        topic = self._new_topic(name, partitions, configs, replication_factor, False)
        loop = asyncio.get_running_loop()
        self._creating[name] = topic.partitions
        try:
            logs = await loop.run_in_executor(self._storage, self._make_logs, topic)
            self._recording[name] = topic
            try:
                await asyncio.wrap_future(self._save())
            except OSError as exc:
                await loop.run_in_executor(self._storage, self._discard_logs, topic, logs)
                raise BrokerError(KAFKA_STORAGE_ERROR, f"cannot persist topic metadata: {exc}") from None
            finally:
                del self._recording[name]
        finally:
            del self._creating[name]
        return self._serve(topic, logs)

    def validate_new_partitions(self, name: str, count: int, assignments: list[list[int]] | None) -> Topic:
        """Check a CreatePartitions entry (Kafka's rules and messages); returns the topic as it
        would be, or raises BrokerError."""
        topic = self.state.topics.get(name)
        if topic is None:
            raise BrokerError(UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if topic.internal:
            raise BrokerError(INVALID_PARTITIONS, f"partitions cannot be added to the internal topic {name!r}")
        if count == topic.partitions:
            raise BrokerError(INVALID_PARTITIONS, f"Topic already has {topic.partitions} partition(s).")
        if count < topic.partitions:
            raise BrokerError(INVALID_PARTITIONS, f"The topic {name} currently has {topic.partitions} partition(s); "
                                                  f"{count} would not be an increase.")
        additional = count - topic.partitions
        if assignments is not None:
            if len(assignments) != additional:
                raise BrokerError(INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {additional} additional partition(s), "
                                                              f"but only {len(assignments)} assignment(s) were specified.")
            if any(list(a) != [self.node_id] for a in assignments):
                raise BrokerError(INVALID_REPLICA_ASSIGNMENT, f"assignments must place each partition on broker {self.node_id} only")
        per_topic = self.config["max.partitions.per.topic"]
        if count > per_topic:
            raise BrokerError(INVALID_PARTITIONS, f"number of partitions {count} is larger than max.partitions.per.topic ({per_topic})")
        limit = self.config["max.broker.partitions"]
        held = len(self.logs) + sum(self._creating.values())
        if held + additional > limit:
            raise BrokerError(POLICY_VIOLATION, f"{additional} more partitions would make {held + additional}, over "
                                                f"max.broker.partitions ({limit})")
        return dataclasses.replace(topic, partitions=count)

    async def create_partitions_async(self, name: str, count: int, assignments: list[list[int]] | None = None) -> Topic:
        """Grow a topic to ``count`` partitions: the new directories first (storage thread),
        then the metadata, then they are served and topic listeners (the group coordinator)
        told. A crash in between leaves directories the next start removes."""
        async with self._growing:
            grown = self.validate_new_partitions(name, count, assignments)
            before = self.state.topics[name]
            loop = asyncio.get_running_loop()
            self._creating[name] = count - before.partitions
            try:
                logs = await loop.run_in_executor(self._storage, self._make_logs, grown, before.partitions)
                if self.state.topics.get(name) is not before:  # deleted or changed meanwhile
                    await loop.run_in_executor(self._storage, self._discard_logs, grown, logs, before.partitions)
                    raise BrokerError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} changed while partitions were added")
                self._recording[name] = grown
                try:
                    await asyncio.wrap_future(self._save())
                except OSError as exc:
                    await loop.run_in_executor(self._storage, self._discard_logs, grown, logs, before.partitions)
                    raise BrokerError(KAFKA_STORAGE_ERROR, f"cannot persist topic metadata: {exc}") from None
                finally:
                    del self._recording[name]
            finally:
                del self._creating[name]
            self.state.topics[name] = grown
            for p, log in enumerate(logs, start=before.partitions):
                self.logs[(name, p)] = log
            self._topics_changed()
            return grown

    def settle(self) -> None:
        """Wait for the storage thread's queued work (removal of deleted topics' files)."""
        self._storage.submit(lambda: None).result()

    def delete_topic(self, name: str) -> Topic:
        topic = self.state.topics.get(name)
        if topic is None:
            raise BrokerError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if topic.internal:
            raise BrokerError(INVALID_TOPIC_EXCEPTION, f"internal topic {name!r} cannot be deleted")
        self._persist_topic(name, None)
        for p in range(topic.partitions):
            log = self.logs.pop((name, p))
            log.close()
            path = self._partition_dir(name, p)
            doomed = f"{path}.{topic.id.hex}.deleted"
            os.rename(path, doomed)
            # Removing the files can take long; a crash before it ends leaves a *.deleted
            # directory that the next start removes.
            self._storage.submit(shutil.rmtree, doomed, ignore_errors=True)
        self._topics_changed()
        return topic

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> Topic:
        """Replace a topic's explicit configs (validated) and persist them."""
        topic = self.state.topics.get(name)
        if topic is None:
            raise BrokerError(UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        for key, value in configs.items():
            why = topic_config_error(key, value)
            if why:
                raise BrokerError(INVALID_CONFIG, why)
        updated = dataclasses.replace(topic, configs=dict(configs))
        self._persist_topic(name, updated)
        for p in range(topic.partitions):
            self._apply_policy(updated, self.logs[(name, p)])
        self._policies.pop(name, None)
        return updated

    def auto_create(self, name: str) -> Topic | None:
        """Create ``name`` with defaults if auto-creation is on and the name is legal."""
        if not self.may_auto_create(name):
            return None
        return self.create_topic(name)

    def may_auto_create(self, name: str) -> bool:
        """Whether a Metadata request may create ``name``: auto-creation on, a legal name."""
        return bool(self.config["auto.create.topics.enable"]) and not topic_name_error(name) and not name.startswith("__")

    async def auto_create_async(self, name: str) -> Topic | None:
        """:meth:`auto_create` off the event loop (:meth:`create_topic_async`); None if it may
        not be created or another request created it first."""
        if not self.may_auto_create(name):
            return None
        try:
            return await self.create_topic_async(name)
        except BrokerError as exc:
            if exc.code == TOPIC_ALREADY_EXISTS:
                return self.state.topics.get(name)
            raise

    def _topics_changed(self) -> None:
        self._policies.clear()
        self._ids = {t.id: t.name for t in self.state.topics.values()}
        self.topic_version += 1
        for cb in self.topic_listeners:
            cb()

    # --- data --------------------------------------------------------------------------------

    def log(self, name: str, partition: int) -> PartitionLog | None:
        return self.logs.get((name, partition))

    def high_watermark(self, name: str, partition: int) -> int:
        clogs = self._coordinator_logs.get(name)
        if clogs is not None:
            return clogs[partition].high_watermark
        return self.logs[(name, partition)].end_offset

    def last_stable_offset(self, name: str, partition: int) -> int:
        """The LSO: what read_committed consumers may read up to."""
        return self.logs[(name, partition)].last_stable_offset(self.high_watermark(name, partition))

    def produce(self, name: str, partition: int, records: bytes | None, *, version: int = 9, now: int | None = None,
                transactional_id: str | None = None) -> ProduceResult:
        """Validate and append a client's batch (Produce ``version``). An idempotent
        producer's retry of one of its last five batches is answered with the original offsets
        and not appended again. A producer's first transactional batch on the partition must be
        in its ongoing transaction (KIP-890 verification)."""
        topic = self.state.topics.get(name)
        log = self.logs.get((name, partition))
        if topic is None or log is None:
            return ProduceResult(UNKNOWN_TOPIC_OR_PARTITION, message=f"unknown topic-partition {name}-{partition}")
        if topic.internal:
            return ProduceResult(INVALID_TOPIC_EXCEPTION, message=f"cannot produce to internal topic {name!r}")
        now = now_ms() if now is None else now
        data = bytearray(records or b"")
        try:
            h, append_time = validate(data, version, self.topic_policy(topic), now, f"{name}-{partition}")
        except RecordValidationError as exc:
            return ProduceResult(exc.code, message=exc.message, record_errors=tuple(exc.record_errors))
        if h.attributes & TRANSACTIONAL_FLAG:
            refused = self._verify_transactional(log, h, transactional_id, name, partition)
            if refused is not None:
                return refused
        if h.producer_id >= 0:
            try:
                dup = log.producers.check(h)
            except ProducerStateError as exc:
                return ProduceResult(exc.code, message=exc.message)
            if dup is not None:
                return ProduceResult(NONE, dup.first_offset, log.start_offset, log_append_time=dup.timestamp)
        try:
            result = log.append(data, (h,))
        except OSError as exc:
            return ProduceResult(KAFKA_STORAGE_ERROR, message=f"append failed: {exc}")
        self._notify_append(name, partition)
        return ProduceResult(NONE, result.base_offset, log.start_offset, log_append_time=append_time)

    def _verify_transactional(self, log: PartitionLog, h, transactional_id: str | None, name: str,
                              partition: int) -> ProduceResult | None:
        """A transactional batch is appended only inside its producer's ongoing transaction, as
        the coordinator knows it: the first batch of a transaction on this partition asks the
        coordinator (Kafka's verification, mapped as for Produce v10 and below)."""
        if transactional_id is None:
            return ProduceResult(TRANSACTIONAL_ID_AUTHORIZATION_FAILED, message="transactional records need a transactional id")
        if h.attributes & CONTROL_FLAG or h.producer_id < 0:
            return ProduceResult(INVALID_REQUEST, message="a transactional batch needs a producer id and no control flag")
        entry = log.producers.producers.get(h.producer_id)
        if entry is not None and entry.epoch == h.producer_epoch and entry.current_txn_first_offset >= 0:
            return None  # verified when this transaction's first batch came
        code = INVALID_TXN_STATE if self.transaction_verifier is None else self.transaction_verifier(
            transactional_id, h.producer_id, h.producer_epoch, (name, partition))
        if code == NONE:
            return None
        if code == PRODUCER_FENCED:
            return ProduceResult(INVALID_PRODUCER_EPOCH, message=f"producer epoch {h.producer_epoch} is fenced")
        if code == CONCURRENT_TRANSACTIONS:  # retriable: the previous transaction is completing
            return ProduceResult(NOT_ENOUGH_REPLICAS, message="the producer's previous transaction is still completing")
        return ProduceResult(INVALID_TXN_STATE, message=f"partition {name}-{partition} is not in the ongoing "
                                                        f"transaction of {transactional_id!r}")

    def write_marker(self, name: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                     coordinator_epoch: int = 0) -> int:
        """Append a transaction's COMMIT / ABORT marker to a data partition (WriteTxnMarkers);
        returns an error code."""
        log = self.logs.get((name, partition))
        if log is None or name in self._coordinator_logs:
            return UNKNOWN_TOPIC_OR_PARTITION
        try:
            log.append_marker(producer_id, producer_epoch, commit, coordinator_epoch)
        except ProducerStateError as exc:
            return exc.code
        except OSError as exc:
            _log.error("%s-%d: cannot append a transaction marker: %s", name, partition, exc)
            return KAFKA_STORAGE_ERROR
        self._notify_append(name, partition)
        return NONE

    def read_committed(self, name: str, partition: int, offset: int, max_bytes: int,
                       allow_oversize: bool = True) -> tuple[int, bytes, list[AbortedTxn]]:
        """(error, whole batches, aborted transactions among them) from ``offset`` up to the LSO:
        what a read_committed consumer may see. It drops the records of the aborted transactions
        listed, and skips markers."""
        log = self.logs.get((name, partition))
        if log is None:
            return UNKNOWN_TOPIC_OR_PARTITION, b"", []
        hw = self.high_watermark(name, partition)
        if offset < log.start_offset or offset > hw:
            return OFFSET_OUT_OF_RANGE, b"", []
        lso = log.last_stable_offset(hw)
        if offset >= lso:
            return NONE, b"", []
        try:
            data = _clip(log.read(offset, max_bytes, allow_oversize), lso)
        except OffsetOutOfRange:
            return OFFSET_OUT_OF_RANGE, b"", []
        if not data:
            return NONE, b"", []
        end = offset
        for _, h in iter_batches(data):
            end = h.last_offset + 1
        return NONE, data, log.aborted_transactions(offset, end)

    def topic_policy(self, topic: Topic) -> TopicPolicy:
        """What record validation needs of a topic's configs (cached until they change)."""
        policy = self._policies.get(topic.name)
        if policy is None:
            policy = self._policies[topic.name] = TopicPolicy(
                compacted="compact" in self.topic_setting(topic, "cleanup.policy").split(","),
                log_append_time=self.topic_setting(topic, "message.timestamp.type") == "LogAppendTime",
                before_max_ms=int(self.topic_setting(topic, "message.timestamp.before.max.ms")),
                after_max_ms=int(self.topic_setting(topic, "message.timestamp.after.max.ms")),
                max_message_bytes=int(self.topic_setting(topic, "max.message.bytes")),
            )
        return policy

    def _notify_append(self, name: str, partition: int) -> None:
        for cb in self.append_listeners:
            cb(name, partition)

    def read(self, name: str, partition: int, offset: int, max_bytes: int, allow_oversize: bool = True) -> tuple[int, bytes]:
        """(error, whole batches) from ``offset``, never beyond the high watermark."""
        log = self.logs.get((name, partition))
        if log is None:
            return UNKNOWN_TOPIC_OR_PARTITION, b""
        hw = self.high_watermark(name, partition)
        if offset < log.start_offset or offset > hw:
            return OFFSET_OUT_OF_RANGE, b""
        if offset == hw:
            return NONE, b""
        try:
            data = log.read(offset, max_bytes, allow_oversize)
        except OffsetOutOfRange:
            return OFFSET_OUT_OF_RANGE, b""
        if name in self._coordinator_logs:
            data = _clip(data, hw)
        return NONE, data

    def delete_records(self, name: str, partition: int, offset: int) -> int:
        """DeleteRecords for one partition (Kafka's rules): -1 means the high watermark; returns
        the new low watermark or raises BrokerError."""
        topic = self.state.topics.get(name)
        log = self.logs.get((name, partition))
        if topic is None or log is None:
            raise BrokerError(UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")
        if topic.internal:
            raise BrokerError(INVALID_TOPIC_EXCEPTION, f"Cannot delete records of internal topic {name}")
        if "delete" not in self.topic_setting(topic, "cleanup.policy").split(","):
            raise BrokerError(POLICY_VIOLATION, f"Records of partition {name}-{partition} can not be deleted due to the configured policy")
        hw = self.high_watermark(name, partition)
        if offset == -1:
            offset = hw
        if offset < 0 or offset > hw:
            raise BrokerError(OFFSET_OUT_OF_RANGE, f"Cannot increment the log start offset to {offset} of partition "
                                                   f"{name}-{partition} since it is larger than the high watermark {hw}")
        try:
            low = log.delete_records(offset)
        except OSError as exc:
            raise BrokerError(KAFKA_STORAGE_ERROR, f"cannot record the new log start offset: {exc}") from None
        self._notify_append(name, partition)
        return low

    def next_producer_id(self) -> int:
        """A producer id unique across restarts (ids are reserved in persisted blocks)."""
        if self._next_producer_id >= self.state.producer_id_block_end:
            self.state.producer_id_block_end = self._next_producer_id + PRODUCER_ID_BLOCK
            self._save().result()
        pid = self._next_producer_id
        self._next_producer_id += 1
        return pid

    # --- housekeeping ------------------------------------------------------------------------

    def maintenance(self, now: int | None = None) -> dict[str, int]:
        """Time-based rolls and flushes, then retention, for every partition log. A failing
        disk is logged and skipped (the partition keeps serving reads)."""
        now = now_ms() if now is None else now
        stats = {"rolled": 0, "flushed": 0, "deleted_segments": 0}
        for (name, partition), log in list(self.logs.items()):
            try:
                stats["rolled"] += log.roll_if_old(now)
                if log.flush_due(now):
                    log.flush()
                    stats["flushed"] += 1
                deleted = log.apply_retention(now)
            except OSError as exc:
                _log.error("housekeeping of %s-%d failed: %s", name, partition, exc)
                continue
            if deleted:
                stats["deleted_segments"] += deleted
                self._notify_append(name, partition)
        return stats

    def expire_producers(self, now: int | None = None) -> int:
        """Forget idempotent producers idle for ``producer.id.expiration.ms`` in every log."""
        now = now_ms() if now is None else now
        expiration = self.config["producer.id.expiration.ms"]
        return sum(log.producers.remove_expired(now, expiration) for log in self.logs.values())

    def compaction_candidates(self, now: int | None = None) -> list[tuple[str, int]]:
        """Logs with a compact policy whose dirty ratio reached ``min.cleanable.dirty.ratio``."""
        out = []
        for (name, partition), log in self.logs.items():
            topic = self.state.topics.get(name)
            if topic is None or "compact" not in self.topic_setting(topic, "cleanup.policy").split(","):
                continue
            upto = self._cleanable_upto(name, partition, log)
            ratio = float(self.topic_setting(topic, "min.cleanable.dirty.ratio"))
            dirty = log.dirty_ratio(upto)
            if dirty > 0 and dirty >= ratio:
                out.append((name, partition))
        return out

    def _cleanable_upto(self, name: str, partition: int, log: PartitionLog) -> int:
        """Compaction stays below the LSO (and, for coordinator logs, below their durable end)."""
        return log.last_stable_offset(self.high_watermark(name, partition))

    async def compact(self, name: str, partition: int, now: int | None = None) -> compaction.CompactionPlan | None:
        """Compact one log's closed segments: the rewrite runs in a worker thread, the swap of
        the segment list on the loop. For ``__consumer_offsets`` only segments below the
        durable end are touched."""
        now = now_ms() if now is None else now
        topic = self.state.topics[name]
        log = self.logs[(name, partition)]
        upto = self._cleanable_upto(name, partition, log)
        segments = log.closed_segments(upto)
        if not segments:
            return None
        horizon = now - int(self.topic_setting(topic, "delete.retention.ms"))
        guard = CoordinatorLog.compaction_guard() if name == OFFSETS_TOPIC else None
        plan = await asyncio.get_running_loop().run_in_executor(None, fileio.in_worker, compaction.build, log, segments,
                                                              horizon, guard)
        if self.logs.get((name, partition)) is not log or not log.swap_segments(plan.old, plan.new):
            for seg in plan.new:
                seg.close()
            return None
        _log.info("compacted %s-%d: %d -> %d records, %d -> %d bytes", name, partition,
                  plan.records_in, plan.records_out, plan.bytes_in, plan.bytes_out)
        return plan

    async def maintenance_loop(self) -> None:
        """Run housekeeping until cancelled: every second for time-based rolls and flushes,
        every ``log.retention.check.interval.ms`` for retention, every
        ``log.cleaner.backoff.ms`` for compaction."""
        retention_every = self.config["log.retention.check.interval.ms"]
        next_retention = now_ms() + retention_every
        next_clean = now_ms() + self.config["log.cleaner.backoff.ms"]
        expiry_every = self.config["producer.id.expiration.check.interval.ms"]
        next_expiry = now_ms() + expiry_every
        while True:
            cleaner_every = self.config["log.cleaner.backoff.ms"]  # dynamic: read each round
            next_clean = min(next_clean, now_ms() + cleaner_every)
            await asyncio.sleep(min(1.0, retention_every / 1000, cleaner_every / 1000))
            now = now_ms()
            for log in self.logs.values():
                if log.flush_due(now):
                    try:
                        log.flush()
                    except OSError as exc:
                        _log.error("fsync of %s failed: %s", log.directory, exc)
            if now >= next_retention:
                next_retention = now + retention_every
                self.maintenance(now)
            if now >= next_expiry:
                next_expiry = now + expiry_every
                self.expire_producers(now)
            if now >= next_clean and self.config["log.cleaner.enable"]:
                next_clean = now + cleaner_every
                for name, partition in self.compaction_candidates(now):
                    try:
                        await self.compact(name, partition, now)
                    except (OSError, ValueError, RuntimeError) as exc:
                        _log.error("compaction of %s-%d failed: %s", name, partition, exc)

    # --- the coordinator's view --------------------------------------------------------------

    def metadata_snapshot(self) -> MetadataSnapshot:
        """Topic names, ids, partition counts and log start/end offsets, as an immutable value."""
        topics = {}
        for t in self.state.topics.values():
            topics[t.name] = TopicSnapshot(
                t.name,
                t.id,
                t.partitions,
                tuple(self.logs[(t.name, p)].start_offset for p in range(t.partitions)),
                tuple(self.high_watermark(t.name, p) for p in range(t.partitions)),
                t.internal,
            )
        return MetadataSnapshot(self.topic_version, topics, {t.topic_id: t.name for t in topics.values()})


def _clip(data: bytes, limit: int) -> bytes:
    """Drop whole batches at or beyond offset ``limit`` (not yet durable)."""
    end = 0
    for pos, h in iter_batches(data):
        if h.base_offset >= limit:
            break
        end = pos + h.size
    return data[:end]
