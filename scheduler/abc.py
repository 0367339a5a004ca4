"""Protocols for the scheduler's pluggable parts; concrete classes need not inherit them.

Pairs: :class:`Lock` with ``LocalLock`` and ``RedisLock``; :class:`RunStore` with
``MemoryRunStore`` and ``SqlRunStore``; :class:`Clock` with ``SystemClock`` and
``VirtualClock``; :class:`JobSource` with ``SqlJobStore``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ._jobs import JobDefinition
from ._records import RunRecord, RunStatus

__all__ = ["Clock", "JobSource", "Lease", "Lock", "RunStore"]


@runtime_checkable
class Clock(Protocol):
    """**Protocol:** the only source of time for the loop.

    * ``now()`` is an aware UTC datetime and never goes backwards within a process.
    * ``sleep_until(t)`` returns at or after ``t`` (by ``now()``) and is cancellable.
    * Optional: ``monotonic() -> float``, seconds on a clock that never steps. When present,
      the loop measures how late it woke on it, so a wall-clock step forwards is not taken
      for lateness (``SystemClock`` has it; ``VirtualClock`` needs none).
    """

    def now(self) -> datetime: ...

    async def sleep_until(self, deadline: datetime) -> None: ...

    async def sleep(self, seconds: float) -> None: ...


@runtime_checkable
class Lease(Protocol):
    """**Protocol:** one acquisition of a lock, with its own token and fencing token.

    * ``fence`` grows with every acquisition of the same name, across processes.
    * ``extend()`` and ``release()`` act only if the lock is still this lease's: they return
      ``False`` (and change nothing) when it expired or another owner holds it.
    """

    @property
    def fence(self) -> int: ...

    async def extend(self) -> bool: ...

    async def release(self) -> bool: ...


@runtime_checkable
class Lock(Protocol):
    """**Protocol:** mutual exclusion of one job's runs, across the replicas that share it.

    * ``acquire(name, ttl=)`` never waits: a lease, or ``None`` when someone holds it.
    * ``claim_fire(name, fire, ttl=)`` returns ``True`` for exactly one caller per
      (name, fire time) within ``ttl`` seconds; this is what makes one scheduled fire run
      once even when the first replica's run ended before the second one woke.
    * A lock bounds concurrency; it does not guarantee that a run finishes.
    * Optional: ``async holder(name) -> str | None``, who holds the lock now (named in the
      ``locked`` skip); ``async settle() -> int``, void what calls whose outcome was unknown
      (a lost reply) may have taken, and return how many remain unresolved. The scheduler
      calls ``settle()`` in the background after a lock error until it returns 0.
    """

    async def acquire(self, name: str, *, ttl: float) -> Lease | None: ...

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool: ...


@runtime_checkable
class RunStore(Protocol):
    """**Protocol:** the run table.

    * ``add`` inserts a record; ``update`` replaces the record of the same id.
    * ``resume_cursor(task)`` is the cursor of the task's latest finished run if that run
      failed or was abandoned, else ``None``.
    * ``abandon_stale(task, now)`` marks the task's ``running`` rows whose ``expires_at`` is
      before ``now`` as ``abandoned`` and returns how many.
    * ``last_scheduled(task)`` is the latest ``scheduled_at`` of the task's records, whatever
      their status (catch-up after downtime starts after it), or ``None``.
    * Queries return newest first.
    """

    async def add(self, record: RunRecord) -> None: ...

    async def update(self, record: RunRecord) -> None: ...

    async def checkpoint(self, run_id: str, cursor: Any) -> None: ...

    async def touch(self, run_id: str, expires_at: datetime) -> None: ...

    async def resume_cursor(self, task_name: str) -> Any: ...

    async def abandon_stale(self, task_name: str, now: datetime) -> int: ...

    async def last_scheduled(self, task_name: str) -> datetime | None: ...

    async def get(self, run_id: str) -> RunRecord | None: ...

    async def query(
        self,
        *,
        task_name: str | None = None,
        status: RunStatus | None = None,
        limit: int | None = 100,
    ) -> list[RunRecord]: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class JobSource(Protocol):
    """**Protocol:** where job definitions kept as data come from at start.

    * Optional, for ``Scheduler.pause``/``resume`` to reach every replica:
      ``async set_paused(name, paused) -> bool`` (whether a definition had that name) and
      ``async is_paused(name) -> bool | None`` (``None``: no such definition), read at each
      fire of a job loaded from it.
    """

    async def load(self) -> list[JobDefinition]: ...
