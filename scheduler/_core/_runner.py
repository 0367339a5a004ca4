"""Executing one fire of a job: the claim and the lock, the run table, the result, and the
lifecycle events. What runs beside the job function (renewal, timeout) is in ``_guards``.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio

from eventbus import Event

from .._context import RunContext, _current_run
from .._events import LockLost, RunFailed, RunSkipped, RunStarted, RunSucceeded
from .._exceptions import LockLostError, RunCancelledError, RunTimeoutError
from .._jobs import Job
from .._records import RunRecord, TriggerKind
from .._results import encode_result
from ._guards import Renewal, RunControl, call_guarded
from ._locking import LockStep

if TYPE_CHECKING:
    from ..abc import Clock, Lease, Lock, RunStore

__all__ = ["RunCounters", "Runner"]

logger = logging.getLogger("scheduler")


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
        recorded: Callable[[RunRecord], None] = lambda record: None,
    ) -> None:
        self.runs = runs
        self.clock = clock
        self.emit = emit
        self.replica = replica
        self.claim_ttl = claim_ttl
        #: told when a lock call failed: its outcome is unknown, the lock may need settling
        self.unsure = unsure
        #: told of every record written (``Job.last_run``), a ``claimed`` skip aside
        self.recorded = recorded
        self.counters = RunCounters()
        self.lock = lock

    @property
    def lock(self) -> Lock | None:
        return None if self.locking is None else self.locking.lock

    @lock.setter
    def lock(self, lock: Lock | None) -> None:
        self.locking = (
            None
            if lock is None
            else LockStep(
                lock, self.clock, claim_ttl=self.claim_ttl, unsure=self._unsure, runs=self.runs
            )
        )

    def _unsure(self) -> None:
        self.unsure()

    async def skip(self, base: RunRecord, reason: str, detail: str) -> RunRecord:
        """Record a fire that did not run (``running``, ``locked``, ``claimed``, ``missed``,
        ``lock-error``, ``removed``, ``paused``, ``stopped``)."""
        rec = replace(
            base, status="skipped", finished_at=base.started_at, error=f"{reason}: {detail}"
        )
        self.counters.skipped += 1
        level = logging.DEBUG if reason == "claimed" else logging.INFO
        if reason in ("missed", "lock-error"):
            level = logging.WARNING
        logger.log(level, "job %r skipped a fire (%s: %s)", base.task_name, reason, detail)
        await self._save(self.runs.add, rec, quiet=reason == "claimed")
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

    async def skip_fire(self, job: Job, base: RunRecord, reason: str, detail: str) -> RunRecord:
        """Record a scheduled fire that will not run, once across replicas: the one that wins
        the fire's claim records ``reason``, the others a ``claimed`` skip (as for a fire
        that runs). If the claim cannot be made, this replica records it all the same."""
        if self.locking is not None and base.scheduled_at is not None:
            try:
                won = await self.locking.claim(job, base.scheduled_at)
            except Exception:
                logger.exception("job %r: the lock backend failed", job.name)
                self.unsure()
            else:
                if not won:
                    return await self.skip(base, "claimed", "another replica took this fire")
        return await self.skip(base, reason, detail)

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
        job: Job,
        control: RunControl,
        current: Callable[[], bool] = lambda: True,
        cancelled: str = "the scheduler shut down",
        catching_up: bool = False,
    ) -> RunRecord:
        """Run one fire of ``job``; never raises except the caller's own cancellation.

        :param current: whether the job is still the registered one; checked once the lock
            is held, so a job removed or replaced meanwhile does not run
        :param cancelled: why the run stopped if the caller's scope cancels it (the error text)
        :param catching_up: a missed fire: wait for the lock, then claim (see ``_locking``)
        """
        name = base.task_name
        lease: Lease | None = None
        # The lease expires lock_ttl after the acquire *call* began at the latest.
        acquired_at = self.clock.now()
        if self.locking is not None:
            try:
                lease, reason, acquired_at = await self.locking.take(
                    job, base.scheduled_at, catching_up=catching_up
                )
            except Exception as exc:
                logger.exception("job %r: the lock backend failed", name)
                self.unsure()
                return await self.skip(base, "lock-error", f"{type(exc).__name__}: {exc}")
            if reason == "claimed":
                return await self.skip(base, "claimed", "another replica took this fire")
            if lease is None:
                return await self.skip(base, "locked", await self.locking.held_by(job))
        try:
            if not current():
                if lease is not None:
                    await self._release_quietly(name, lease)
                return await self.skip(
                    base, "removed", "the job was removed or replaced before this run started"
                )
            deadline = acquired_at + timedelta(seconds=job.lock_ttl)
            return await self._run_locked(base, job, control, lease, deadline, cancelled)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                if lease is not None:
                    await self._release_quietly(name, lease)
            raise

    async def _release_quietly(self, name: str, lease: Lease) -> None:
        assert self.locking is not None
        await self.locking.release_quietly(name, lease)

    async def _run_locked(
        self,
        base: RunRecord,
        job: Job,
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
            expires_at=now + timedelta(seconds=job.lock_ttl),
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
        renewal = None
        if job.renew and lease is not None:
            touch = functools.partial(self.runs.touch, record.id)
            renewal = Renewal(lease, job.lock_ttl, deadline, touch)
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
            result: Any = None
            try:
                result = await call_guarded(
                    job.fn, ctx, control, self.clock, renewal=renewal, limit=job.timeout
                )
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
                error = _cancelled_error(name, job, control)
            if error is None:
                value, ok = encode_result(job.fn, result)
                if not ok:
                    logger.info("job %r returned a value JSON cannot hold; storing its repr", name)
                record = replace(record, result=value, result_repr=not ok)
            return await self._finish(record, ctx, error, control, lease)
        finally:
            _current_run.reset(token)

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

    async def _save(
        self,
        op: Callable[[RunRecord], Awaitable[None]],
        record: RunRecord,
        *,
        quiet: bool = False,
    ) -> None:
        if not quiet:
            self.recorded(record)
        try:
            await op(record)
        except Exception:
            logger.exception(
                "could not write run %s of %r to the run table", record.id, record.task_name
            )


def _cancelled_error(name: str, job: Job, control: RunControl) -> Exception:
    """Why the run's own scope was cancelled, as the error its record keeps."""
    if control.lost:
        return LockLostError(name, control.lost)
    if control.timed_out and job.timeout is not None:
        return RunTimeoutError(name, job.timeout)
    return RunCancelledError(name, control.reason or "cancelled")
