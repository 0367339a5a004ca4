"""Protocols for the scheduler's pluggable parts; concrete classes need not inherit them.

Pairs: :class:`Lock` with ``LocalLock`` and ``RedisLock``; :class:`RunStore` with
``MemoryRunStore`` and ``SqlRunStore``; :class:`Clock` with ``SystemClock`` and
``VirtualClock``; :class:`JobStore` (a :class:`JobSource`) with ``MemoryJobStore`` and
``SqlJobStore``. Every lock and store is an async context manager with ``aclose()``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ._jobs import JobDefinition
from ._records import RunRecord, RunStatus

__all__ = ["Clock", "JobSource", "JobStore", "Lease", "Lock", "RunStore"]


@runtime_checkable
class Clock(Protocol):
    """**Protocol:** the only source of time for the loop.

    * ``now()`` is an aware UTC datetime and never goes backwards within a process.
    * ``sleep_until(t)`` returns at or after ``t`` (by ``now()``) and is cancellable.
    * Optional: ``monotonic() -> float``, seconds on a clock that never steps. When present,
      the loop measures how late it woke on it, so a wall-clock step forwards is not taken
      for lateness (``SystemClock`` has it; ``VirtualClock`` needs none).
    """

    def now(self) -> datetime:
        """The current time: aware, in UTC, never earlier than a previous reading."""
        ...

    async def sleep_until(self, deadline: datetime) -> None:
        """Return at or after *deadline* by :meth:`now`; cancellable."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after *seconds* by :meth:`now`; cancellable."""
        ...


@runtime_checkable
class Lease(Protocol):
    """**Protocol:** one acquisition of a lock, with its own token and fencing token.

    * ``fence`` grows with every acquisition of the same name, across processes.
    * ``extend()`` and ``release()`` act only if the lock is still this lease's: they return
      ``False`` (and change nothing) when it expired or another owner holds it.
    """

    @property
    def fence(self) -> int:
        """The fencing token of this acquisition: larger than every earlier one of the name."""
        ...

    async def extend(self) -> bool:
        """Reset the lock's TTL if it is still this lease's; whether it was."""
        ...

    async def release(self) -> bool:
        """Free the lock if it is still this lease's; whether it was (``False``: lost)."""
        ...


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
    * Optional: ``async aclose()`` and ``async with``, releasing what the lock holds (never a
      client it was given); ``LocalLock`` and ``RedisLock`` have both. The scheduler does not
      own its lock, so it never closes one.
    """

    async def acquire(self, name: str, *, ttl: float) -> Lease | None:
        """Take the lock of *name* for *ttl* seconds without waiting; ``None`` if it is held."""
        ...

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool:
        """Claim the fire of *name* at *fire*; ``True`` for one caller within *ttl* seconds."""
        ...


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
    * Optional: ``async fire_started(task, scheduled_at) -> bool``, whether a run of that
      fire began (a record of it that is not a skip). Catch-up reads it once it holds the
      job's lock, so that a fire whose claim expired while replicas walked a long backlog
      is not run twice; without it, the claim alone decides (as the first version did).
    * Optional: ``async set_job_paused(task, paused)`` and ``async job_paused(task) -> bool``,
      the paused state of the jobs that are not in a job table, kept where every replica
      sharing the store reads it at each fire (``Scheduler.pause``); and ``in_process =
      True`` on a store whose contents other processes do not see (``MemoryRunStore``).
      Without them, a pause holds in its process only.
    * Queries return newest first.
    * ``aclose()`` releases what the store built (an engine from a URL), never what it was
      given. (The stores of this package are also async context managers that close on exit.)
    """

    async def add(self, record: RunRecord) -> None:
        """Insert *record* (a new run id)."""
        ...

    async def update(self, record: RunRecord) -> None:
        """Replace the record of the same id."""
        ...

    async def checkpoint(self, run_id: str, cursor: Any) -> None:
        """Store *cursor* (JSON-able) as the progress of run *run_id*."""
        ...

    async def touch(self, run_id: str, expires_at: datetime) -> None:
        """Move the expiry of running run *run_id* (its lock was renewed)."""
        ...

    async def resume_cursor(self, task_name: str) -> Any:
        """The cursor to resume from: the latest finished run's, if it failed or was abandoned."""
        ...

    async def abandon_stale(self, task_name: str, now: datetime) -> int:
        """Mark running rows of *task_name* that expired before *now* abandoned; how many."""
        ...

    async def last_scheduled(self, task_name: str) -> datetime | None:
        """The latest ``scheduled_at`` of *task_name*'s records, whatever their status."""
        ...

    async def get(self, run_id: str) -> RunRecord | None:
        """The record of *run_id*, or ``None``."""
        ...

    async def query(
        self,
        *,
        task_name: str | None = None,
        status: RunStatus | None = None,
        limit: int | None = 100,
    ) -> list[RunRecord]:
        """Records matching every given filter, newest first, at most *limit*."""
        ...

    async def aclose(self) -> None:
        """Release what the store built; records stay where they are kept."""
        ...


@runtime_checkable
class JobSource(Protocol):
    """**Protocol:** where job definitions kept as data come from at start.

    * Optional, for ``Scheduler.pause``/``resume`` to reach every replica:
      ``async set_paused(name, paused) -> bool`` (whether a definition had that name) and
      ``async is_paused(name) -> bool | None`` (``None``: no such definition), read at each
      fire of a job loaded from it.
    """

    async def load(self) -> list[JobDefinition]:
        """Every definition, enabled or not, ordered by name."""
        ...


@runtime_checkable
class JobStore(JobSource, Protocol):
    """**Protocol:** a :class:`JobSource` that keeps definitions and their paused state.

    * ``put`` inserts or replaces by name; a definition's ``paused`` is stored with it.
    * Several schedulers (replicas) may share one store: each reads it on its own.
    * ``aclose()`` releases what the store built, never what it was given.
    """

    async def put(self, definition: JobDefinition) -> None:
        """Insert or replace the definition of that name."""
        ...

    async def delete(self, name: str) -> bool:
        """Delete the definition *name*; whether there was one."""
        ...

    async def set_paused(self, name: str, paused: bool) -> bool:
        """Store the paused state of definition *name*; whether it exists."""
        ...

    async def is_paused(self, name: str) -> bool | None:
        """The stored paused state of definition *name*; ``None`` if there is none."""
        ...

    async def aclose(self) -> None:
        """Release what the store built; definitions stay where they are kept."""
        ...
