"""The scheduler's pages in the operator console (``eventbus.console``): jobs and runs.

* **Jobs**: every job with its schedule, zone, next fire times (in its zone and in UTC),
  paused flag and last run; trigger, pause and resume it.
* **Runs**: the run table, filtered by job and status, with duration, replica, fence and
  error, and a chart of durations and outcomes over time.

Needs the ``web`` extra. ``scheduler_pages(sched)`` gives both.
"""

from __future__ import annotations

import base64
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, get_args
from urllib.parse import quote

from eventbus.extras import missing_extra

if _missing := missing_extra(__name__, "web"):
    raise _missing

from starlette.responses import Response

from eventbus.console import (
    Action,
    ActionError,
    Bar,
    ConsolePage,
    Done,
    PageRequest,
    Panel,
    View,
    bar_chart,
    parse_int,
)

from ._core._loop import Scheduler
from ._core._registry import PauseScope
from ._exceptions import JobLookupError
from ._records import RunRecord, RunStatus

__all__ = ["JobsPage", "RunsPage", "job_path", "scheduler_pages"]

_TEMPLATES = ("scheduler", "console_templates")
_STATUSES: tuple[str, ...] = get_args(RunStatus)
_PER_PAGE = 50
_MAX_RUNS = 5_000
_CHART_RUNS = 60
_NEXT_FIRES = 3


#: who a pause reaches, by where the paused state is kept (``Scheduler.pause_scope``)
_SCOPES: dict[PauseScope, str] = {
    "job table": "every replica, and after a restart: kept in the job table",
    "run table": "every replica that shares the run table's database, and after a restart",
    "process": "this process only: other replicas go on running the job, and a restart "
    "forgets the pause (the run store keeps no shared state; give the scheduler a "
    "SqlRunStore)",
}


#: the last segments of the job actions' paths (``/jobs/<name>/pause``)
_ACTION_SEGMENTS = frozenset({"trigger", "pause", "resume"})


def job_path(name: str) -> str:
    """The console path of job ``name``: ``/jobs/`` and the name, percent-encoded, when a URL
    path carries it unchanged; else ``/jobs/~`` and its UTF-8 in base64url (a segment ``.``
    or ``..`` is resolved away by clients, a line break matches no route, a name starting
    with ``~`` would read as encoded, and ``x/pause`` is the path of job ``x``'s action)."""
    segments = name.split("/")
    if (
        name.startswith("~")
        or "\n" in name
        or any(s in (".", "..") for s in segments)
        or (len(segments) > 1 and segments[-1] in _ACTION_SEGMENTS)
    ):
        encoded = base64.urlsafe_b64encode(name.encode()).decode("ascii").rstrip("=")
        return f"/jobs/~{encoded}"
    return "/jobs/" + quote(name, safe="/")


def _job_name(segment: str) -> str | None:
    """The job name in a path made by :func:`job_path`; ``None`` if it cannot be one."""
    if not segment.startswith("~"):
        return segment
    text = segment[1:]
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        return None


def _run_duration(run: RunRecord) -> float | None:
    """Seconds from start to finish, or ``None`` while it runs."""
    if run.finished_at is None:
        return None
    return max(0.0, (run.finished_at - run.started_at).total_seconds())


def _run_outcome(run: RunRecord) -> str:
    """One line: the status, and the error or the reason of a skip."""
    if run.status == "succeeded":
        return "succeeded"
    return f"{run.status}: {run.error}" if run.error else run.status


def _runs_chart(runs: Sequence[RunRecord], *, label: str) -> Any:
    """A bar per run, oldest on the left: its duration, coloured by its outcome."""
    bars = []
    for run in sorted(runs, key=lambda r: r.started_at):
        seconds = _run_duration(run) or 0.0
        shown = f"{seconds:.3f} s" if run.finished_at else "still running"
        bars.append(
            Bar(
                "",
                {run.status: seconds},
                f"{run.task_name} at {run.started_at:%Y-%m-%d %H:%M:%S} UTC ({run.trigger}): "
                f"{_run_outcome(run)}, {shown}",
            )
        )
    return bar_chart(bars, label=label, unit=" s")


