"""The runtime registry of jobs: the decorators, ``add_cron``, ``remove`` and lookups.

:class:`Scheduler` inherits it and hears of every change through two hooks, so the registry
holds no timer or run logic: it only validates and keeps the jobs by name.
"""

from __future__ import annotations

import inspect
import itertools
import logging
from collections.abc import Callable
from typing import Any

from ._cron import CronExpression
from ._exceptions import IntervalTooShortError, JobLookupError
from ._jobs import (
    CronTrigger,
    IntervalTrigger,
    Job,
    JobDefinition,
    JobFunction,
    TimeoutTrigger,
)
from .abc import JobSource

__all__ = ["JobRegistry"]

logger = logging.getLogger("scheduler")

_Trigger = CronTrigger | IntervalTrigger | TimeoutTrigger


class JobRegistry:
    """Jobs by name; the base of :class:`Scheduler`.

    :param min_interval: the floor, in seconds, for user-supplied schedules
    """

    def __init__(self, *, min_interval: float) -> None:
        self.min_interval = min_interval
        self._jobs: dict[str, Job] = {}
        self._generations = itertools.count(1)

    def _job_added(self, job: Job) -> None:
        """Hook: ``job`` was registered (or replaced one of the same name)."""

    def _job_removed(self, job: Job, *, cancel: bool) -> None:
        """Hook: ``job`` was deleted; ``cancel`` asks to cancel its run in progress."""

    def cron(
        self,
        expr: str,
        *,
        name: str | None = None,
        tz: str = "UTC",
        wait_for_completion: bool = True,
        lock_ttl: float = 300.0,
        renew: bool = False,
        misfire_grace: float | None = None,
    ) -> Callable[[JobFunction], JobFunction]:
        """Register the decorated function to fire at the times of ``expr`` in ``tz``.

        :param name: the job's name (default ``module:qualname``)
        :param wait_for_completion: skip (not queue) a fire while the previous run goes on
        :param lock_ttl: seconds the job's lock lives (with a lock)
        :param renew: extend the lock every ``lock_ttl / 3``; cancel the run if that fails
        :param misfire_grace: seconds a fire may be late and still run (default: the
            scheduler's)
        """
        options = _options(wait_for_completion, lock_ttl, renew, misfire_grace)
        return self._decorator(CronTrigger(CronExpression(expr, tz)), name, options)

    def interval(
        self,
        *,
        seconds: float,
        name: str | None = None,
        wait_for_completion: bool = True,
        lock_ttl: float = 300.0,
        renew: bool = False,
        misfire_grace: float | None = None,
    ) -> Callable[[JobFunction], JobFunction]:
        """Register the decorated function to fire every ``seconds``, first one interval
        after the scheduler starts; options as :meth:`cron`."""
        options = _options(wait_for_completion, lock_ttl, renew, misfire_grace)
        return self._decorator(IntervalTrigger(seconds), name, options)

    def timeout(
        self,
        *,
        seconds: float,
        name: str | None = None,
        wait_for_completion: bool = True,
        lock_ttl: float = 300.0,
        renew: bool = False,
        misfire_grace: float | None = None,
    ) -> Callable[[JobFunction], JobFunction]:
        """Register the decorated function to fire once, ``seconds`` after start; options
        as :meth:`cron`."""
        options = _options(wait_for_completion, lock_ttl, renew, misfire_grace)
        return self._decorator(TimeoutTrigger(seconds), name, options)

    def _decorator(
        self, trigger: _Trigger, name: str | None, options: dict[str, Any]
    ) -> Callable[[JobFunction], JobFunction]:
        def register(fn: JobFunction) -> JobFunction:
            qualname = getattr(fn, "__qualname__", type(fn).__qualname__)
            job_name = name or f"{fn.__module__}:{qualname}"
            self._add(Job(name=job_name, fn=fn, trigger=trigger, **options))
            return fn

        return register

    def add_cron(
        self,
        name: str,
        expr: str,
        fn: JobFunction,
        *,
        tz: str = "UTC",
        min_interval: float | None = None,
        wait_for_completion: bool = True,
        lock_ttl: float = 300.0,
        renew: bool = False,
        misfire_grace: float | None = None,
    ) -> Job:
        """Register (or replace) a job from a user-supplied expression, validating it first.

        Nothing is registered when validation fails; a job of the same name is replaced, and
        a run of the old one still in progress counts for ``wait_for_completion``.

        :param min_interval: override the scheduler's floor for this job (seconds); other
            options as :meth:`cron`
        :raises CronSyntaxError: if ``expr`` does not parse
        :raises IntervalTooShortError: if it fires more often than the floor
        :raises zoneinfo.ZoneInfoNotFoundError: if ``tz`` is unknown
        """
        cron = CronExpression(expr, tz)
        floor = self.min_interval if min_interval is None else min_interval
        gap = cron.min_interval().total_seconds()
        if gap < floor:
            raise IntervalTooShortError(name, expr, gap, floor)
        options = _options(wait_for_completion, lock_ttl, renew, misfire_grace)
        job = Job(name=name, fn=fn, trigger=CronTrigger(cron), **options)
        self._add(job)
        return job

    def _add(self, job: Job) -> None:
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
        """The registered jobs, in name order."""
        return [self._jobs[n] for n in sorted(self._jobs)]

    async def load_jobs(
        self, source: JobSource, factory: Callable[[JobDefinition], JobFunction]
    ) -> list[str]:
        """Register every enabled definition from ``source`` (user-supplied: validated and held
        to ``min_interval``); a bad definition is logged at ERROR and skipped.

        :return: the names registered
        """
        loaded = []
        for definition in await source.load():
            if not definition.enabled:
                continue
            try:
                self.add_cron(
                    definition.name, definition.expr, factory(definition), tz=definition.tz
                )
            except Exception:
                logger.exception("job definition %r was not loaded", definition.name)
                continue
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


def _options(
    wait_for_completion: bool, lock_ttl: float, renew: bool, misfire_grace: float | None
) -> dict[str, Any]:
    return {
        "wait_for_completion": wait_for_completion,
        "lock_ttl": lock_ttl,
        "renew": renew,
        "misfire_grace": misfire_grace,
    }
