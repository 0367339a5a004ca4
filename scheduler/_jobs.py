"""Jobs: what runs, on which trigger, with which options; and job definitions kept as data.

Every way of registering a job (the decorators and the ``add_*`` methods) takes the same
keyword options, :class:`JobOptions`; :class:`Job` validates them, so a bad option raises
before anything is registered, with an error that names the argument.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypedDict, get_args

from ._context import RunContext
from ._records import RunRecord, TriggerKind
from ._triggers import AnyTrigger

__all__ = ["CatchUp", "Job", "JobDefinition", "JobFunction", "JobOptions"]

JobFunction = Callable[[RunContext], Awaitable[Any]]

#: what to do at start with the fires missed while no replica was up
CatchUp = Literal["skip", "latest", "all"]


class JobOptions(TypedDict, total=False):
    """The keyword options every registration accepts; see :class:`Job` for each."""

    wait_for_completion: bool
    max_running: int
    lock_ttl: float
    renew: bool
    misfire_grace: float | None
    timeout: float | None
    jitter: float
    catch_up: CatchUp
    max_catch_up: int


@dataclass(slots=True, kw_only=True)
class Job:
    """A registered job: what to run, when, and under which options.

    Durations (``lock_ttl``, ``misfire_grace``, ``timeout``, ``jitter``) are finite numbers of
    seconds, at most 366 days; ``lock_ttl`` is at least a millisecond.

    :param name: unique within a scheduler; also the lock key and the run table's task_name
    :param fn: ``async def fn(run: RunContext)``; what it returns is stored in the run record
    :param trigger: when it fires
    :param max_running: how many runs of it may go on at once (across replicas, with a
        lock); a fire beyond that is skipped (``running``, or ``locked`` on another replica),
        not queued. Default 1
    :param wait_for_completion: ``False`` lifts the limit in this process (the older spelling;
        with a lock, overlapping runs are still ``locked``); not together with ``max_running``
    :param lock_ttl: seconds the job's lock lives; a run longer than this loses it unless
        ``renew`` is set
    :param renew: extend the lock every ``lock_ttl / 3`` and cancel the run if that fails
    :param misfire_grace: seconds a fire may be late and still run (``None``: the
        scheduler's default)
    :param timeout: seconds a run may take; then it is cancelled and recorded as failed
        (``RunTimeoutError``), and its lock released
    :param jitter: up to this many seconds of random delay before each fire runs (spreads
        load); the run keeps its unjittered ``scheduled_at``, which is what replicas claim
    :param catch_up: fires missed while no replica was up, found at start from the last
        scheduled fire in the run table: ``"skip"`` them (default), run the ``"latest"``
        once, or run ``"all"`` in order, at most ``max_catch_up``
    :param max_catch_up: how many missed fires ``catch_up="all"`` runs; the rest are skipped
        with one WARNING and one run record
    :param paused: fires are recorded as skipped (``paused``) until :meth:`Scheduler.resume`;
        the state this process last read or set (``Scheduler.is_paused`` reads where it is
        kept, see ``Scheduler.pause_scope``)
    :param stored: the job comes from the job table, where its paused state lives
    :param last_run: the latest record this scheduler wrote for it (a ``claimed`` skip aside)
    :param next_fire_times: its next fire times in its zone, as :meth:`Scheduler.jobs`
        found them when it listed the job (what ``next_fire_times(name, n)`` gave then)
    """

    name: str
    fn: JobFunction
    trigger: AnyTrigger
    max_running: int = 1
    wait_for_completion: bool = True
    lock_ttl: float = 300.0
    renew: bool = False
    misfire_grace: float | None = None
    timeout: float | None = None
    jitter: float = 0.0
    catch_up: CatchUp = "skip"
    max_catch_up: int = 10
    paused: bool = False
    stored: bool = False
    last_run: RunRecord | None = field(default=None, compare=False)
    next_fire_times: tuple[datetime, ...] = field(default=(), compare=False)
    generation: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a job needs a non-empty name=")
        _check_name(self.name)
        _seconds("lock_ttl", self.lock_ttl, positive=True)
        if self.lock_ttl < MIN_LOCK_TTL:
            raise ValueError(
                f"lock_ttl={self.lock_ttl!r} must be at least {MIN_LOCK_TTL} seconds (a "
                "millisecond: Redis keeps a lock's time to live in milliseconds)"
            )
        _count("max_running", self.max_running)
        _count("max_catch_up", self.max_catch_up)
        if self.timeout is not None:
            _seconds("timeout", self.timeout, positive=True)
        if self.misfire_grace is not None:
            _seconds("misfire_grace", self.misfire_grace)
        _seconds("jitter", self.jitter)
        if self.catch_up not in get_args(CatchUp):
            choices = ", ".join(repr(c) for c in get_args(CatchUp))
            raise ValueError(f"catch_up={self.catch_up!r} must be one of {choices}")
        if not self.wait_for_completion and self.max_running != 1:
            raise ValueError(
                f"job {self.name!r}: pass max_running={self.max_running!r} or "
                "wait_for_completion=False, not both"
            )

    @property
    def next_fire_time(self) -> datetime | None:
        """The first of :attr:`next_fire_times` (APScheduler's ``next_run_time``); ``None``
        when it fires no more, or was not listed by :meth:`Scheduler.jobs`."""
        return self.next_fire_times[0] if self.next_fire_times else None

    @property
    def kind(self) -> TriggerKind:
        """``cron``, ``interval``, ``timeout`` or ``at``."""
        return self.trigger.kind

    @property
    def schedule(self) -> str:
        """The expression, ``every 10s``, ``once, 5s after start`` or ``at <instant>``."""
        return self.trigger.schedule

    @property
    def tz(self) -> str:
        """The zone the schedule is read in."""
        return self.trigger.tz

    @property
    def limit(self) -> int | None:
        """How many runs this process may have going at once (``None``: no limit)."""
        return self.max_running if self.wait_for_completion else None


def _check_name(name: str) -> None:
    """A name every backend can keep: the run table, Redis keys, PostgreSQL (whose text holds
    neither NUL nor a lone surrogate), the console's pages."""
    if "\x00" in name:
        raise ValueError(f"job name {name!r} contains a NUL character; no database keeps it")
    try:
        name.encode()
    except UnicodeEncodeError:
        raise ValueError(
            f"job name {name!r} is not valid Unicode text (a lone surrogate); UTF-8 cannot "
            "encode it"
        ) from None


#: the longest duration an option takes (a year): a lock's TTL, a timeout, a grace, a jitter
MAX_SECONDS = 366 * 24 * 3600
#: the shortest lock_ttl: Redis keeps TTLs in whole milliseconds
MIN_LOCK_TTL = 0.001


def _seconds(name: str, value: object, *, positive: bool = False) -> None:
    """A finite duration from zero (or, ``positive``, above it) to :data:`MAX_SECONDS`: an
    infinite jitter never fires, an infinite TTL is an error at every fire on Redis, and a
    ``bool`` is no duration."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name}={value!r} must be a number of seconds")
    if not math.isfinite(value):
        raise ValueError(f"{name}={value!r} must be a finite number of seconds")
    if positive and value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive number of seconds")
    if value < 0:
        raise ValueError(f"{name}={value!r} must be zero or more seconds")
    if value > MAX_SECONDS:
        raise ValueError(f"{name}={value!r} must be at most {MAX_SECONDS:,} seconds (366 days)")


def _count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a whole number, at least 1")


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDefinition:
    """A job kept as data (a user's reminder), loaded from a job table at start.

    :param name: the job's name (``"reminder:42"``)
    :param expr: a cron expression, held to the scheduler's minimum interval
    :param tz: IANA zone the expression is read in
    :param enabled: disabled definitions are not registered
    :param payload: free text (JSON) for the job function to interpret
    :param paused: registered, but its fires are skipped (``paused``) on every replica
    """

    name: str
    expr: str
    tz: str = "UTC"
    enabled: bool = True
    payload: str | None = None
    paused: bool = False
