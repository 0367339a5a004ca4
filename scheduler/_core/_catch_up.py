"""Catch-up after downtime: which missed fires to run at start (pure functions of a job, its
last scheduled fire from the run table, and the time now), and running them in order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .._jobs import Job
from .._triggers import AtTrigger, TimeoutTrigger
from ._runner import Runner

__all__ = ["CatchUp", "CatchUpPlan", "needs_catch_up", "plan_catch_up"]

logger = logging.getLogger("scheduler")

#: counting missed fires stops here (a per-second job down for a week has 604,800)
COUNT_CAP = 10_000


@dataclass(frozen=True, slots=True)
class CatchUpPlan:
    """What to do with a job's missed fires: run ``run`` in order; record one ``missed``
    skip at ``skip_at`` (the newest fire not run) with ``detail``, if there is one."""

    run: list[datetime] = field(default_factory=list)
    skip_at: datetime | None = None
    detail: str = ""


def needs_catch_up(job: Job, now: datetime) -> bool:
    """Whether the run table must be read for ``job`` at start: its policy runs missed fires,
    or it is a one-shot whose instant is already past (run or recorded at most once)."""
    if isinstance(job.trigger, AtTrigger):
        return job.trigger.instant <= now
    return job.catch_up != "skip" and not isinstance(job.trigger, TimeoutTrigger)


def plan_catch_up(job: Job, last: datetime | None, now: datetime) -> CatchUpPlan:
    """The plan for the fires of ``job`` after ``last`` and at or before ``now``.

    A periodic job with no recorded fire has nothing to catch up (nothing says since when).
    """
    trigger = job.trigger
    if isinstance(trigger, AtTrigger):
        when = trigger.instant
        if when > now or (last is not None and last >= when):
            return CatchUpPlan()
        if job.catch_up == "skip":
            return CatchUpPlan(
                skip_at=when, detail=f"{when.isoformat()} passed while no replica was up"
            )
        return CatchUpPlan(run=[when])
    if last is None or job.catch_up == "skip" or isinstance(trigger, TimeoutTrigger):
        return CatchUpPlan()
    if job.catch_up == "latest":
        latest = latest_between(job, last, now)
        return CatchUpPlan(run=[] if latest is None else [latest])
    first = fires_between(job, last, now, limit=job.max_catch_up + 1)
    if len(first) <= job.max_catch_up:
        return CatchUpPlan(run=first)
    run = first[: job.max_catch_up]
    newest = latest_between(job, last, now)
    assert newest is not None
    rest = count_between(job, run[-1], now)
    more = f"{rest:,}" if rest < COUNT_CAP else f"at least {COUNT_CAP:,}"
    return CatchUpPlan(
        run=run,
        skip_at=newest,
        detail=(
            f"{more} more fires from {first[-1].isoformat()} to {newest.isoformat()} were "
            f"missed while no replica was up, beyond max_catch_up={job.max_catch_up} (the "
            f"{len(run)} before them ran)"
        ),
    )


def fires_between(job: Job, after: datetime, until: datetime, *, limit: int) -> list[datetime]:
    """Up to ``limit`` fires of ``job`` strictly after ``after`` and at or before ``until``."""
    out: list[datetime] = []
    fire = job.trigger.after(after, after)
    while fire is not None and fire <= until and len(out) < limit:
        out.append(fire)
        fire = job.trigger.next(fire)
    return out


def count_between(job: Job, after: datetime, until: datetime) -> int:
    """How many fires strictly after ``after`` and at or before ``until`` (at most COUNT_CAP)."""
    return len(fires_between(job, after, until, limit=COUNT_CAP))


def latest_between(job: Job, after: datetime, until: datetime) -> datetime | None:
    """The last fire strictly after ``after`` and at or before ``until``, found by looking
    back from ``until`` over windows that double, so a long gap costs a few dozen steps."""
    window = timedelta(seconds=1)
    while True:
        start = max(after, until - window)
        found = None
        fire = job.trigger.after(after, start)
        while fire is not None and fire <= until:
            found, fire = fire, job.trigger.next(fire)
        if found is not None or start == after:
            return found
        window *= 2


class CatchUp:
    """Runs the catch-up of one job at start: ``fire`` is the scheduler's own path for a
    scheduled fire (pause, per-fire claim, lock, run record)."""

    def __init__(self, runner: Runner, fire: Callable[..., Awaitable[None]]) -> None:
        self.runner = runner
        self.fire = fire

    async def __call__(self, job: Job, now: datetime) -> None:
        """Run (or record) the fires of ``job`` missed while no replica was up, in order.

        Each missed fire waits for the job's lock, then claims the fire: replicas starting
        together walk the same backlog, and each fire runs once, in order, on whichever holds
        the lock when it is next (see ``_locking``).
        """
        try:
            last = await self.runner.runs.last_scheduled(job.name)
        except Exception:
            logger.exception("job %r: could not read its last fire; no catch-up", job.name)
            return
        plan = plan_catch_up(job, last, now)
        if plan.skip_at is not None:
            base = self.runner.new_record(job.name, job.kind, plan.skip_at)
            await self.runner.skip(base, "missed", plan.detail)
        if plan.run:
            logger.info(
                "job %r: catching up %d missed fire(s) (catch_up=%r)",
                job.name,
                len(plan.run),
                job.catch_up,
            )
        for fire in plan.run:
            await self.fire(job, job.kind, fire, catching_up=True)
