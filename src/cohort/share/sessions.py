"""Share sessions (Kafka's `ShareSessionCache`): per (group, member), the share-partitions a share
consumer fetches from this broker and the epoch its next request must carry.

Epoch 0 opens a session (replacing any earlier one of the member), a positive epoch continues
it (it must equal the stored one; it then goes up by one, wrapping from INT32_MAX to 1), -1
closes it. A session belongs to the connection that opened it: when that connection closes,
the member's acquired records are released, unless a newer session of the member replaced it
meanwhile (KAFKA-19950). There is no idle eviction, as in Kafka 4.2; `max_sessions` bounds them.

A client keeps one session per broker it fetches from. In front of an upstream, one cohort
instance answers for several of the upstream's brokers (a port each), so a session is keyed by
the node it was opened with as well (None for a broker that is only itself).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED = 122, 123, 133
INT32_MAX = 2**31 - 1

SharePartitionId = tuple[uuid.UUID, int]  # (topic id, partition)


class SessionError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    connection: object
    node: object = None
    epoch: int = 1
    partitions: dict[SharePartitionId, None] = field(default_factory=dict)  # ordered set
    rotation: int = 0  # where the next fetch starts, so no partition starves


class ShareSessions:
    """The broker's share sessions (see the module docstring)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str, object], ShareSession] = {}

    def open(self, group_id: str, member_id: str, connection: object, partitions: list[SharePartitionId],
             node: object = None) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a new session (returned) replacing the member's previous one (also returned,
        for its records to be released)."""
        key = (group_id, member_id, node)
        previous = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if previous is not None:
                self.sessions[key] = previous
            raise SessionError(SHARE_SESSION_LIMIT_REACHED, f"The share session cache is full "
                               f"({self.max_sessions} sessions).")
        session = self.sessions[key] = ShareSession(group_id, member_id, connection, node)
        for tp in partitions:
            session.partitions[tp] = None
        return session, previous

    def get(self, group_id: str, member_id: str, epoch: int, node: object = None) -> ShareSession:
        """The session a request with a positive epoch (or -1) continues."""
        session = self.sessions.get((group_id, member_id, node))
        if session is None:
            raise SessionError(SHARE_SESSION_NOT_FOUND, f"The share session for member {member_id} of group "
                               f"{group_id} was not found.")
        if epoch > 0 and epoch != session.epoch:
            raise SessionError(INVALID_SHARE_SESSION_EPOCH, f"The share session epoch is {session.epoch}, "
                               f"not {epoch}.")
        return session

    @staticmethod
    def advance(session: ShareSession) -> None:
        session.epoch = 1 if session.epoch == INT32_MAX else session.epoch + 1

    def current(self, session: ShareSession) -> bool:
        """The session is still its member's (not closed or replaced)."""
        return self.sessions.get((session.group_id, session.member_id, session.node)) is session

    def close(self, session: ShareSession) -> None:
        if self.current(session):
            del self.sessions[(session.group_id, session.member_id, session.node)]

    def of_connection(self, connection: object) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.connection is connection]

    def __len__(self) -> int:
        return len(self.sessions)
