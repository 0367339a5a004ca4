"""The action log: who did what, to what, when, and how it ended.

Every action the console runs (and every refused attempt) becomes one :class:`AuditEntry`,
logged at INFO on the ``eventbus.console.audit`` logger (so that it reaches the application's
own logs) and kept in an :class:`AuditLog`, which the console's "Actions" page lists.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import logging
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

__all__ = ["AuditEntry", "AuditLog", "AuditOutcome", "MemoryAuditLog"]

logger = logging.getLogger("eventbus.console.audit")

AuditOutcome = Literal["ok", "refused", "error"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    """One action: ``outcome`` is ``ok``, ``refused`` (bad input, read-only, CSRF) or ``error``.

    :param id: increasing number, unique in its log
    :param at: when the action finished (aware UTC)
    :param user: who, as signed in
    :param client: the client address as the server saw it
    :param action: what, e.g. ``failures.retry``
    :param target: to what, e.g. a failure id or a job name
    :param message: the result, as shown to the user
    """

    id: int
    at: datetime
    user: str
    client: str
    action: str
    target: str
    outcome: AuditOutcome
    message: str


@runtime_checkable
class AuditLog(Protocol):
    """**Protocol:** where the console keeps its action log.

    * ``append()`` assigns the entry's ``id``; entries come back newest first.
    """

    def append(
        self,
        *,
        at: datetime,
        user: str,
        client: str,
        action: str,
        target: str,
        outcome: AuditOutcome,
        message: str,
    ) -> AuditEntry:
        """Record one action and return it with its id."""
        ...

    def get(self, entry_id: int) -> AuditEntry | None:
        """The entry with that id, if still kept."""
        ...

    def entries(self, *, limit: int = 100) -> list[AuditEntry]:
        """The newest *limit* entries, newest first."""
        ...


class MemoryAuditLog:
    """Keeps the newest *max_entries* actions in process; every entry is also logged."""

    def __init__(self, *, max_entries: int = 10_000) -> None:
        self._entries: collections.deque[AuditEntry] = collections.deque(maxlen=max_entries)
        self._ids = itertools.count(1)

    def __repr__(self) -> str:
        return f"MemoryAuditLog(entries={len(self._entries)}, max_entries={self._entries.maxlen})"

    def append(
        self,
        *,
        at: datetime,
        user: str,
        client: str,
        action: str,
        target: str,
        outcome: AuditOutcome,
        message: str,
    ) -> AuditEntry:
        entry = AuditEntry(
            id=next(self._ids),
            at=at,
            user=user,
            client=client,
            action=action,
            target=target,
            outcome=outcome,
            message=message,
        )
        self._entries.append(entry)
        log = logger.warning if outcome == "error" else logger.info
        log(
            "console action %s on %r by %r from %s: %s: %s",
            action,
            target,
            user,
            client,
            outcome,
            message,
        )
        return entry

    def get(self, entry_id: int) -> AuditEntry | None:
        for entry in reversed(self._entries):
            if entry.id == entry_id:
                return entry
        return None

    def entries(self, *, limit: int = 100) -> list[AuditEntry]:
        return list(itertools.islice(reversed(self._entries), limit))
