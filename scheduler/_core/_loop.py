"""The scheduler: one loop that fires the registered jobs on time.

Its parts: the registry it inherits (``_registry``), the heap (``_timetable``), one fire's
execution (``_runner``), the missed fires to run at start (``_catch_up``). One task sleeps
until the earliest fire; adding or removing a job wakes it. Nothing polls.

The next fire is computed from the *scheduled* time, never from when a run ended, so a
schedule does not drift. A fire missed while the process was blocked (the loop woke more
than ``misfire_grace`` late) is not made up: it is recorded as skipped (``missed``) and the
schedule moves to the next future fire. Fires that fell while no replica was up are the
job's ``catch_up`` policy: skipped (the default), or run at start, read from the run table.

Lateness is measured on the clock's ``monotonic()`` when it has one (``SystemClock``): a
wall-clock step forwards while the loop slept (NTP) does not turn an on-time fire into a
missed one. Fires the step jumped over entirely are late by the wall clock, and run or are
skipped as ``missed`` by the same ``misfire_grace`` rule.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import TracebackType
from typing import Self

import anyio
from anyio.abc import TaskGroup

from eventbus import EventBus

from .._events import BusEmitter
from .._jobs import Job, JobDefinition, JobFunction
from .._records import RunRecord, TriggerKind
from ..abc import Clock, JobSource, Lock, RunStore
from ..backends.local import MemoryRunStore
from ._catch_up import CatchUp, needs_catch_up
from ._clock import SystemClock, call_before
from ._guards import RunControl
from ._registry import JobRegistry
from ._runner import Runner
from ._settle import Settler
from ._tasks import TaskTracker
from ._timetable import Timetable

__all__ = ["Scheduler", "SchedulerStatistics"]

logger = logging.getLogger("scheduler")


@dataclass(frozen=True, slots=True)
class SchedulerStatistics:
    """A snapshot of the scheduler's counters since it was built."""

    jobs: int
    running: int
    started: int
    succeeded: int
    failed: int
    skipped: int
    lock_lost: int


