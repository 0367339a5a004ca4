"""The runtime registry of jobs: the decorators, the ``add_*`` methods, ``remove``, lookups,
and the paused state.

:class:`Scheduler` inherits it and hears of every change through two hooks, so the registry
holds no timer or run logic: it validates, keeps the jobs by name, and keeps the paused state
where every replica reads it (the job table for its jobs, else the run store).
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Literal, Unpack

from .._cron import CronExpression
from .._exceptions import IntervalTooShortError, JobLookupError
from .._jobs import Job, JobDefinition, JobFunction, JobOptions
from .._triggers import AnyTrigger, AtTrigger, CronTrigger, IntervalTrigger, TimeoutTrigger
from ..abc import JobSource

__all__ = ["JobRegistry", "PauseScope"]

logger = logging.getLogger("scheduler")

#: where a job's paused state is kept: see :meth:`JobRegistry.pause_scope`
PauseScope = Literal["job table", "run table", "process"]


class JobRegistry:
    """Jobs by name; the base of :class:`Scheduler`.

    Options (``**options``) are those of :class:`~scheduler.JobOptions`, validated by
    :class:`~scheduler.Job`: ``max_running``, ``wait_for_completion``, ``lock_ttl``,
    ``renew``, ``misfire_grace``, ``timeout``, ``jitter``, ``catch_up``, ``max_catch_up``.

    :param min_interval: the floor, in seconds, for user-supplied schedules
    :param job_source: the job table; where the paused state of its jobs is kept
    """

    def __init__(self, *, min_interval: float, job_source: JobSource | None = None) -> None:
        self.min_interval = min_interval
        self._job_source = job_source
        self._jobs: dict[str, Job] = {}
        self._generations = itertools.count(1)

    def _job_added(self, job: Job) -> None:
        """Hook: ``job`` was registered (or replaced one of the same name)."""

    def _job_removed(self, job: Job, *, cancel: bool) -> None:
        """Hook: ``job`` was deleted; ``cancel`` asks to cancel its run in progress."""

    # -- decorators: jobs written as code -------------------------------------------------------

    def cron(
        self, expr: str, *, name: str | None = None, tz: str = "UTC", **options: Unpack[JobOptions]
    ) -> Callable[[JobFunction], JobFunction]:
        """Register the decorated function to fire at the times of ``expr`` in ``tz``.

        :param name: the job's name (default ``module:qualname``)
        """
        return self._decorator(CronTrigger(CronExpression(expr, tz)), name, options)

    def interval(
        self, *, seconds: float, name: str | None = None, **options: Unpack[JobOptions]
    ) -> Callable[[JobFunction], JobFunction]:
        """Register the decorated function to fire every ``seconds``, first one interval
        after the scheduler starts."""
        return self._decorator(IntervalTrigger(seconds), name, options)

    def timeout(
        self, *, seconds: float, name: str | None = None, **options: Unpack[JobOptions]
    ) -> Callable[[JobFunction], JobFunction]:
        """Register the decorated function to fire once, ``seconds`` after start."""
        return self._decorator(TimeoutTrigger(seconds), name, options)

    def _decorator(
        self, trigger: AnyTrigger, name: str | None, options: JobOptions
    ) -> Callable[[JobFunction], JobFunction]:
        def register(fn: JobFunction) -> JobFunction:
            qualname = getattr(fn, "__qualname__", type(fn).__qualname__)
            job_name = name or f"{fn.__module__}:{qualname}"
            self._add(Job(name=job_name, fn=fn, trigger=trigger, **options))
            return fn

        return register

    # -- at run time: user-supplied schedules ---------------------------------------------------

    def add_cron(
        self,
        name: str,
        expr: str,
        fn: JobFunction,
        *,
        tz: str = "UTC",
        min_interval: float | None = None,
        **options: Unpack[JobOptions],
    ) -> Job:
        """Register (or replace) a job from a user-supplied expression, validating it first.

        Nothing is registered when validation fails; a job of the same name is replaced, and
        a run of the old one still in progress counts for ``max_running``.

        :param min_interval: override the scheduler's floor for this job (seconds)
        :raises CronSyntaxError: if ``expr`` does not parse
        :raises IntervalTooShortError: if it fires more often than the floor
        :raises zoneinfo.ZoneInfoNotFoundError: if ``tz`` is unknown
        :raises ValueError: for a bad option, naming it
        """
        cron = CronExpression(expr, tz)
        self._check_floor(name, expr, cron.min_interval().total_seconds(), min_interval)
        return self._add(Job(name=name, fn=fn, trigger=CronTrigger(cron), **options))

    def add_interval(
        self,
        name: str,
        seconds: float,
        fn: JobFunction,
        *,
        min_interval: float | None = None,
        **options: Unpack[JobOptions],
    ) -> Job:
        """Register (or replace) a job that fires every ``seconds``, held to the floor as
        :meth:`add_cron`; the first fire is one interval after the scheduler starts (or
        after this call, if it is running)."""
        trigger = IntervalTrigger(seconds)
        self._check_floor(name, trigger.schedule, seconds, min_interval)
        return self._add(Job(name=name, fn=fn, trigger=trigger, **options))

    def add_timeout(
        self, name: str, seconds: float, fn: JobFunction, **options: Unpack[JobOptions]
    ) -> Job:
        """Register (or replace) a job that fires once, ``seconds`` after the scheduler
        starts (or after this call, if it is running)."""
        return self._add(Job(name=name, fn=fn, trigger=TimeoutTrigger(seconds), **options))

    def add_at(
        self, name: str, when: datetime, fn: JobFunction, **options: Unpack[JobOptions]
    ) -> Job:
        """Register (or replace) a job that fires once, at the instant ``when``.

        An instant already past when the scheduler starts (or when this is called while it
        runs) follows ``catch_up``: ``"skip"`` records the fire as skipped (``missed``),
        ``"latest"`` or ``"all"`` run it now; either way at most once, by the run table.

        :raises ValueError: if ``when`` is naive
        """
        return self._add(Job(name=name, fn=fn, trigger=AtTrigger(when), **options))

    def _check_floor(
        self, name: str, schedule: str, gap: float, min_interval: float | None
    ) -> None:
        floor = self.min_interval if min_interval is None else min_interval
        if gap < floor:
            raise IntervalTooShortError(name, schedule, gap, floor)

    def _add(self, job: Job) -> Job:
        if not _is_async(job.fn):
            raise TypeError(
                f"job {job.name!r}: {job.fn!r} is not an async function; a job is awaited on "
                "the event loop, so define it with 'async def' (run blocking work in "
                "anyio.to_thread.run_sync)"
            )
        job.generation = next(self._generations)
        replaced = job.name in self._jobs
        self._jobs[job.name] = job
        self._job_added(job)
        logger.debug("job %r %s (%s)", job.name, "replaced" if replaced else "added", job.trigger)
        return job

    def remove(self, name: str, *, cancel: bool = False) -> None:
        """Stop the job's timer, then delete it; it never fires again.

        A fire of it that was due but had not started yet is dropped too, as is one that
        was waiting for the lock (recorded as skipped, ``removed``).

        :param cancel: also cancel its run in progress (recorded as failed,
            ``RunCancelledError``); by default that run finishes
        :raises JobLookupError: if no job has that name
        """
        job = self._jobs.pop(name, None)
        if job is None:
            raise JobLookupError(name)
        job.generation = -1  # marks it gone: timers set for it are now stale
        self._job_removed(job, cancel=cancel)

    def get(self, name: str) -> Job:
        """:raises JobLookupError: if no job has that name."""
        try:
            return self._jobs[name]
        except KeyError:
            raise JobLookupError(name) from None

    def jobs(self) -> list[Job]:
        """The registered jobs, in name order: each with its ``kind``, ``schedule``, ``tz``,
        ``paused`` flag and ``last_run`` (see also :meth:`Scheduler.next_fire_times`)."""
        return [self._jobs[n] for n in sorted(self._jobs)]

    # -- paused state ---------------------------------------------------------------------------

    async def pause(self, name: str) -> None:
        """Keep the job's schedule, but record its fires as skipped (``paused``).

        The state is written first where every replica reads it at each fire (see
        :meth:`pause_scope`): the job table for its jobs (the CLI's ``pause`` too), the run
        store for the others (a ``SqlRunStore``: every replica on its database, and a
        restart). With a store kept in memory it holds in this process only.

        :raises JobLookupError: if no job has that name
        """
        await self._set_paused(self.get(name), True)

    async def resume(self, name: str) -> None:
        """Undo :meth:`pause` from the next fire on; the fires skipped meanwhile are not run.

        :raises JobLookupError: if no job has that name
        """
        await self._set_paused(self.get(name), False)

    def pause_scope(self, name: str) -> PauseScope:
        """Where the paused state of job ``name`` is kept, so who sees a pause:

        * ``"job table"``: a job loaded from the job table; every replica, the CLI, a restart
        * ``"run table"``: the run store keeps it (``SqlRunStore``); every replica that shares
          the store's database, and a restart
        * ``"process"``: this process only (a ``MemoryRunStore``, or a store that cannot keep
          it): other replicas go on running the job, and a restart forgets the pause

        :raises JobLookupError: if no job has that name
        """
        job = self.get(name)
        if job.stored and getattr(self._job_source, "set_paused", None) is not None:
            return "job table"
        store = self._pause_store()
        if hasattr(store, "set_job_paused") and not getattr(store, "in_process", False):
            return "run table"
        return "process"

    def _pause_store(self) -> object:
        """Hook: the run store, which keeps the paused state of jobs not in the job table."""
        return None

    async def _set_paused(self, job: Job, paused: bool) -> None:
        table = getattr(self._job_source, "set_paused", None) if job.stored else None
        write = table if table is not None else getattr(self._pause_store(), "set_job_paused", None)
        if write is not None:
            await write(job.name, paused)  # first: if it cannot be written, nothing changed
        job.paused = paused
        logger.info("job %r %s", job.name, "paused" if paused else "resumed")

    async def is_paused(self, job: Job) -> bool:
        """Whether ``job`` is paused now, read where its state is kept (another replica or
        the CLI may have changed it; see :meth:`pause_scope`), else the flag in this
        process. If that store cannot be read, the last state known (with a WARNING)."""
        read = getattr(self._job_source, "is_paused", None) if job.stored else None
        where = "the job table"
        if read is None:
            read, where = getattr(self._pause_store(), "job_paused", None), "the run store"
        if read is not None:
            try:
                stored: bool | None = await read(job.name)
            except Exception:
                logger.warning(
                    "job %r: could not read its paused state from %s; using the last known (%s)",
                    job.name,
                    where,
                    "paused" if job.paused else "not paused",
                    exc_info=True,
                )
            else:
                if stored is not None:
                    job.paused = stored
        return job.paused

    async def load_jobs(
        self, source: JobSource, factory: Callable[[JobDefinition], JobFunction]
    ) -> list[str]:
        """Register every enabled definition from ``source`` (user-supplied: validated and held
        to ``min_interval``); a bad definition is logged at ERROR and skipped.

        :return: the names registered
        """
        self._job_source = source  # where the paused state of these jobs is kept
        loaded = []
        for definition in await source.load():
            if not definition.enabled:
                continue
            try:
                job = self.add_cron(
                    definition.name, definition.expr, factory(definition), tz=definition.tz
                )
            except Exception:
                logger.exception("job definition %r was not loaded", definition.name)
                continue
            job.stored, job.paused = True, definition.paused
            loaded.append(definition.name)
        return loaded


def _is_async(fn: object) -> bool:
    """An ``async def`` function (through ``functools.wraps`` and ``partial``), or an object
    whose ``__call__`` is one."""
    target = inspect.unwrap(fn) if callable(fn) else fn
    if inspect.iscoroutinefunction(target):
        return True
    if inspect.isroutine(target) or not callable(target):
        return False
    return inspect.iscoroutinefunction(type(target).__call__)
