"""Broker-level coordinator configuration and per-group dynamic overrides.

Names, defaults and bounds follow Kafka's `GroupCoordinatorConfig` and `GroupConfig`
(KIP-848: session timeout 45 s in [45 s, 60 s], heartbeat interval 5 s in [5 s, 15 s]).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from cohort.coordinator.errors import CoordinatorError, Errors

INT_MAX = 2**31 - 1
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")


def _int(props: Mapping[str, object], name: str, default: int) -> int:
    raw = props.get(name, default)
    try:
        return int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


def _list(props: Mapping[str, object], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    raw = props.get(name, default)
    if isinstance(raw, str):
        items = tuple(s.strip() for s in raw.split(",") if s.strip())
    else:
        items = tuple(str(s).strip() for s in raw)  # type: ignore[union-attr]
    return items


@dataclass(frozen=True)
class CoordinatorConfig:
    """Kafka's `group.*` / `offsets.*` settings the consumer-group coordinator reads."""

    consumer_session_timeout_ms: int = 45_000
    consumer_min_session_timeout_ms: int = 45_000
    consumer_max_session_timeout_ms: int = 60_000
    consumer_heartbeat_interval_ms: int = 5_000
    consumer_min_heartbeat_interval_ms: int = 5_000
    consumer_max_heartbeat_interval_ms: int = 15_000
    consumer_max_size: int = INT_MAX
    consumer_assignors: tuple[str, ...] = ("uniform", "range", "lag")
    offsets_retention_ms: int = 10_080 * 60_000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    # classic protocol (JoinGroup / SyncGroup / Heartbeat / LeaveGroup)
    classic_min_session_timeout_ms: int = 6_000
    classic_max_session_timeout_ms: int = 1_800_000
    classic_initial_rebalance_delay_ms: int = 3_000
    classic_max_size: int = INT_MAX
    classic_new_member_join_timeout_ms: int = 300_000  # Kafka's CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS
    consumer_migration_policy: str = "bidirectional"
    # lag-driven rebalancing of groups using the `lag` assignor (cohort only; see docs/lag.md)
    lag_rebalance_interval_ms: int = 30_000
    lag_rebalance_min_interval_ms: int = 120_000
    lag_imbalance_ratio: float = 1.5
    lag_imbalance_evaluations: int = 2
    lag_source: str = "local"
    # share groups (KIP-932; Kafka's `group.share.*`)
    share_session_timeout_ms: int = 45_000
    share_min_session_timeout_ms: int = 45_000
    share_max_session_timeout_ms: int = 60_000
    share_heartbeat_interval_ms: int = 5_000
    share_min_heartbeat_interval_ms: int = 5_000
    share_max_heartbeat_interval_ms: int = 15_000
    share_max_size: int = 200
    share_record_lock_duration_ms: int = 30_000
    share_min_record_lock_duration_ms: int = 15_000
    share_max_record_lock_duration_ms: int = 60_000
    share_delivery_count_limit: int = 5
    share_partition_max_record_locks: int = 2_000
    share_max_share_sessions: int = 2_000

    PROPERTIES = {
        "group.consumer.session.timeout.ms": "consumer_session_timeout_ms",
        "group.consumer.min.session.timeout.ms": "consumer_min_session_timeout_ms",
        "group.consumer.max.session.timeout.ms": "consumer_max_session_timeout_ms",
        "group.consumer.heartbeat.interval.ms": "consumer_heartbeat_interval_ms",
        "group.consumer.min.heartbeat.interval.ms": "consumer_min_heartbeat_interval_ms",
        "group.consumer.max.heartbeat.interval.ms": "consumer_max_heartbeat_interval_ms",
        "group.consumer.max.size": "consumer_max_size",
        "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
        "offset.metadata.max.bytes": "offset_metadata_max_bytes",
        "group.min.session.timeout.ms": "classic_min_session_timeout_ms",
        "group.max.session.timeout.ms": "classic_max_session_timeout_ms",
        "group.initial.rebalance.delay.ms": "classic_initial_rebalance_delay_ms",
        "group.max.size": "classic_max_size",
        "group.lag.rebalance.interval.ms": "lag_rebalance_interval_ms",
        "group.lag.rebalance.min.interval.ms": "lag_rebalance_min_interval_ms",
        "group.lag.imbalance.evaluations": "lag_imbalance_evaluations",
        "group.share.session.timeout.ms": "share_session_timeout_ms",
        "group.share.min.session.timeout.ms": "share_min_session_timeout_ms",
        "group.share.max.session.timeout.ms": "share_max_session_timeout_ms",
        "group.share.heartbeat.interval.ms": "share_heartbeat_interval_ms",
        "group.share.min.heartbeat.interval.ms": "share_min_heartbeat_interval_ms",
        "group.share.max.heartbeat.interval.ms": "share_max_heartbeat_interval_ms",
        "group.share.max.size": "share_max_size",
        "group.share.record.lock.duration.ms": "share_record_lock_duration_ms",
        "group.share.min.record.lock.duration.ms": "share_min_record_lock_duration_ms",
        "group.share.max.record.lock.duration.ms": "share_max_record_lock_duration_ms",
        "group.share.delivery.count.limit": "share_delivery_count_limit",
        "group.share.partition.max.record.locks": "share_partition_max_record_locks",
        "group.share.max.share.sessions": "share_max_share_sessions",
    }

    def __post_init__(self) -> None:
        if not 1 <= self.consumer_min_session_timeout_ms <= self.consumer_session_timeout_ms <= self.consumer_max_session_timeout_ms:
            raise ValueError(
                "group.consumer.session.timeout.ms must be within "
                "[group.consumer.min.session.timeout.ms, group.consumer.max.session.timeout.ms]"
            )
        if not 1 <= self.consumer_min_heartbeat_interval_ms <= self.consumer_heartbeat_interval_ms <= self.consumer_max_heartbeat_interval_ms:
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be within "
                "[group.consumer.min.heartbeat.interval.ms, group.consumer.max.heartbeat.interval.ms]"
            )
        if self.consumer_heartbeat_interval_ms >= self.consumer_session_timeout_ms:
            raise ValueError("group.consumer.heartbeat.interval.ms must be less than group.consumer.session.timeout.ms")
        if self.consumer_max_size < 1:
            raise ValueError("group.consumer.max.size must be at least 1")
        if not self.consumer_assignors:
            raise ValueError("group.consumer.assignors must name at least one assignor")
        if self.offsets_retention_ms < 1 or self.offsets_retention_check_interval_ms < 1:
            raise ValueError("offsets.retention.minutes and offsets.retention.check.interval.ms must be positive")
        if self.offset_metadata_max_bytes < 0:
            raise ValueError("offset.metadata.max.bytes must not be negative")
        if not 0 <= self.classic_min_session_timeout_ms <= self.classic_max_session_timeout_ms:
            raise ValueError("group.min.session.timeout.ms must not exceed group.max.session.timeout.ms")
        if self.classic_initial_rebalance_delay_ms < 0:
            raise ValueError("group.initial.rebalance.delay.ms must not be negative")
        if self.classic_max_size < 1:
            raise ValueError("group.max.size must be at least 1")
        if self.consumer_migration_policy not in MIGRATION_POLICIES:
            raise ValueError(f"group.consumer.migration.policy must be one of {', '.join(MIGRATION_POLICIES)}")
        if self.lag_rebalance_interval_ms < 1:
            raise ValueError("group.lag.rebalance.interval.ms must be positive")
        if self.lag_rebalance_min_interval_ms < 0:
            raise ValueError("group.lag.rebalance.min.interval.ms must not be negative")
        if not (isinstance(self.lag_imbalance_ratio, (int, float)) and math.isfinite(self.lag_imbalance_ratio)
                and self.lag_imbalance_ratio > 1):
            raise ValueError("group.lag.imbalance.ratio must be a finite number greater than 1")
        if self.lag_imbalance_evaluations < 1:
            raise ValueError("group.lag.imbalance.evaluations must be at least 1")
        if not self.lag_source.strip():
            raise ValueError("group.lag.source must be `local` or the path of a lag snapshot directory")
        self._check_share()

    def _check_share(self) -> None:
        """Kafka's `ShareGroupConfig` rules."""
        if not 1 <= self.share_min_session_timeout_ms <= self.share_session_timeout_ms <= self.share_max_session_timeout_ms:
            raise ValueError("group.share.session.timeout.ms must be within "
                             "[group.share.min.session.timeout.ms, group.share.max.session.timeout.ms]")
        if not 1 <= self.share_min_heartbeat_interval_ms <= self.share_heartbeat_interval_ms <= self.share_max_heartbeat_interval_ms:
            raise ValueError("group.share.heartbeat.interval.ms must be within "
                             "[group.share.min.heartbeat.interval.ms, group.share.max.heartbeat.interval.ms]")
        if self.share_heartbeat_interval_ms >= self.share_session_timeout_ms:
            raise ValueError("group.share.heartbeat.interval.ms must be less than group.share.session.timeout.ms")
        if not 1 <= self.share_max_size <= 1000:
            raise ValueError("group.share.max.size must be between 1 and 1000")
        if not 1000 <= self.share_min_record_lock_duration_ms <= 30_000:
            raise ValueError("group.share.min.record.lock.duration.ms must be between 1000 and 30000")
        if not 30_000 <= self.share_max_record_lock_duration_ms <= 3_600_000:
            raise ValueError("group.share.max.record.lock.duration.ms must be between 30000 and 3600000")
        if not (1000 <= self.share_record_lock_duration_ms <= 3_600_000 and self.share_min_record_lock_duration_ms
                <= self.share_record_lock_duration_ms <= self.share_max_record_lock_duration_ms):
            raise ValueError("group.share.record.lock.duration.ms must be within "
                             "[group.share.min.record.lock.duration.ms, group.share.max.record.lock.duration.ms]")
        if not 2 <= self.share_delivery_count_limit <= 10:
            raise ValueError("group.share.delivery.count.limit must be between 2 and 10")
        if not 100 <= self.share_partition_max_record_locks <= 10_000:
            raise ValueError("group.share.partition.max.record.locks must be between 100 and 10000")
        if self.share_max_share_sessions < max(1, self.share_max_size):
            raise ValueError("group.share.max.share.sessions must be at least group.share.max.size")

    @property
    def upgrade_allowed(self) -> bool:
        """Classic -> consumer conversion allowed (policy bidirectional or upgrade)."""
        return self.consumer_migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_allowed(self) -> bool:
        """Consumer -> classic conversion allowed (policy bidirectional or downgrade)."""
        return self.consumer_migration_policy in ("bidirectional", "downgrade")

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> "CoordinatorConfig":
        """Build from Kafka-style property names; unknown names are ignored (they belong to others)."""
        kwargs: dict[str, object] = {}
        for name, attr in cls.PROPERTIES.items():
            if name in props:
                kwargs[attr] = _int(props, name, 0)
        if "group.consumer.assignors" in props:
            kwargs["consumer_assignors"] = _list(props, "group.consumer.assignors", ())
        if "group.consumer.migration.policy" in props:
            kwargs["consumer_migration_policy"] = str(props["group.consumer.migration.policy"]).strip().lower()
        if "group.lag.imbalance.ratio" in props:
            raw = props["group.lag.imbalance.ratio"]
            try:
                kwargs["lag_imbalance_ratio"] = float(raw)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise ValueError(f"group.lag.imbalance.ratio must be a number, got {raw!r}") from None
        if "group.lag.source" in props:
            kwargs["lag_source"] = str(props["group.lag.source"]).strip()
        if "offsets.retention.minutes" in props:
            kwargs["offsets_retention_ms"] = _int(props, "offsets.retention.minutes", 0) * 60_000
        return cls(**kwargs)  # type: ignore[arg-type]


