"""Share sessions (Kafka's `ShareSessionCache`): per (group, member), the share-partitions a share
consumer fetches from this broker and the epoch its next request must carry.

Epoch 0 opens a session (replacing any earlier one of the member), a positive epoch continues
it (it must equal the stored one; it then goes up by one, wrapping from INT32_MAX to 1), -1
closes it. A session belongs to the connection that opened it: when that connection closes,
the member's acquired records are released, unless a newer session of the member replaced it
meanwhile (KAFKA-19950). There is no idle eviction, as in Kafka 4.2; `max_sessions` bounds them.
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
    epoch: int = 1
    partitions: dict[SharePartitionId, None] = field(default_factory=dict)  # ordered set
    rotation: int = 0  # where the next fetch starts, so no partition starves


class ShareSessions:
    """The broker's share sessions (see the module docstring)."""

    def __init__(self, max_sessions: int) -> None:
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(self, group_id: str, member_id: str, connection: object,
             partitions: list[SharePartitionId]) -> tuple[ShareSession, ShareSession | None]:
        """Epoch 0: a new session (returned) replacing the member's previous one (also returned,
        for its records to be released)."""
        key = (group_id, member_id)
        previous = self.sessions.pop(key, None)
        if len(self.sessions) >= self.max_sessions:
            if previous is not None:
                self.sessions[key] = previous
            raise SessionError(SHARE_SESSION_LIMIT_REACHED, f"The share session cache is full "
                               f"({self.max_sessions} sessions).")
        session = self.sessions[key] = ShareSession(group_id, member_id, connection)
        for tp in partitions:
            session.partitions[tp] = None
        return session, previous

    def get(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        """The session a request with a positive epoch (or -1) continues."""
        session = self.sessions.get((group_id, member_id))
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

    def close(self, session: ShareSession) -> None:
        if self.sessions.get((session.group_id, session.member_id)) is session:
            del self.sessions[(session.group_id, session.member_id)]

    def of_connection(self, connection: object) -> list[ShareSession]:
        return [s for s in self.sessions.values() if s.connection is connection]

    def __len__(self) -> int:
        return len(self.sessions)
