"""In-process lock, run store and job store: the embedded defaults, and verified fakes of the
Redis and SQL ones (they pass the same conformance suites)."""

from __future__ import annotations

import itertools
import os
import secrets
import socket
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from anyio.abc import AsyncResource
from anyio.lowlevel import checkpoint

from .._jobs import JobDefinition
from .._records import RunRecord, RunStatus, abandoned_error

__all__ = ["LocalLease", "LocalLock", "MemoryJobStore", "MemoryRunStore"]


class LocalLock(AsyncResource):
    """A lock for the schedulers of one process (several may share it, as replicas would).

    Expiry follows ``now`` (default: the system clock); pass the scheduler's clock so that
    virtual-time tests can let a lock expire. ``async with`` and :meth:`aclose` are there for
    symmetry with :class:`~scheduler.RedisLock`: it holds no resource.

    :param now: a zero-argument function returning an aware UTC datetime
    :param owner: written into every token, as :class:`~scheduler.RedisLock` does (default
        ``host:pid``)
    """

    def __init__(
        self, now: Callable[[], datetime] | None = None, *, owner: str | None = None
    ) -> None:
        self._now = now or (lambda: datetime.now(UTC))
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self._held: dict[str, tuple[str, datetime]] = {}
        self._fences: dict[str, itertools.count[int]] = {}
        self._claims: dict[tuple[str, datetime], datetime] = {}

    def __repr__(self) -> str:
        return f"LocalLock(held={len(self._held)})"

    async def holder(self, name: str) -> str | None:
        """The owner named in the token that holds ``name`` now, if any."""
        token = self._token(name)
        return None if token is None else token.rpartition("#")[0]

    def _token(self, name: str) -> str | None:
        held = self._held.get(name)
        if held is None or held[1] <= self._now():
            return None
        return held[0]

    async def acquire(self, name: str, *, ttl: float) -> LocalLease | None:
        if self._token(name) is not None:
            return None
        token = f"{self.owner}#{secrets.token_hex(8)}"
        self._held[name] = (token, self._now() + timedelta(seconds=ttl))
        fence = next(self._fences.setdefault(name, itertools.count(1)))
        return LocalLease(self, name, token, ttl, fence)

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool:
        now = self._now()
        if len(self._claims) > 1024:
            self._claims = {k: exp for k, exp in self._claims.items() if exp > now}
        key = (name, fire.astimezone(UTC))
        expires = self._claims.get(key)
        if expires is not None and expires > now:
            return False
        self._claims[key] = now + timedelta(seconds=ttl)
        return True

    def _owned(self, name: str, token: str) -> bool:
        return self._token(name) == token

    async def aclose(self) -> None:
        """Nothing to release: leases held stay held until released or expired."""
        await checkpoint()


class LocalLease:
    """One acquisition of a :class:`LocalLock`."""

    def __init__(self, lock: LocalLock, name: str, token: str, ttl: float, fence: int) -> None:
        self._lock = lock
        self.name = name
        self.token = token
        self.ttl = ttl
        self._fence = fence

    def __repr__(self) -> str:
        return f"LocalLease(name={self.name!r}, fence={self._fence})"

    @property
    def fence(self) -> int:
        return self._fence

    async def extend(self) -> bool:
        if not self._lock._owned(self.name, self.token):
            return False
        self._lock._held[self.name] = (self.token, self._lock._now() + timedelta(seconds=self.ttl))
        return True

    async def release(self) -> bool:
        if not self._lock._owned(self.name, self.token):
            return False
        del self._lock._held[self.name]
        return True