GROUP_CONFIG_KEYS = ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "consumer.assignor",
                     "consumer.offset.reset", "share.session.timeout.ms", "share.heartbeat.interval.ms",
                     "share.record.lock.duration.ms", "share.auto.offset.reset", "share.isolation.level")
OFFSET_RESET_POLICIES = ("latest", "earliest")
SHARE_ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


@dataclass(frozen=True)
class GroupConfig:
    """Dynamic per-group overrides (None = use the broker default)."""

    session_timeout_ms: int | None = None
    heartbeat_interval_ms: int | None = None
    assignor: str | None = None
    raw: Mapping[str, str] = field(default_factory=dict)
    # where a member without a committed offset starts, for lag: `latest` (lag 0) or `earliest`
    offset_reset: str | None = None
    # share groups
    share_session_timeout_ms: int | None = None
    share_heartbeat_interval_ms: int | None = None
    share_record_lock_duration_ms: int | None = None
    share_auto_offset_reset: str = "latest"
    share_isolation_level: str = "read_uncommitted"

    @classmethod
    def lenient(cls, configs: Mapping[str, str], broker: CoordinatorConfig) -> "GroupConfig":
        """Overrides read back from the log: a value the current broker bounds reject is ignored
        (the broker default applies) instead of failing the load."""
        try:
            return cls.parse(configs, broker)
        except CoordinatorError:
            kept: dict[str, str] = {}
            for key, value in configs.items():
                try:
                    cls.parse({**kept, key: value}, broker)
                except CoordinatorError:
                    continue
                kept[key] = value
            return dataclasses.replace(cls.parse(kept, broker), raw=dict(configs))

    @classmethod
    def parse(cls, configs: Mapping[str, str], broker: CoordinatorConfig) -> "GroupConfig":
        """Validate overrides against the broker bounds; INVALID_CONFIG names the offending key."""
        for key in configs:
            if key not in GROUP_CONFIG_KEYS:
                raise CoordinatorError(Errors.INVALID_CONFIG, f"Unknown group config name: {key}.")
        session = _group_int(configs, "consumer.session.timeout.ms",
                             broker.consumer_min_session_timeout_ms, broker.consumer_max_session_timeout_ms)
        heartbeat = _group_int(configs, "consumer.heartbeat.interval.ms",
                               broker.consumer_min_heartbeat_interval_ms, broker.consumer_max_heartbeat_interval_ms)
        effective_session = session if session is not None else broker.consumer_session_timeout_ms
        effective_heartbeat = heartbeat if heartbeat is not None else broker.consumer_heartbeat_interval_ms
        if effective_heartbeat >= effective_session:
            raise CoordinatorError(
                Errors.INVALID_CONFIG,
                "consumer.heartbeat.interval.ms must be less than consumer.session.timeout.ms.",
            )
        assignor = configs.get("consumer.assignor")
        if assignor is not None and assignor not in broker.consumer_assignors:
            raise CoordinatorError(
                Errors.INVALID_CONFIG,
                f"consumer.assignor {assignor} is not one of group.consumer.assignors: "
                f"{', '.join(broker.consumer_assignors)}.",
            )
        reset = configs.get("consumer.offset.reset")
        if reset is not None and reset not in OFFSET_RESET_POLICIES:
            raise CoordinatorError(
                Errors.INVALID_CONFIG,
                f"consumer.offset.reset must be one of {', '.join(OFFSET_RESET_POLICIES)}, got {reset!r}.",
            )
        share_session = _group_int(configs, "share.session.timeout.ms",
                                   broker.share_min_session_timeout_ms, broker.share_max_session_timeout_ms)
        share_heartbeat = _group_int(configs, "share.heartbeat.interval.ms",
                                     broker.share_min_heartbeat_interval_ms, broker.share_max_heartbeat_interval_ms)
        if ((share_heartbeat if share_heartbeat is not None else broker.share_heartbeat_interval_ms)
                >= (share_session if share_session is not None else broker.share_session_timeout_ms)):
            raise CoordinatorError(Errors.INVALID_CONFIG,
                                   "share.heartbeat.interval.ms must be less than share.session.timeout.ms.")
        lock = _group_int(configs, "share.record.lock.duration.ms", max(1000, broker.share_min_record_lock_duration_ms),
                          broker.share_max_record_lock_duration_ms)
        share_reset = configs.get("share.auto.offset.reset", "latest")
        share_reset_ms(share_reset)
        isolation = configs.get("share.isolation.level", "read_uncommitted")
        if isolation not in SHARE_ISOLATION_LEVELS:
            raise CoordinatorError(Errors.INVALID_CONFIG, f"share.isolation.level must be one of "
                                   f"{', '.join(SHARE_ISOLATION_LEVELS)}, got {isolation!r}.")
        return cls(session, heartbeat, assignor, dict(configs), reset, share_session, share_heartbeat, lock,
                   share_reset, isolation)

    def share_session_timeout(self, broker: CoordinatorConfig) -> int:
        return self.share_session_timeout_ms if self.share_session_timeout_ms is not None \
            else broker.share_session_timeout_ms

    def share_heartbeat_interval(self, broker: CoordinatorConfig) -> int:
        return self.share_heartbeat_interval_ms if self.share_heartbeat_interval_ms is not None \
            else broker.share_heartbeat_interval_ms

    def share_record_lock_duration(self, broker: CoordinatorConfig) -> int:
        return self.share_record_lock_duration_ms if self.share_record_lock_duration_ms is not None \
            else broker.share_record_lock_duration_ms

    def session_timeout(self, broker: CoordinatorConfig) -> int:
        return self.session_timeout_ms if self.session_timeout_ms is not None else broker.consumer_session_timeout_ms

    @property
    def reset_to_earliest(self) -> bool:
        """Whether a partition without a committed offset counts its whole log as lag (default: none)."""
        return self.offset_reset == "earliest"

    def heartbeat_interval(self, broker: CoordinatorConfig) -> int:
        return self.heartbeat_interval_ms if self.heartbeat_interval_ms is not None else broker.consumer_heartbeat_interval_ms


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:\.(\d{1,9}))?S)?)?", re.IGNORECASE)


