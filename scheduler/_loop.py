"""The scheduler: one loop that fires the registered jobs on time.

The registry it inherits lives in ``_registry``; the execution of one fire in ``_runner``.

One task keeps a heap of ``(fire_time, seq, job_name, generation)`` and sleeps until the
earliest entry; adding or removing a job cancels that sleep so the loop looks again. Nothing
polls, and 10,000 jobs are 10,000 heap entries, not 10,000 sleeping tasks. Replacing or
removing a job bumps its generation, which turns its old heap entries into no-ops.

The next fire is computed from the *scheduled* time, never from when a run ended, so a
schedule does not drift. A fire missed while the process was blocked (the loop woke more
than ``misfire_grace`` late) is not made up: it is recorded as skipped (``missed``) and the
schedule moves to the next future fire. Fires that fell while the process was down are
not seen at all: the first fire after a start is computed from the start time.

Lateness is measured on the clock's ``monotonic()`` when it has one (``SystemClock``): a
wall-clock step forwards while the loop slept (NTP) does not turn an on-time fire into a
missed one. Fires the step jumped over entirely are late by the wall clock, and run or are
skipped as ``missed`` by the same ``misfire_grace`` rule.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup

from eventbus import Event, EventBus

from ._clock import SystemClock, call_before
from ._events import register_events
from ._jobs import Job, JobDefinition, JobFunction
from ._records import RunRecord, TriggerKind
from ._registry import JobRegistry
from ._runner import RunControl, Runner
from .abc import Clock, JobSource, Lock, RunStore
from .backends.local import MemoryRunStore

__all__ = ["Scheduler", "SchedulerStatistics"]

logger = logging.getLogger("scheduler")

#: seconds between attempts to settle a lock whose backend did not answer
SETTLE_RETRY = 0.1


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
        loaded from a job table (user-supplied); code-defined decorators are not held to it
    :param shutdown_grace: seconds runs in progress may take to finish on exit before they are
        cancelled (by ``clock``, and at most that long in real time); a run cancelled then
        is recorded and counted as failed and announced as ``scheduler.run.failed``
    :param job_source: job definitions registered on start (and again after a restart)
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
        super().__init__(min_interval=min_interval)
        self.bus = bus
        self.lock = lock
        self.runs: RunStore = runs if runs is not None else MemoryRunStore()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}"
        self.misfire_grace = misfire_grace
        self.shutdown_grace = shutdown_grace
        self._job_source = job_source
        self._job_factory = job_factory
        self._heap: list[tuple[datetime, int, str, int]] = []
        self._seq = itertools.count()
        self._active: dict[str, set[RunControl]] = {}
        self._tg: TaskGroup | None = None
        self._wake_scope: anyio.CancelScope | None = None
        self._loop_scope: anyio.CancelScope | None = None
        self._quiet: anyio.Event | None = None
        self._busy = 0
        self._unsettled = anyio.Event()
        self._settling = False
        self._muted: set[type[Event]] = set()
        self._prepare_bus()
        self._runner = Runner(
            lock=lock,
            runs=self.runs,
            clock=self.clock,
            emit=self._emit,
            replica=self.replica,
            claim_ttl=max(60.0, misfire_grace * 2),
            unsure=self._unsettled.set,
        )

    def __repr__(self) -> str:
        return (
            f"Scheduler(jobs={len(self._jobs)}, lock={self.lock!r}, runs={self.runs!r}, "
            f"clock={self.clock!r}, replica={self.replica!r})"
        )

    def _job_added(self, job: Job) -> None:
        if self._tg is not None:
            self._schedule(job, self.clock.now())
            self._wake()

    def _job_removed(self, job: Job, *, cancel: bool) -> None:
        self._wake()
        if cancel:
            for control in self._active.get(job.name, ()):
                control.cancel("job removed")

    # -- running now ----------------------------------------------------------------------------

    async def trigger(self, name: str) -> RunRecord:
        """Run the job now, through the same lock and code path, with trigger ``manual``.

        Works whether or not the loop is running; returns the finished (or skipped) record.

        :raises JobLookupError: if no job has that name
        """
        job = self.get(name)
        return await self._execute(
            job, "manual", None, cancelled="the caller of trigger() was cancelled"
        )

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

    async def _fire(self, job: Job, kind: TriggerKind, scheduled_at: datetime) -> None:
        """A scheduled fire: dropped if the job was removed or replaced since it was due."""
        if self._is_current(job):
            await self._execute(job, kind, scheduled_at, cancelled="the scheduler shut down")

    async def _execute(
        self, job: Job, kind: TriggerKind, scheduled_at: datetime | None, *, cancelled: str
    ) -> RunRecord:
        base = self._runner.new_record(job.name, kind, scheduled_at)
        active = self._active.setdefault(job.name, set())
        if job.wait_for_completion and active:
            return await self._runner.skip(base, "running", "the previous run is still going")
        control = RunControl()
        active.add(control)
        try:
            return await self._runner.execute(
                base=base,
                fn=job.fn,
                lock_ttl=job.lock_ttl,
                renew=job.renew,
                control=control,
                current=lambda: self._is_current(job),
                cancelled=cancelled,
                misfire_grace=job.misfire_grace,
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
        while self._busy:
            if self._quiet is None or self._quiet.is_set():
                self._quiet = anyio.Event()
            await self._quiet.wait()

    def _spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        assert self._tg is not None
        self._busy += 1
        self._tg.start_soon(self._tracked, fn, *args)

    async def _tracked(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        try:
            await fn(*args)
        finally:
            self._busy -= 1
            if not self._busy and self._quiet is not None:
                self._quiet.set()

    # -- the loop -------------------------------------------------------------------------------

    def _schedule(self, job: Job, now: datetime) -> None:
        first = job.trigger.first(now)
        if first is not None:
            self._push(first, job)

    def _push(self, when: datetime, job: Job) -> None:
        entry = (when.astimezone(UTC), next(self._seq), job.name, job.generation)
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self._jobs) + 64:
            self._heap = [e for e in self._heap if self._current(e) is not None]
            heapq.heapify(self._heap)

    def _current(self, entry: tuple[datetime, int, str, int]) -> Job | None:
        job = self._jobs.get(entry[2])
        return job if job is not None and job.generation == entry[3] else None

    def _wake(self) -> None:
        if self._wake_scope is not None:
            self._wake_scope.cancel()

    async def _loop(self, task_status: anyio.abc.TaskStatus[None]) -> None:
        now = self.clock.now()
        for job in self._jobs.values():
            self._schedule(job, now)
        task_status.started()
        monotonic: Callable[[], float] | None = getattr(self.clock, "monotonic", None)
        step = timedelta(0)
        while True:
            self._fire_due(self.clock.now(), step)
            wall, mono = self.clock.now(), monotonic() if monotonic else 0.0
            with anyio.CancelScope() as scope:
                self._wake_scope = scope
                if self._heap:
                    await self.clock.sleep_until(self._heap[0][0])
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
        while self._heap and self._heap[0][0] <= wall:
            entry = heapq.heappop(self._heap)
            job = self._current(entry)
            if job is None:
                continue
            due = entry[0]
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
                self._spawn(self._runner.skip, base, "missed", detail)
            if following is not None:
                self._push(following, job)
            if run_at is not None:
                self._spawn(self._fire, job, job.trigger.kind, run_at)

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise RuntimeError("this scheduler is already running; enter 'async with' once")
        if self._job_source is not None and self._job_factory is not None:
            await self.load_jobs(self._job_source, self._job_factory)
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        self._loop_scope = anyio.CancelScope()
        self._quiet = None
        self._unsettled = anyio.Event()
        self._runner.unsure = self._unsettled.set
        if getattr(self.lock, "unsettled", 0):  # left by an earlier run of this scheduler
            self._unsettled.set()
        try:
            await tg.start(self._run_loop)
            tg.start_soon(self._settle_loop)
        except BaseException:
            self._tg = None
            await tg.__aexit__(None, None, None)
            raise
        return self

    async def _settle_loop(self) -> None:
        """After a lock call whose outcome is unknown, settle the lock until it reports
        nothing left, so that a lock taken by an unanswered command is voided as soon as
        the backend answers again (not at the lock's next use, nor after its TTL)."""
        settle: Callable[[], Awaitable[int]] | None = getattr(self.lock, "settle", None)
        if settle is None:
            return
        while True:
            await self._unsettled.wait()
            self._unsettled = anyio.Event()
            self._runner.unsure = self._unsettled.set
            self._settling = True
            while await settle():
                await self.clock.sleep(SETTLE_RETRY)
            self._settling = False

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
        if self._busy:
            # The grace ends by the injected clock (a test advances it), and by real time too
            # so that a virtual clock nobody advances cannot hold the exit forever.
            grace_ends = self.clock.now() + timedelta(seconds=self.shutdown_grace)
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.shutdown_grace):
                await call_before(self.clock, grace_ends, self.wait_idle)
        settle: Callable[[], Awaitable[int]] | None = getattr(self.lock, "settle", None)
        if settle is not None and (self._settling or self._unsettled.is_set()):
            # one last, short attempt; what is still unresolved after it expires by its TTL
            with anyio.CancelScope(shield=True), anyio.move_on_after(1):
                await settle()
        tg.cancel_scope.cancel()
        try:
            return await tg.__aexit__(exc_type, exc, tb)
        finally:
            self._tg = None
            self._heap.clear()

    async def run(self) -> None:
        """Run until cancelled (``tg.start_soon(sched.run)`` in the application)."""
        async with self:
            await anyio.sleep_forever()

    # -- events ---------------------------------------------------------------------------------

    def _prepare_bus(self) -> None:
        """Make the bus's registry know the scheduler's events, or mute the clashing ones."""
        if self.bus is None:
            return
        for cls in register_events(self.bus.registry):
            name = cls.__event_name__
            logger.debug("bus registry declares %r differently; not emitting it", name)
            self._muted.add(cls)

    def _emit(self, event: Event) -> None:
        if self.bus is None or type(event) in self._muted:
            return
        try:
            self.bus.emit(event)
        except Exception:
            logger.warning("could not emit %r on the bus", event.event_name, exc_info=True)