class Scheduler(JobRegistry):
    """Runs jobs on cron, interval and one-shot triggers inside the application's task group.

    :param bus: where ``scheduler.run.*`` lifecycle events go (none are emitted without it)
    :param lock: shared by replicas so that a fire runs once (``None``: no lock, one process)
    :param runs: the run table (default: a :class:`MemoryRunStore`)
    :param clock: the source of time (default: :class:`SystemClock`; tests pass a
        :class:`VirtualClock`)
    :param replica: written into each run record (default ``host:pid``)
    :param misfire_grace: seconds a fire may be late and still run, once (default 1 s: the
        jitter of a busy event loop); a fire later than this is skipped as ``missed``
    :param min_interval: the floor, in seconds, for schedules given to :meth:`add_cron` and
        :meth:`add_interval` and loaded from a job table (user-supplied); code-defined
        decorators are not held to it
    :param shutdown_grace: seconds runs in progress may take to finish on exit before they are
        cancelled (by ``clock``, and at most that long in real time); a run cancelled then
        is recorded and counted as failed and announced as ``scheduler.run.failed``
    :param job_source: job definitions registered on start (and again after a restart); the
        paused state of its jobs is kept there
    :param job_factory: builds the job function for each loaded definition
    """

    def __init__(
        self,
        *,
        bus: EventBus | None = None,
        lock: Lock | None = None,
        runs: RunStore | None = None,
        clock: Clock | None = None,
        replica: str | None = None,
        misfire_grace: float = 1.0,
        min_interval: float = 60.0,
        shutdown_grace: float = 10.0,
        job_source: JobSource | None = None,
        job_factory: Callable[[JobDefinition], JobFunction] | None = None,
    ) -> None:
        if (job_source is None) != (job_factory is None):
            raise ValueError("pass job_source= and job_factory= together, or neither")
        super().__init__(min_interval=min_interval, job_source=job_source)
        self.bus = bus
        self.lock = lock
        self.runs: RunStore = runs if runs is not None else MemoryRunStore()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}"
        self.misfire_grace = misfire_grace
        self.shutdown_grace = shutdown_grace
        self._job_factory = job_factory
        self._timetable = Timetable(self._jobs)
        self._active: dict[str, set[RunControl]] = {}
        self._delayed: set[anyio.CancelScope] = set()  # fires waiting out their jitter
        self._tg: TaskGroup | None = None
        self._wake_scope: anyio.CancelScope | None = None
        self._loop_scope: anyio.CancelScope | None = None
        self._tasks = TaskTracker()
        self._settler = Settler(lock, self.clock)
        self._events = BusEmitter(bus)
        self._runner = Runner(
            lock=lock,
            runs=self.runs,
            clock=self.clock,
            emit=self._events.emit,
            replica=self.replica,
            claim_ttl=max(60.0, misfire_grace * 2),
            unsure=self._settler.unsure,
            recorded=self._recorded,
        )
        self._catch_up = CatchUp(self._runner, self._fire)

    def __repr__(self) -> str:
        return (
            f"Scheduler(jobs={len(self._jobs)}, lock={self.lock!r}, runs={self.runs!r}, "
            f"clock={self.clock!r}, replica={self.replica!r})"
        )

    def _job_added(self, job: Job) -> None:
        if self._tg is not None:
            now = self.clock.now()
            self._schedule(job, now)
            if needs_catch_up(job, now):  # a one-shot whose instant is already past
                self._tasks.spawn(self._catch_up, job, now)
            self._wake()

    def _job_removed(self, job: Job, *, cancel: bool) -> None:
        self._wake()
        if cancel:
            for control in self._active.get(job.name, ()):
                control.cancel("job removed")

    def _pause_store(self) -> object:
        return self.runs

    def _recorded(self, record: RunRecord) -> None:
        job = self._jobs.get(record.task_name)
        if job is not None:
            job.last_run = record

    # -- running now ----------------------------------------------------------------------------

    async def trigger(self, name: str) -> RunRecord:
        """Run the job now, through the same lock and code path, with trigger ``manual``.

        Works whether or not the loop is running, and whether or not the job is paused;
        returns the finished (or skipped) record.

        :raises JobLookupError: if no job has that name
        """
        job = self.get(name)
        return await self._execute(
            job, "manual", None, cancelled="the caller of trigger() was cancelled"
        )

    def jobs(self, *, upcoming: int = 1) -> list[Job]:
        """The registered jobs, in name order, each with its ``next_fire_times``: the next
        *upcoming* fire times in its zone, what :meth:`next_fire_times` gives now (and the
        CLI's ``jobs`` prints); ``next_fire_time`` is the first. Also each job's ``kind``,
        ``schedule``, ``tz``, ``paused`` flag and ``last_run``. Each is a copy made now (the
        registry's job, :meth:`get`, holds no fire times: they would go stale).

        :raises ValueError: if *upcoming* is less than 1
        """
        _check_n(upcoming)
        return [
            dataclasses.replace(
                job, next_fire_times=tuple(self.next_fire_times(job.name, upcoming))
            )
            for job in super().jobs()
        ]

    def next_fire_times(self, name: str, n: int = 5) -> list[datetime]:
        """The next ``n`` fire times of job ``name``, in its zone: from the loop's timetable
        while the scheduler runs, else as if it started now.

        :raises JobLookupError: if no job has that name
        :raises ValueError: if ``n`` is less than 1
        """
        job = self.get(name)
        _check_n(n)
        upcoming: list[datetime] = []
        fire = self._timetable.next_for(job) if self._tg is not None else None
        if fire is None and self._tg is None:
            fire = job.trigger.first(self.clock.now())
        while fire is not None and len(upcoming) < n:
            upcoming.append(fire.astimezone(job.trigger.zone))
            fire = job.trigger.next(fire)
        return upcoming

    @property
    def running(self) -> bool:
        """Whether the loop runs: between entering ``async with`` and leaving it (or
        :meth:`aclose`)."""
        return self._tg is not None

    def statistics(self) -> SchedulerStatistics:
        c = self._runner.counters
        return SchedulerStatistics(
            jobs=len(self._jobs),
            running=sum(len(s) for s in self._active.values()),
            started=c.started,
            succeeded=c.succeeded,
            failed=c.failed,
            skipped=c.skipped,
            lock_lost=c.lock_lost,
        )

    def _is_current(self, job: Job) -> bool:
        return self._jobs.get(job.name) is job and job.generation >= 0

    async def _fire(
        self, job: Job, kind: TriggerKind, scheduled_at: datetime, *, catching_up: bool = False
    ) -> None:
        """A scheduled fire: dropped if the job was removed or replaced since it was due;
        skipped if it is paused; run after its jitter (a missed fire caught up: at once)."""
        if not self._is_current(job):
            return
        if await self.is_paused(job):
            base = self._runner.new_record(job.name, kind, scheduled_at)
            detail = f"the job is paused; resume it with resume({job.name!r})"
            await self._runner.skip_fire(job, base, "paused", detail)  # one record per fire
            return
        if job.jitter and not catching_up:
            with anyio.CancelScope() as delay:
                self._delayed.add(delay)
                try:
                    await self.clock.sleep(random.uniform(0, job.jitter))
                finally:
                    self._delayed.discard(delay)
            if delay.cancelled_caught:
                base = self._runner.new_record(job.name, kind, scheduled_at)
                detail = "the scheduler stopped while this fire waited out its jitter"
                await self._runner.skip(base, "stopped", detail)
                return
        await self._execute(
            job, kind, scheduled_at, cancelled="the scheduler shut down", catching_up=catching_up
        )

    async def _execute(
        self,
        job: Job,
        kind: TriggerKind,
        scheduled_at: datetime | None,
        *,
        cancelled: str,
        catching_up: bool = False,
    ) -> RunRecord:
        base = self._runner.new_record(job.name, kind, scheduled_at)
        active = self._active.setdefault(job.name, set())
        if job.limit is not None and len(active) >= job.limit:
            detail = (
                "the previous run is still going"
                if job.limit == 1
                else f"max_running={job.limit} runs are still going"
            )
            return await self._runner.skip(base, "running", detail)
        control = RunControl()
        active.add(control)
        try:
            return await self._runner.execute(
                base=base,
                job=job,
                control=control,
                current=lambda: self._is_current(job),
                cancelled=cancelled,
                catching_up=catching_up,
            )
        finally:
            active.discard(control)
            if not active:
                self._active.pop(job.name, None)

    async def wait_idle(self) -> None:
        """Wait until nothing the loop started (runs, skip records) is in progress.

        For tests on a virtual clock whose stores do real I/O (SQL in a thread): the clock
        cannot see that work, so step with ``await clock.advance(n); await sched.wait_idle()``.
        """
        await self._tasks.wait_idle()

    # -- the loop -------------------------------------------------------------------------------

    def _schedule(self, job: Job, now: datetime) -> None:
        first = job.trigger.first(now)
        if first is not None:
            self._timetable.push(first, job)

    def _wake(self) -> None:
        if self._wake_scope is not None:
            self._wake_scope.cancel()

    async def _loop(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        now = self.clock.now()
        for job in self._jobs.values():
            self._schedule(job, now)
            if needs_catch_up(job, now):
                self._tasks.spawn(self._catch_up, job, now)
        task_status.started()
        monotonic: Callable[[], float] | None = getattr(self.clock, "monotonic", None)
        step = timedelta(0)
        while True:
            self._fire_due(self.clock.now(), step)
            wall, mono = self.clock.now(), monotonic() if monotonic else 0.0
            with anyio.CancelScope() as scope:
                self._wake_scope = scope
                earliest = self._timetable.earliest()
                if earliest is not None:
                    await self.clock.sleep_until(earliest)
                else:
                    await anyio.sleep_forever()
            self._wake_scope = None
            if monotonic is not None:
                # How far the wall clock ran ahead of the monotonic one while we slept.
                ahead = (self.clock.now() - wall) - timedelta(seconds=monotonic() - mono)
                step = max(ahead, timedelta(0))

    def _fire_due(self, wall: datetime, step: timedelta = timedelta(0)) -> None:
        """Fire every entry due by ``wall``; lateness is judged at ``wall - step``, the time
        by the monotonic clock (a forward wall-clock step is not lateness)."""
        now = wall - step
        while (due_job := self._timetable.pop_due(wall)) is not None:
            due, job = due_job
            grace = self.misfire_grace if job.misfire_grace is None else job.misfire_grace
            following = job.trigger.next(due)
            run_at: datetime | None = due if (now - due).total_seconds() <= grace else None
            if following is not None and following <= now:
                # Stalled past several fires: run the latest within the grace once, if any.
                window = now - timedelta(seconds=grace, microseconds=1)
                candidate = job.trigger.after(due, window)
                run_at = candidate if candidate is not None and candidate <= now else None
                following = job.trigger.after(due, now)
            if run_at is None or run_at != due:
                base = self._runner.new_record(job.name, job.trigger.kind, due)
                detail = (
                    f"fire(s) from {due.isoformat()} missed; woke at {now.isoformat()}, "
                    f"beyond misfire_grace={grace:g}s; next at "
                    f"{following.isoformat() if following else 'never'}"
                )
                self._tasks.spawn(self._runner.skip, base, "missed", detail)
            if following is not None:
                self._timetable.push(following, job)
            if run_at is not None:
                self._tasks.spawn(self._fire, job, job.trigger.kind, run_at)

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise RuntimeError("this scheduler is already running; enter 'async with' once")
        if self._job_source is not None and self._job_factory is not None:
            await self.load_jobs(self._job_source, self._job_factory)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = self._tasks.tg = tg
        self._loop_scope = anyio.CancelScope()
        try:
            await tg.start(self._run_loop)
            tg.start_soon(self._settler.run)
        except BaseException:
            self._tg = None
            await tg.__aexit__(None, None, None)
            raise
        return self

    async def _run_loop(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        assert self._loop_scope is not None
        with self._loop_scope:
            await self._loop(task_status)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg = self._tg
        assert tg is not None and self._loop_scope is not None
        self._loop_scope.cancel()  # no new fires; runs in progress get the grace period
        for delay in self._delayed:  # fires still waiting out their jitter: not started
            delay.cancel()
        if self._tasks.busy:
            # The grace ends by the injected clock (a test advances it), and by real time too
            # so that a virtual clock nobody advances cannot hold the exit forever.
            grace_ends = self.clock.now() + timedelta(seconds=self.shutdown_grace)
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.shutdown_grace):
                await call_before(self.clock, grace_ends, self.wait_idle)
        await self._settler.last_try()
        tg.cancel_scope.cancel()
        try:
            return await tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = self._tasks.tg = None
            self._timetable.clear()

    async def aclose(self) -> None:
        """Stop as leaving ``async with`` would (the grace period included); nothing if it is
        not running. Call it from the task that entered: the loop's task group lives there."""
        if self._tg is not None:
            await self.__aexit__(None, None, None)

    async def run(self) -> None:
        """Run until cancelled (``tg.start_soon(sched.run)`` in the application)."""
        async with self:
            await anyio.sleep_forever()


def _check_n(n: object) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r} must be a whole number, at least 1")