def share_reset_ms(value: str) -> int | None:
    """`share.auto.offset.reset`: None for `latest` / `earliest`, else the look-back of
    `by_duration:<ISO-8601 duration>` in ms (Java's Duration format, PnDTnHnMn.nS; not negative)."""
    if value in OFFSET_RESET_POLICIES:
        return None
    prefix = "by_duration:"
    if value.startswith(prefix):
        text = value[len(prefix):].strip()
        match = _DURATION.fullmatch(text)
        if match and text.upper() not in ("P", "PT") and not text.upper().endswith("T"):
            days, hours, minutes, seconds = (int(g or 0) for g in match.groups()[:4])
            fraction = (match.group(5) or "").ljust(9, "0")
            return ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + int(fraction) // 1_000_000
    raise CoordinatorError(Errors.INVALID_CONFIG, f"share.auto.offset.reset must be latest, earliest or "
                           f"by_duration:<ISO-8601 duration> (e.g. by_duration:PT1H), got {value!r}.")


def _group_int(configs: Mapping[str, str], key: str, lo: int, hi: int) -> int | None:
    raw = configs.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise CoordinatorError(Errors.INVALID_CONFIG, f"{key} must be an integer, got {raw!r}.") from None
    if not lo <= value <= hi:
        raise CoordinatorError(Errors.INVALID_CONFIG, f"{key} must be between {lo} and {hi}, got {value}.")
    return value


NO_OVERRIDES = GroupConfig()