class JobsPage:
    """Every job of *sched*, with the actions an operator takes on one."""

    slug = "jobs"
    title = "Jobs"
    templates: tuple[str, str] | None = _TEMPLATES

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched

    def __repr__(self) -> str:
        return f"JobsPage(scheduler={self.sched!r})"

    def routes(self) -> Sequence[View | Action]:
        return [
            View("", self.index, "jobs.list"),
            Action("/{name:path}/trigger", self.trigger, "jobs.trigger"),
            Action("/{name:path}/pause", self.pause, "jobs.pause"),
            Action("/{name:path}/resume", self.resume, "jobs.resume"),
            View("/{name:path}", self.detail, "jobs.detail"),
        ]

    async def panel(self, request: PageRequest) -> Panel:
        jobs = self.sched.jobs()
        paused = [j for j in jobs if await self.sched.is_paused(j)]
        failed = [j for j in jobs if j.last_run is not None and j.last_run.status == "failed"]
        stats = self.sched.statistics()
        return Panel(
            title=self.title,
            href=request.url("/jobs"),
            rows=[
                ("jobs", len(jobs)),
                ("paused", len(paused)),
                ("running now", stats.running),
                ("last run failed", len(failed)),
            ],
            alert=bool(failed),
        )

    async def _rows(self) -> list[dict[str, Any]]:
        rows = []
        for job in self.sched.jobs():
            fires = self.sched.next_fire_times(job.name, _NEXT_FIRES)
            rows.append(
                {
                    "job": job,
                    "paused": await self.sched.is_paused(job),
                    "fires": [(f, f.astimezone(UTC)) for f in fires],
                    "last": job.last_run,
                    "last_duration": _run_duration(job.last_run) if job.last_run else None,
                }
            )
        return rows

    async def index(self, request: PageRequest) -> Response:
        return request.render(
            "scheduler_jobs.html", rows=await self._rows(), utc=UTC, job_path=job_path
        )

    def _job(self, request: PageRequest) -> Any:
        segment = str(request.path_params["name"])
        name = _job_name(segment)
        try:
            if name is None:
                raise JobLookupError(segment)
            return self.sched.get(name)
        except JobLookupError:
            shown = segment if name is None else name
            raise ActionError(f"There is no job named {shown[:200]!r}.", status=404) from None

    async def detail(self, request: PageRequest) -> Response:
        job = self._job(request)
        runs = await self.sched.runs.query(task_name=job.name, limit=_CHART_RUNS)
        fires = self.sched.next_fire_times(job.name, 10)
        return request.render(
            "scheduler_job.html",
            job=job,
            job_path=job_path,
            paused=await self.sched.is_paused(job),
            pause_scope=_SCOPES[self.sched.pause_scope(job.name)],
            fires=[(f, f.astimezone(UTC)) for f in fires],
            runs=runs,
            durations={r.id: _run_duration(r) for r in runs},
            chart=_runs_chart(runs, label=f"Duration of the last {len(runs)} runs of {job.name}")
            if runs
            else None,
        )

    async def trigger(self, request: PageRequest) -> Done:
        job = self._job(request)
        run = await self.sched.trigger(job.name)
        seconds = _run_duration(run)
        took = f" in {seconds:.2f} s" if seconds is not None else ""
        return Done(
            f"Ran {job.name} now: {_run_outcome(run)}{took}.",
            target=job.name,
            back=request.url(job_path(job.name)),
        )

    async def pause(self, request: PageRequest) -> Done:
        job = self._job(request)
        if await self.sched.is_paused(job):
            raise ActionError(f"Job {job.name!r} is already paused.")
        await self.sched.pause(job.name)
        where = (
            "in this process only (other replicas go on running it; a restart forgets it)"
            if self.sched.pause_scope(job.name) == "process"
            else "on every replica"
        )
        return Done(
            f"Paused {job.name} {where}: its fires are recorded as skipped until it is resumed.",
            target=job.name,
            back=request.url("/jobs"),
        )

    async def resume(self, request: PageRequest) -> Done:
        job = self._job(request)
        if not await self.sched.is_paused(job):
            raise ActionError(f"Job {job.name!r} is not paused.")
        await self.sched.resume(job.name)
        return Done(
            f"Resumed {job.name} from its next fire on.", target=job.name, back=request.url("/jobs")
        )


class RunsPage:
    """The run table of *sched*: every run and skipped fire, newest first."""

    slug = "runs"
    title = "Runs"
    templates: tuple[str, str] | None = _TEMPLATES

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched

    def __repr__(self) -> str:
        return f"RunsPage(scheduler={self.sched!r})"

    def routes(self) -> Sequence[View | Action]:
        return [View("", self.index, "runs.list")]

    async def panel(self, request: PageRequest) -> Panel:
        since = datetime.now(UTC) - timedelta(hours=24)
        recent = [r for r in await self.sched.runs.query(limit=_MAX_RUNS) if r.started_at >= since]
        counts = Counter(r.status for r in recent)
        return Panel(
            title=self.title,
            href=request.url("/runs"),
            rows=[(f"{s} (24 h)", counts.get(s, 0)) for s in ("succeeded", "failed", "skipped")],
            alert=bool(counts.get("failed") or counts.get("abandoned")),
        )

    async def index(self, request: PageRequest) -> Response:
        q = request.query
        errors: list[str] = []
        job = (q.get("job") or "").strip() or None
        if job is not None and len(job) > 200:
            errors.append(f"job is {len(job)} characters long; at most 200")
            job = None
        status = q.get("status") or None
        if status is not None and status not in _STATUSES:
            errors.append(f"status must be one of {', '.join(_STATUSES)}, not {status[:40]!r}")
            status = None
        page = parse_int(q.get("page"), "page", 1, _MAX_RUNS // _PER_PAGE, errors) or 1
        runs: list[RunRecord] = []
        if not errors:
            runs = await self.sched.runs.query(
                task_name=job,
                status=status,  # type: ignore[arg-type]  # checked against RunStatus above
                limit=page * _PER_PAGE + 1,
            )
        start = (page - 1) * _PER_PAGE
        shown = runs[start : start + _PER_PAGE]
        query = {"job": job or "", "status": status or ""}
        chart_runs = runs[:_CHART_RUNS] if page == 1 else shown
        return request.render(
            "scheduler_runs.html",
            status=400 if errors else 200,
            job_path=job_path,
            errors=errors,
            runs=shown,
            durations={r.id: _run_duration(r) for r in shown},
            jobs=[j.name for j in self.sched.jobs()],
            statuses=_STATUSES,
            form=query,
            first=start + 1,
            chart=_runs_chart(
                chart_runs,
                label=f"Duration and outcome of {len(chart_runs)} runs, oldest on the left",
            )
            if chart_runs
            else None,
            prev_url=request.url("/runs", **query, page=page - 1) if page > 1 else None,
            next_url=(
                request.url("/runs", **query, page=page + 1)
                if len(runs) > start + _PER_PAGE
                else None
            ),
        )


def scheduler_pages(sched: Scheduler) -> list[ConsolePage]:
    """The scheduler's pages for *sched*: jobs, then runs."""
    return [JobsPage(sched), RunsPage(sched)]
