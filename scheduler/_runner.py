"""Executing one fire of a job: the lock, the run table, the lifecycle events, and the
watchdog that renews the lock of a long run.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio

from eventbus import Event

from ._clock import call_before
from ._context import RunContext, _current_run
from ._events import LockLost, RunFailed, RunSkipped, RunStarted, RunSucceeded
from ._exceptions import LockLostError, RunCancelledError
from ._records import RunRecord, TriggerKind

if TYPE_CHECKING:
    from .abc import Clock, Lease, Lock, RunStore

__all__ = ["RunControl", "RunCounters", "Runner"]

logger = logging.getLogger("scheduler")


class RunControl:
    """How the scheduler reaches into a run in progress: its cancel scope, and why it was
    cancelled (``remove(cancel=True)`` or a lost lock)."""

    __slots__ = ("lost", "reason", "renewing", "scope")

    def __init__(self) -> None:
        self.scope = anyio.CancelScope()
        self.reason: str | None = None
        self.lost: str | None = None
        self.renewing = False

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
        unsure: Callable[[], None] = lambda: None,
    ) -> None:
        self.lock = lock
        self.runs = runs
        self.clock = clock
        self.emit = emit
        self.replica = replica
        self.claim_ttl = claim_ttl
        #: told when a lock call failed: its outcome is unknown, the lock may need settling
        self.unsure = unsure
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
        current: Callable[[], bool] = lambda: True,
        cancelled: str = "the scheduler shut down",
        misfire_grace: float | None = None,
    ) -> RunRecord:
        """Run one fire; never raises except the caller's own cancellation.

        :param current: whether the job is still the registered one; checked once the lock
            is held, so a job removed or replaced meanwhile does not run
        :param cancelled: why the run stopped if the caller's scope cancels it (the error text)
        :param misfire_grace: the job's own grace, when it has one: a fire's claim must outlive
            the latest moment a replica may still run it
        """
        name = base.task_name
        lease: Lease | None = None
        # The lease expires lock_ttl after the acquire *call* began at the latest.
        acquired_at = self.clock.now()
        if self.lock is not None:
            try:
                if base.scheduled_at is not None:
                    ttl = max(lock_ttl, self.claim_ttl, 2 * (misfire_grace or 0.0))
                    if not await self.lock.claim_fire(name, base.scheduled_at, ttl=ttl):
                        return await self.skip(base, "claimed", "another replica took this fire")
                acquired_at = self.clock.now()
                lease = await self.lock.acquire(name, ttl=lock_ttl)
            except Exception as exc:
                logger.exception("job %r: the lock backend failed", name)
                self.unsure()
                return await self.skip(base, "lock-error", f"{type(exc).__name__}: {exc}")
            if lease is None:
                return await self.skip(base, "locked", await self._held_by(name))
        try:
            if not current():
                if lease is not None:
                    await self._release_quietly(name, lease)
                return await self.skip(
                    base, "removed", "the job was removed or replaced before this run started"
                )
            deadline = acquired_at + timedelta(seconds=lock_ttl)
            return await self._run_locked(
                base, fn, lock_ttl, renew, control, lease, deadline, cancelled
            )
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                if lease is not None:
                    await self._release_quietly(name, lease)
            raise

    async def _held_by(self, name: str) -> str:
        """The ``locked`` skip's detail, naming the holder when the lock can tell."""
        detail = "another run holds the job's lock"
        holder = getattr(self.lock, "holder", None)
        if holder is None:
            return detail
        try:
            who = await holder(name)
        except Exception as exc:
            return f"{detail} (its holder could not be read: {type(exc).__name__}: {exc})"
        return f"{detail} (held by {who!r})" if who else f"{detail} (released since)"

    async def _release_quietly(self, name: str, lease: Lease) -> None:
        try:
            await lease.release()
        except Exception:
            logger.exception("job %r: could not release the lock of a run that ended", name)
            self.unsure()

    async def _run_locked(
        self,
        base: RunRecord,
        fn: Callable[[RunContext], Awaitable[Any]],
        lock_ttl: float,
        renew: bool,
        control: RunControl,
        lease: Lease | None,
        deadline: datetime,
        cancelled: str,
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
                await self._call(fn, ctx, control, lease if renew else None, lock_ttl, deadline)
            except Exception as exc:
                error = exc
            except anyio.get_cancelled_exc_class():
                self.counters.failed += 1
                done = replace(
                    record,
                    status="failed",
                    finished_at=self.clock.now(),
                    cursor=ctx.cursor,
                    error=f"cancelled: {cancelled}",
                )
                logger.warning(
                    "job %r was cancelled (trace %s): %s", name, done.trace_id, cancelled
                )
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    await self._save(self.runs.update, done)
                    self._emit_failed(done)
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
        deadline: datetime,
    ) -> None:
        with control.scope:
            if lease is None:
                await fn(ctx)
                return
            control.renewing = True
            error: Exception | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._watchdog, lease, ttl, deadline, ctx.run_id, control)
                try:
                    await fn(ctx)
                except Exception as exc:  # re-raised bare below, not as an ExceptionGroup
                    error = exc
                finally:
                    tg.cancel_scope.cancel()
            if error is not None:
                raise error

    async def _watchdog(
        self, lease: Lease, ttl: float, deadline: datetime, run_id: str, control: RunControl
    ) -> None:
        """Extend the lock every ttl/3; cancel the run before the lock can expire unrenewed.

        ``deadline`` is when the lock expires at the latest (the TTL counted from before the
        call that set it). Each ``extend()`` is given only until ``deadline - margin``, so a
        Redis that stops answering cannot keep the run going past its lock: at that point
        the run is cancelled whatever the backend is doing.
        """
        margin = timedelta(seconds=min(ttl / 10, 1.0))
        period = timedelta(seconds=ttl / 3)
        due = self.clock.now() + period
        while True:
            await self.clock.sleep_until(min(due, deadline - margin))
            before = self.clock.now()
            if before >= deadline - margin:
                control.lost = "the lock could not be renewed before it expired"
                control.cancel("lock lost")
                return
            try:
                in_time, ok = await call_before(self.clock, deadline - margin, lease.extend)
            except Exception as exc:
                logger.warning("lock renewal failed (%s: %s); retrying", type(exc).__name__, exc)
                due = self.clock.now() + period
                continue
            if not in_time:
                continue  # the check at the top cancels the run
            if not ok:
                control.lost = "renewal found the lock expired or held by another owner"
                control.cancel("lock lost")
                return
            deadline = before + timedelta(seconds=ttl)
            due = before + period
            await _quietly(self.runs.touch(run_id, deadline))

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
            self._emit_failed(record)
        lost = control.lost
        if lease is not None and lost is None:
            try:
                if not await lease.release():
                    lost = "released after the lock expired or another owner took it"
            except Exception:
                logger.exception(
                    "job %r: could not release its lock; released once the lock backend "
                    "answers, else it expires by TTL",
                    ctx.name,
                )
                self.unsure()
        if lost is not None:
            record = await self._alarm(record, lost, renewing=control.renewing)
        return record

    def _emit_failed(self, record: RunRecord) -> None:
        self.emit(
            RunFailed(
                job=record.task_name,
                run_id=record.id,
                trace_id=record.trace_id,
                error=record.error or "",
            )
        )

    async def _alarm(self, record: RunRecord, detail: str, *, renewing: bool) -> RunRecord:
        self.counters.lock_lost += 1
        advice = (
            "check the lock backend's health and latency"
            if renewing
            else "raise lock_ttl or use renew=True"
        )
        logger.error(
            "job %r lost its lock (trace %s): %s; another replica may have run it too; %s",
            record.task_name,
            record.trace_id,
            detail,
            advice,
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
