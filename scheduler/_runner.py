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
