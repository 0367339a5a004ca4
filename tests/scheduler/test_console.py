"""The scheduler's console pages over HTTP: jobs (next fires in zone and UTC, paused flag,
last run; trigger, pause, resume) and runs (filters, duration, replica, fence, error, chart),
on a virtual clock."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from eventbus.console import Action, Console
from scheduler import LocalLock, MemoryRunStore, RunContext, Scheduler, VirtualClock
from scheduler.console import scheduler_pages
from tests.console_support import TOKEN, login, result_banner, text

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Report:
    """The job ``daily:report``: fails while ``broken``."""

    def __init__(self) -> None:
        self.broken = False
        self.ran = 0

    async def __call__(self, run: RunContext) -> int:
        self.ran += 1
        if self.broken:
            raise RuntimeError("report database unreachable")
        return self.ran


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(T0)


@pytest.fixture
def report() -> Report:
    return Report()


@pytest.fixture
def sched(clock: VirtualClock, report: Report) -> Scheduler:
    sched = Scheduler(clock=clock, runs=MemoryRunStore(), lock=LocalLock(), replica="web-1")
    sched.cron("0 30 6 * * *", name="daily:report", tz="Asia/Shanghai")(report)

    @sched.interval(seconds=10, name="tick")
    async def tick(run: RunContext) -> None:
        pass

    return sched


@pytest.fixture
async def client(sched: Scheduler) -> AsyncIterator[httpx.AsyncClient]:
    console = Console(scheduler_pages(sched), secret=TOKEN)
    web = Starlette(routes=[Mount("/ops", console)])
    transport = httpx.ASGITransport(app=web)
    with anyio.fail_after(10):
        async with sched, httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            yield c


@pytest.fixture
async def csrf(client: httpx.AsyncClient) -> str:
    return await login(client)


def job_row(page: str, name: str) -> str:
    start = page.index(f'<tr data-job="{name}">')
    return page[start : page.index("</tr>", start)]


async def test_the_jobs_page_shows_schedule_zone_next_fires_and_state(
    client: httpx.AsyncClient, csrf: str
) -> None:
    page = text(await client.get("/ops/jobs"))
    row = job_row(page, "daily:report")
    assert "0 30 6 * * *" in row and "cron, Asia/Shanghai" in row
    # 06:30 in Shanghai is 22:30 UTC the day before: the next three fires, in both zones
    assert "2026-12-02 06:30:00 CST" in row and "2026-12-01 22:30:00 UTC" in row
    assert "2026-12-04 06:30:00 CST" in row
    assert 'class="status s-active">active' in row
    assert "every 10s" in job_row(page, "tick")


async def test_pause_skips_the_fires_and_resume_runs_them_again(
    client: httpx.AsyncClient, csrf: str, clock: VirtualClock
) -> None:
    r = await client.post("/ops/jobs/tick/pause", data={"csrf": csrf})
    assert r.status_code == 303
    page = text(await client.get(r.headers["location"]))
    banner = result_banner(page)  # the scheduler keeps its runs in memory: this process only
    assert banner.startswith("Paused tick in this process only")
    assert "its fires are recorded as skipped" in banner
    assert 'class="status s-paused">paused' in job_row(page, "tick")
    await clock.advance(20)
    runs = text(await client.get("/ops/runs", params={"job": "tick"}))
    assert runs.count("skipped: paused") == 2
    r = await client.post("/ops/jobs/tick/pause", data={"csrf": csrf})
    assert r.status_code == 400
    assert "already paused" in text(r)
    r = await client.post("/ops/jobs/tick/resume", data={"csrf": csrf})
    assert r.status_code == 303
    await clock.advance(10)
    runs = text(await client.get("/ops/runs", params={"job": "tick", "status": "succeeded"}))
    assert runs.count(">succeeded</span>") == 1
    r = await client.post("/ops/jobs/tick/resume", data={"csrf": csrf})
    assert r.status_code == 400
    assert "is not paused" in text(r)


async def test_run_now_runs_the_job_and_its_run_appears(
    client: httpx.AsyncClient, csrf: str, report: Report
) -> None:
    r = await client.post("/ops/jobs/daily:report/trigger", data={"csrf": csrf})
    assert r.status_code == 303
    assert r.headers["location"].startswith("/ops/jobs/daily%3Areport?done=") or r.headers[
        "location"
    ].startswith("/ops/jobs/daily:report?done=")
    page = text(await client.get(r.headers["location"]))
    assert result_banner(page).startswith("Ran daily:report now: succeeded in ")
    assert report.ran == 1
    report.broken = True
    r = await client.post("/ops/jobs/daily:report/trigger", data={"csrf": csrf})
    page = text(await client.get(r.headers["location"]))
    assert "failed: RuntimeError: report database unreachable" in result_banner(page)
    runs = text(await client.get("/ops/runs", params={"job": "daily:report"}))
    assert runs.count("<td>manual</td>") == 2
    assert "web-1" in runs  # the replica
    assert re.search(r'<td class="num hide-narrow">\d+</td>', runs)  # the lock's fence
    assert "RuntimeError: report database unreachable" in runs
    assert "<svg" in runs and "daily:report at 2026-12-01 09:00:00 UTC (manual): failed" in runs


async def test_the_job_page_shows_its_runs_and_chart(client: httpx.AsyncClient, csrf: str) -> None:
    await client.post("/ops/jobs/tick/trigger", data={"csrf": csrf})
    page = text(await client.get("/ops/jobs/tick"))
    assert "<h1>Job <span" in page and "every 10s" in page
    assert page.count("<td>manual</td>") == 1
    assert "<svg" in page


@pytest.mark.parametrize("verb", ["trigger", "pause", "resume"])
async def test_an_unknown_job_is_a_404_page(
    client: httpx.AsyncClient, csrf: str, verb: str
) -> None:
    r = await client.post(f"/ops/jobs/no-such-job/{verb}", data={"csrf": csrf})
    assert r.status_code == 404
    assert "There is no job named 'no-such-job'" in text(r)
    assert (await client.get("/ops/jobs/no-such-job")).status_code == 404


@pytest.mark.parametrize(
    ("params", "message"),
    [
        pytest.param(
            {"status": "exploded"}, "status must be one of running, succeeded", id="status"
        ),
        pytest.param({"page": "-3"}, "page must be a whole number", id="page"),
        pytest.param({"page": "1000"}, "page must be a whole number from 1 to 100", id="far"),
        pytest.param({"job": "j" * 300}, "job is 300 characters long", id="job"),
    ],
)
async def test_bad_run_filters_are_a_400_with_a_message(
    client: httpx.AsyncClient, csrf: str, params: dict[str, str], message: str
) -> None:
    r = await client.get("/ops/runs", params=params)
    assert r.status_code == 400
    assert message in text(r)


async def test_job_actions_are_post_only_and_need_the_csrf_token(
    client: httpx.AsyncClient, csrf: str, sched: Scheduler, report: Report
) -> None:
    actions = [
        f"/ops/{page.slug}{route.path.replace('{name:path}', 'daily:report')}"
        for page in scheduler_pages(sched)
        for route in page.routes()
        if isinstance(route, Action)
    ]
    assert len(actions) == 3
    for path in actions:
        # 405, or 404 where the job page reads the whole path as a job name
        assert (await client.get(path)).status_code in (404, 405), path
        assert (await client.post(path, data={"csrf": "forged"})).status_code == 403, path
    assert (report.ran, sched.get("daily:report").paused) == (0, False)


async def test_the_overview_has_the_scheduler_panels(client: httpx.AsyncClient, csrf: str) -> None:
    await client.post("/ops/jobs/tick/pause", data={"csrf": csrf})
    page = text(await client.get("/ops/"))
    assert "<dt>jobs</dt><dd>2</dd>" in page and "<dt>paused</dt><dd>1</dd>" in page