class MemoryRunStore(AsyncResource):
    """The run table in a dict: for one process, and as the verified fake of ``SqlRunStore``.

    Records are immutable; the store keeps insertion order, which is start order. Closing it
    keeps the records. It keeps the paused state of jobs too, as ``SqlRunStore`` does, for the
    schedulers of this process that share it (``in_process``: a restart forgets it).
    """

    #: what it keeps lives in this process: other processes do not see it
    in_process = True

    def __init__(self) -> None:
        self._records: dict[str, RunRecord] = {}
        self._paused: set[str] = set()

    def __repr__(self) -> str:
        return f"MemoryRunStore(<{len(self._records)} runs>)"

    async def add(self, record: RunRecord) -> None:
        self._records[record.id] = record

    async def update(self, record: RunRecord) -> None:
        self._records[record.id] = record

    async def checkpoint(self, run_id: str, cursor: Any) -> None:
        rec = self._records.get(run_id)
        if rec is not None:
            self._records[run_id] = replace(rec, cursor=cursor)

    async def touch(self, run_id: str, expires_at: datetime) -> None:
        rec = self._records.get(run_id)
        if rec is not None:
            self._records[run_id] = replace(rec, expires_at=expires_at)

    async def resume_cursor(self, task_name: str) -> Any:
        for rec in reversed(self._records.values()):
            if rec.task_name == task_name and rec.status in ("succeeded", "failed", "abandoned"):
                return rec.cursor if rec.status != "succeeded" else None
        return None

    async def abandon_stale(self, task_name: str, now: datetime) -> int:
        count = 0
        for rec in list(self._records.values()):
            if (
                rec.task_name == task_name
                and rec.status == "running"
                and rec.expires_at is not None
                and rec.expires_at < now
            ):
                self._records[rec.id] = replace(
                    rec, status="abandoned", error=abandoned_error(rec.expires_at)
                )
                count += 1
        return count

    async def last_scheduled(self, task_name: str) -> datetime | None:
        fires = [
            r.scheduled_at
            for r in self._records.values()
            if r.task_name == task_name and r.scheduled_at is not None
        ]
        return max(fires, default=None)

    async def fire_started(self, task_name: str, scheduled_at: datetime) -> bool:
        await checkpoint()
        return any(
            r.task_name == task_name and r.scheduled_at == scheduled_at and r.status != "skipped"
            for r in self._records.values()
        )

    async def set_job_paused(self, task_name: str, paused: bool) -> None:
        await checkpoint()
        if paused:
            self._paused.add(task_name)
        else:
            self._paused.discard(task_name)

    async def job_paused(self, task_name: str) -> bool:
        await checkpoint()
        return task_name in self._paused

    async def get(self, run_id: str) -> RunRecord | None:
        return self._records.get(run_id)

    async def query(
        self,
        *,
        task_name: str | None = None,
        status: RunStatus | None = None,
        limit: int | None = 100,
    ) -> list[RunRecord]:
        out = [
            r
            for r in reversed(self._records.values())
            if (task_name is None or r.task_name == task_name)
            and (status is None or r.status == status)
        ]
        return out if limit is None else out[:limit]

    async def aclose(self) -> None:
        """Nothing to release (a checkpoint)."""
        await checkpoint()


class MemoryJobStore(AsyncResource):
    """Job definitions in a dict: for one process, and as the verified fake of ``SqlJobStore``.

    A :class:`~scheduler.abc.JobStore`; several schedulers of one process may share it, as
    replicas share a job table. Closing it keeps the definitions.
    """

    def __init__(self, definitions: Iterable[JobDefinition] = ()) -> None:
        self._definitions = {d.name: d for d in definitions}

    def __repr__(self) -> str:
        return f"MemoryJobStore(<{len(self._definitions)} jobs>)"

    async def put(self, definition: JobDefinition) -> None:
        """Insert or replace the definition of that name."""
        await checkpoint()
        self._definitions[definition.name] = definition

    async def delete(self, name: str) -> bool:
        """Delete the definition *name*; whether there was one."""
        await checkpoint()
        return self._definitions.pop(name, None) is not None

    async def load(self) -> list[JobDefinition]:
        """Every definition, enabled or not, by name."""
        await checkpoint()
        return [self._definitions[name] for name in sorted(self._definitions)]

    async def set_paused(self, name: str, paused: bool) -> bool:
        """Store the paused state of definition *name*; whether it exists."""
        await checkpoint()
        definition = self._definitions.get(name)
        if definition is None:
            return False
        self._definitions[name] = replace(definition, paused=paused)
        return True

    async def is_paused(self, name: str) -> bool | None:
        """The stored paused state of definition *name*; ``None`` if there is none."""
        await checkpoint()
        definition = self._definitions.get(name)
        return None if definition is None else definition.paused

    async def aclose(self) -> None:
        """Nothing to release (a checkpoint)."""
        await checkpoint()
