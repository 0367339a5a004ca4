"""One run of a job: its record in the run table, the context the job function gets, and
the trace id that ties the run's log lines together.

The trace id lives in a :class:`~contextvars.ContextVar`, so every log record emitted while a
run is in progress (by the job, or by libraries it calls) can carry it: add
:class:`TraceIdFilter` to a handler and put ``%(trace_id)s`` in its format.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import anyio

from eventbus import Event

from ._events import LockLost, RunFailed, RunSkipped, RunStarted, RunSucceeded
from ._exceptions import LockLostError, RunCancelledError

if TYPE_CHECKING:
    from .abc import Clock, Lease, Lock, RunStore

__all__ = [
    "RunContext",
    "RunControl",
    "RunCounters",
    "RunRecord",
    "Runner",
    "abandoned_error",
    "RunStatus",
    "TraceIdFilter",
    "TriggerKind",
    "current_run",
    "current_trace_id",
]

RunStatus = Literal["running", "succeeded", "failed", "skipped", "abandoned"]
TriggerKind = Literal["cron", "interval", "timeout", "manual"]

logger = logging.getLogger("scheduler")

_current_run: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "scheduler_run", default=None
)


def current_run() -> RunContext | None:
    """The run whose code is executing in this task, if any."""
    return _current_run.get()


def current_trace_id() -> str | None:
    """The trace id of the run executing in this task, if any."""
    run = _current_run.get()
    return None if run is None else run.trace_id


def abandoned_error(expires_at: datetime | None) -> str:
    """The error text of a run found ``running`` after its lock expired."""
    when = expires_at.isoformat() if expires_at else "?"
    return f"abandoned: still 'running' after its lock expired at {when}; the process died"


class TraceIdFilter(logging.Filter):
    """Adds ``record.trace_id`` (the current run's, or ``"-"``) to every log record.

    Attach it to a handler, not a logger, so that records from child loggers get it too.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            record.trace_id = current_trace_id() or "-"
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One row of the run table: a run, or a fire that was skipped.

    :param id: unique run id
    :param task_name: the job's name
    :param trigger: what started it: ``cron``, ``interval``, ``timeout`` or ``manual``
    :param status: ``running``, ``succeeded``, ``failed``, ``skipped``, or ``abandoned``
        (left ``running`` by a process that died; found stale after its lock TTL)
    :param scheduled_at: the fire time this run belongs to (``None`` for a manual run)
    :param started_at: when the run (or the skip) was recorded
    :param finished_at: when it ended
    :param expires_at: when the run's lock expires; a ``running`` row past it is stale
    :param cursor: the last value passed to :meth:`RunContext.checkpoint` (JSON-serialisable)
    :param error: ``"Type: message"`` of a failure, or why a fire was skipped
    :param trace_id: the id in every log line of the run
    :param replica: which process recorded it (host:pid unless configured)
    :param fence: the fencing token of the run's lock acquisition
    :param lock_lost: the run's lock expired or was taken while it ran (an alarm)
    """

    id: str
    task_name: str
    trigger: TriggerKind
    status: RunStatus
    scheduled_at: datetime | None
    started_at: datetime
    finished_at: datetime | None = None
    expires_at: datetime | None = None
    cursor: Any = None
    error: str | None = None
    trace_id: str = ""
    replica: str = ""
    fence: int | None = None
    lock_lost: bool = False


class RunContext:
    """What a job function receives: who it is, why it runs, and where to resume.

    :param name: the job's name
    :param trigger: what started the run
    :param trace_id: the id in every log line of the run
    :param scheduled_at: the fire time (``None`` for a manual run)
    :param cursor: where the previous run stopped, if it failed or died; else ``None``
    :param fence: the fencing token of this acquisition of the job's lock (``None`` without a
        lock); pass it along with writes so that storage can reject a stale holder
    """

    __slots__ = (
        "_save",
        "cursor",
        "fence",
        "name",
        "run_id",
        "scheduled_at",
        "trace_id",
        "trigger",
    )

    def __init__(
        self,
        *,
        name: str,
        trigger: TriggerKind,
        run_id: str,
        trace_id: str,
        scheduled_at: datetime | None,
        cursor: Any,
        fence: int | None,
        save: Callable[[Any], Awaitable[None]],
    ) -> None:
        self.name = name
        self.trigger = trigger
        self.run_id = run_id
        self.trace_id = trace_id
        self.scheduled_at = scheduled_at
        self.cursor = cursor
        self.fence = fence
        self._save = save

    def __repr__(self) -> str:
        return (
            f"RunContext(name={self.name!r}, trigger={self.trigger!r}, "
            f"trace_id={self.trace_id!r}, cursor={self.cursor!r}, fence={self.fence!r})"
        )

    async def checkpoint(self, cursor: Any) -> None:
        """Persist ``cursor`` in the run record; a retry after a failure starts from it.

        :param cursor: a JSON-serialisable value (an id, an offset, a timestamp string)
        """
        self.cursor = cursor
        await self._save(cursor)


# -- executing one run -------------------------------------------------------------------------


class RunControl:
    """How the scheduler reaches into a run in progress: its cancel scope, and why it was
    cancelled (``remove(cancel=True)`` or a lost lock)."""

    __slots__ = ("lost", "reason", "scope")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.reason: str | None = None
        self.lost: str | None = None

    def cancel(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.scope.cancel()


@dataclass(slots=True)
class RunCounters:
    """Running totals kept by the runner, read by ``Scheduler.statistics()``."""

    started: int = 0
    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    lock_lost: int = 0


class Runner:
    """Runs one fire of a job through the lock, the run table and the bus; never raises.

    Every step that talks to a backend is wrapped: a broken store or lock is logged at ERROR
    and the run (or the skip) goes on being reported, so nothing escapes into the loop.
    """

    def __init__(
        self,
        *,
        lock: Lock | None,
        runs: RunStore,
        clock: Clock,
        emit: Callable[[Event], None],
        replica: str,
        claim_ttl: float,
    ) -> None:
        self.lock = lock
        self.runs = runs
        self.clock = clock
        self.emit = emit
        self.replica = replica
        self.claim_ttl = claim_ttl
        self.counters = RunCounters()

    async def skip(self, base: RunRecord, reason: str, detail: str) -> RunRecord:
        """Record a fire that did not run (``running``, ``locked``, ``claimed``, ``missed``)."""
        rec = replace(
            base, status="skipped", finished_at=base.started_at, error=f"{reason}: {detail}"
        )
        self.counters.skipped += 1
        level = logging.DEBUG if reason == "claimed" else logging.INFO
        if reason in ("missed", "lock-error"):
            level = logging.WARNING
        logger.log(level, "job %r skipped a fire (%s: %s)", base.task_name, reason, detail)
        await self._save(self.runs.add, rec)
        self.emit(
            RunSkipped(
                job=rec.task_name,
                run_id=rec.id,
                trigger=rec.trigger,
                scheduled_at=rec.scheduled_at,
                reason=reason,
            )
        )
        return rec

    def new_record(self, name: str, kind: TriggerKind, scheduled_at: datetime | None) -> RunRecord:
        return RunRecord(
            id=uuid.uuid4().hex,
            task_name=name,
            trigger=kind,
            status="running",
            scheduled_at=scheduled_at,
            started_at=self.clock.now(),
            trace_id=uuid.uuid4().hex[:16],
            replica=self.replica,
        )

    async def execute(
        self,
        *,
        base: RunRecord,
        fn: Callable[[RunContext], Awaitable[Any]],
        lock_ttl: float,
        renew: bool,
        control: RunControl,
    ) -> RunRecord:
        name = base.task_name
        lease: Lease | None = None
        if self.lock is not None:
            try:
                if base.scheduled_at is not None:
                    ttl = max(lock_ttl, self.claim_ttl)
                    if not await self.lock.claim_fire(name, base.scheduled_at, ttl=ttl):
                        return await self.skip(base, "claimed", "another replica took this fire")
                lease = await self.lock.acquire(name, ttl=lock_ttl)
            except Exception as exc:
                logger.exception("job %r: the lock backend failed", name)
                return await self.skip(base, "lock-error", f"{type(exc).__name__}: {exc}")
            if lease is None:
                return await self.skip(base, "locked", "another run holds the job's lock")
        try:
            return await self._run_locked(base, fn, lock_ttl, renew, control, lease)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                if lease is not None:
                    await _quietly(lease.release())
            raise

    async def _run_locked(
        self,
        base: RunRecord,
        fn: Callable[[RunContext], Awaitable[Any]],
        lock_ttl: float,
        renew: bool,
        control: RunControl,
        lease: Lease | None,
    ) -> RunRecord:
        name, now = base.task_name, self.clock.now()
        cursor: Any = None
        try:
            await self.runs.abandon_stale(name, now)
            cursor = await self.runs.resume_cursor(name)
        except Exception:
            logger.exception(
                "job %r: could not read the run table; starting without a cursor", name
            )
        record = replace(
            base,
            started_at=now,
            expires_at=now + timedelta(seconds=lock_ttl),
            cursor=cursor,
            fence=None if lease is None else lease.fence,
        )
        await self._save(self.runs.add, record)
        ctx = RunContext(
            name=name,
            trigger=record.trigger,
            run_id=record.id,
            trace_id=record.trace_id,
            scheduled_at=record.scheduled_at,
            cursor=cursor,
            fence=record.fence,
            save=lambda c: self.runs.checkpoint(record.id, c),
        )
        token = _current_run.set(ctx)
        try:
            self.counters.started += 1
            self.emit(
                RunStarted(
                    job=name,
                    run_id=record.id,
                    trigger=record.trigger,
                    trace_id=record.trace_id,
                    scheduled_at=record.scheduled_at,
                    replica=self.replica,
                )
            )
            error: BaseException | None = None
            try:
                await self._call(fn, ctx, control, lease if renew else None, lock_ttl)
            except Exception as exc:
                error = exc
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    done = replace(
                        record,
                        status="failed",
                        finished_at=self.clock.now(),
                        cursor=ctx.cursor,
                        error="cancelled: the scheduler shut down",
                    )
                    await self._save(self.runs.update, done)
                raise
            if error is None and control.scope.cancelled_caught:
                error = (
                    LockLostError(name, control.lost)
                    if control.lost
                    else RunCancelledError(name, control.reason or "cancelled")
                )
            return await self._finish(record, ctx, error, control, lease)
        finally:
            _current_run.reset(token)

    async def _call(
        self,
        fn: Callable[[RunContext], Awaitable[Any]],
        ctx: RunContext,
        control: RunControl,
        lease: Lease | None,
        ttl: float,
    ) -> None:
        with control.scope:
            if lease is None:
                await fn(ctx)
                return
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watchdog, lease, ttl, ctx.run_id, control)
                try:
                    await fn(ctx)
                finally:
                    tg.cancel_scope.cancel()

    async def _watchdog(self, lease: Lease, ttl: float, run_id: str, control: RunControl) -> None:
        """Extend the lock every ttl/3; cancel the run once it cannot be shown to be ours."""
        confirmed = self.clock.now()
        while True:
            await self.clock.sleep(ttl / 3)
            try:
                ok = await lease.extend()
            except Exception as exc:
                if (self.clock.now() - confirmed).total_seconds() < ttl:
                    logger.warning("lock renewal failed (%s); retrying", exc)
                    continue
                control.lost = f"renewal failed for a whole TTL ({type(exc).__name__}: {exc})"
                control.cancel("lock lost")
                return
            if not ok:
                control.lost = "renewal found the lock expired or held by another owner"
                control.cancel("lock lost")
                return
            confirmed = self.clock.now()
            await _quietly(self.runs.touch(run_id, confirmed + timedelta(seconds=ttl)))

    async def _finish(
        self,
        record: RunRecord,
        ctx: RunContext,
        error: BaseException | None,
        control: RunControl,
        lease: Lease | None,
    ) -> RunRecord:
        finished = self.clock.now()
        if error is None:
            record = replace(record, status="succeeded", finished_at=finished, cursor=ctx.cursor)
            self.counters.succeeded += 1
        else:
            text = f"{type(error).__name__}: {error}"
            record = replace(
                record, status="failed", finished_at=finished, cursor=ctx.cursor, error=text
            )
            self.counters.failed += 1
            logger.error(
                "job %r failed (trace %s): %s",
                record.task_name,
                record.trace_id,
                text,
                exc_info=error,
            )
        await self._save(self.runs.update, record)
        if error is None:
            duration = (finished - record.started_at).total_seconds()
            self.emit(
                RunSucceeded(
                    job=record.task_name,
                    run_id=record.id,
                    trace_id=record.trace_id,
                    duration=duration,
                )
            )
        else:
            self.emit(
                RunFailed(
                    job=record.task_name,
                    run_id=record.id,
                    trace_id=record.trace_id,
                    error=record.error or "",
                )
            )
        lost = control.lost
        if lease is not None and lost is None:
            try:
                if not await lease.release():
                    lost = "released after the lock expired or another owner took it"
            except Exception:
                logger.exception("job %r: could not release its lock; it expires by TTL", ctx.name)
        if lost is not None:
            record = await self._alarm(record, lost)
        return record

    async def _alarm(self, record: RunRecord, detail: str) -> RunRecord:
        self.counters.lock_lost += 1
        logger.error(
            "job %r lost its lock (trace %s): %s; another replica may have run it too; "
            "raise lock_ttl or use renew=True",
            record.task_name,
            record.trace_id,
            detail,
        )
        record = replace(record, lock_lost=True)
        await self._save(self.runs.update, record)
        self.emit(
            LockLost(
                job=record.task_name, run_id=record.id, trace_id=record.trace_id, detail=detail
            )
        )
        return record

    async def _save(self, op: Callable[[RunRecord], Awaitable[None]], record: RunRecord) -> None:
        try:
            await op(record)
        except Exception:
            logger.exception(
                "could not write run %s of %r to the run table", record.id, record.task_name
            )


async def _quietly(aw: Awaitable[Any]) -> None:
    try:
        await aw
    except Exception:
        logger.exception("scheduler backend call failed")
