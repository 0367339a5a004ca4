"""``python -m scheduler jobs``, ``pause NAME`` and ``resume NAME``.

``jobs`` reads the jobs of a scheduler (``--app``, with the job table it loads) or of the
job table alone (``--db``); ``pause`` and ``resume`` change the paused state of a job of the
job table, or (``--app``) of a job written in code whose scheduler keeps it in a SQL run
store; every replica reads it at each fire.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol, cast

from eventbus.cli import positive_int

from .._core._loop import Scheduler
from .._cron import CronExpression
from .._jobs import JobDefinition
from .._records import RunRecord
from .._triggers import AnyTrigger, CronTrigger
from ..abc import RunStore
from ._common import (
    EXIT_OK,
    InputError,
    add_db,
    close_app,
    load_scheduler,
    open_database,
    reading,
)

__all__ = ["add_jobs", "add_pause_resume"]

if TYPE_CHECKING:  # subscriptable for type checkers only
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]


class _PausableSource(Protocol):
    """A job table with the optional paused-state methods of ``JobSource``."""

    async def load(self) -> list[JobDefinition]: ...

    async def is_paused(self, name: str) -> bool | None: ...

    async def set_paused(self, name: str, paused: bool) -> bool: ...


def add_jobs(subparsers: Subparsers) -> None:
    p = subparsers.add_parser(
        "jobs",
        help="list jobs with their next fires, paused state and last run",
        description="List the jobs of the scheduler at --app (with those it loads from its "
        "job table), or of the job table at --db: each with its next fire times in its zone "
        "and in UTC, whether it is paused, and its last recorded run.",
    )
    _add_source(p)
    p.add_argument("-n", type=positive_int, default=3, metavar="N", help="next fires (default 3)")
    p.add_argument(
        "--after",
        metavar="ISO",
        help="next fires after this aware ISO 8601 time (default: now); interval and "
        "one-shot-after-start jobs are shown as if the scheduler started then",
    )
    p.set_defaults(handler=_run_jobs)


def add_pause_resume(subparsers: Subparsers) -> None:
    for verb, help_text in (
        ("pause", "pause a job on every replica"),
        ("resume", "resume a paused job on every replica"),
    ):
        p = subparsers.add_parser(
            verb,
            help=help_text,
            description=f"{help_text[0].upper()}{help_text[1:]}: its state is stored in the "
            "job table (scheduler_jobs) for its jobs, or, with --app, for a job written in "
            "code, in the scheduler's SQL run store (scheduler_paused); every replica reads it "
            "at each fire. Fires skipped while paused are not replayed.",
        )
        p.add_argument("name", metavar="NAME", help="the job's name")
        _add_source(p)
        p.set_defaults(handler=_run_pause if verb == "pause" else _run_resume)


def _add_source(p: argparse.ArgumentParser) -> None:
    source = p.add_mutually_exclusive_group(required=True)
    add_db(source)
    source.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="a Scheduler, or a function returning one (e.g. 'myapp.jobs:sched')",
    )


# -- jobs ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Row:
    name: str
    trigger: AnyTrigger | None  # None: a stored expression that does not parse
    schedule: str
    state: str  # active, paused, disabled, or why it is not a job
    last: RunRecord | None


def _run_jobs(args: argparse.Namespace) -> int:
    import anyio

    after = _after(args.after)
    rows = anyio.run(_rows_from_app if args.app else _rows_from_table, args, backend="asyncio")
    if not rows:
        print("no jobs", file=sys.stderr)
    for row in rows:
        print(f"{row.name}  {row.schedule}  {row.state}  last run: {_last(row.last)}")
        for fire in _next_fires(row.trigger, after, args.n):
            local, utc = fire.isoformat(), fire.astimezone(UTC).isoformat()
            print(f"    {local}  {utc.replace('+00:00', 'Z')}")
    return EXIT_OK


async def _rows_from_app(args: argparse.Namespace) -> list[_Row]:
    sched = load_scheduler(args.app)
    try:
        if sched._job_source is not None and sched._job_factory is not None:
            await sched.load_jobs(sched._job_source, sched._job_factory)
        rows = []
        for job in sched.jobs():
            paused = await sched.is_paused(job)
            schedule = f"{job.kind} {job.schedule!r} ({job.tz})"
            last = await _last_run(sched.runs, job.name)
            rows.append(_Row(job.name, job.trigger, schedule, _state(paused), last))
        return rows
    finally:
        await close_app(sched)


async def _rows_from_table(args: argparse.Namespace) -> list[_Row]:
    import sqlalchemy as sa

    from ..backends.sql import SqlJobStore, SqlRunStore

    engine = open_database(args.db)
    async with reading(engine, "jobs"):
        definitions = await SqlJobStore(engine, create=False).load()
        async with engine.connect() as conn:
            has_runs = await conn.run_sync(lambda c: sa.inspect(c).has_table("scheduler_runs"))
        runs = SqlRunStore(engine, create=False)
        rows = []
        for d in definitions:
            schedule = f"cron {d.expr!r} ({d.tz})"
            trigger: AnyTrigger | None = None
            try:
                trigger = CronTrigger(CronExpression(d.expr, d.tz))
                state = _state(d.paused) if d.enabled else "disabled"
            except Exception as exc:  # a row a scheduler would refuse to load, and log
                state = f"not loaded: {exc}"
            last = await _last_run(runs, d.name) if has_runs else None
            rows.append(_Row(d.name, trigger, schedule, state, last))
        return rows


def _state(paused: bool) -> str:
    return "paused" if paused else "active"


def _after(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"--after {text!r} is not an ISO 8601 date-time") from None
    if when.tzinfo is None:
        raise InputError(f"--after {text!r} has no UTC offset; add one (e.g. '+00:00')")
    return when


def _next_fires(trigger: AnyTrigger | None, after: datetime, n: int) -> list[datetime]:
    fires: list[datetime] = []
    fire = None if trigger is None else trigger.first(after)
    while trigger is not None and fire is not None and len(fires) < n:
        fires.append(fire.astimezone(trigger.zone))
        fire = trigger.next(fire)
    return fires


async def _last_run(runs: RunStore, name: str) -> RunRecord | None:
    """The newest record of the job, a replica's ``claimed`` skip aside (the replica that
    won that fire wrote the record that tells)."""
    for record in await runs.query(task_name=name, limit=20):
        if not (record.status == "skipped" and (record.error or "").startswith("claimed:")):
            return record
    return None


def _last(record: RunRecord | None) -> str:
    if record is None:
        return "none"
    when = record.started_at.astimezone(UTC).isoformat(timespec="seconds")
    text = f"{record.status} at {when.replace('+00:00', 'Z')}"
    if record.status == "skipped" and record.error:
        text += f" ({record.error.split(':')[0]})"
    return text


# -- pause / resume --------------------------------------------------------------------------


def _run_pause(args: argparse.Namespace) -> int:
    return _set_paused(args, True)


def _run_resume(args: argparse.Namespace) -> int:
    return _set_paused(args, False)


def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    import anyio

    was = anyio.run(_store_paused, args, paused, backend="asyncio")
    verb = "paused" if paused else "resumed"
    if was == paused:
        print(f"{args.name}: {verb} (it already was)")
    elif paused:
        print(f"{args.name}: paused; every replica skips its fires from the next one on")
    else:
        print(f"{args.name}: resumed from its next fire; the fires skipped are not replayed")
    return EXIT_OK


async def _store_paused(args: argparse.Namespace, paused: bool) -> bool:
    """Set the stored state; returns the state it had."""
    if args.app:
        sched = load_scheduler(args.app)
        try:
            source = sched._job_source
            if hasattr(source, "set_paused") and hasattr(source, "is_paused"):
                table = cast(_PausableSource, source)
                if await table.is_paused(args.name) is not None or args.name not in sched._jobs:
                    return await _flip(table, args.name, paused, f"--app {args.app!r}")
            return await _flip_code_job(sched, args.name, paused, args.app)
        finally:
            await close_app(sched)
    import sqlalchemy as sa

    from eventbus.backends.sql import redact_url

    from ..backends.sql import SqlJobStore

    engine = open_database(args.db)
    where = redact_url(engine.url)
    async with reading(engine, "the job table"):
        async with engine.connect() as conn:
            has_jobs = await conn.run_sync(lambda c: sa.inspect(c).has_table("scheduler_jobs"))
        if not has_jobs:
            raise InputError(f"{where!r} has no job table (scheduler_jobs) to pause jobs in")
        # create=True: a job table of an older version gets its 'paused' column first
        return await _flip(SqlJobStore(engine), args.name, paused, repr(where))


async def _flip_code_job(sched: Scheduler, name: str, paused: bool, app: str) -> bool:
    """Pause or resume a job written in code, where its scheduler keeps the paused state."""
    if name not in sched._jobs:
        names = [repr(j.name) for j in sched.jobs()]
        known = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if names[10:] else "")
        raise InputError(f"no job named {name!r} in --app {app!r}; known jobs: {known or 'none'}")
    if sched.pause_scope(name) == "process":
        raise InputError(
            f"--app {app!r} keeps the paused state of {name!r} in its own process (its run "
            "store is kept in memory): pause it there (the console, or sched.pause()), or "
            "give the scheduler a SqlRunStore"
        )
    job = sched.get(name)
    was = await sched.is_paused(job)
    await (sched.pause if paused else sched.resume)(name)
    return was


async def _flip(table: _PausableSource, name: str, paused: bool, where: str) -> bool:
    was = await table.is_paused(name)
    if was is None:
        names = [repr(d.name) for d in await table.load()]
        known = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if names[10:] else "")
        raise InputError(
            f"no job named {name!r} in the job table of {where}; known jobs: {known or 'none'}"
        )
    await table.set_paused(name, paused)
    return was
