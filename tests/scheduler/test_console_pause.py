"""The console says who a pause reaches (review finding 3): every replica when the paused
state is kept in the job table or a shared run store, this process only otherwise."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from eventbus.console import Console
from scheduler import JobDefinition, MemoryRunStore, RunContext, Scheduler
from scheduler.backends.local import MemoryJobStore
from scheduler.backends.sql import SqlRunStore
from scheduler.console import scheduler_pages
from tests.console_support import TOKEN, login, result_banner


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def flush(run: RunContext) -> None:
    pass


@asynccontextmanager
async def console_for(sched: Scheduler) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    web = Starlette(routes=[Mount("/ops", Console(scheduler_pages(sched), secret=TOKEN))])
    transport = httpx.ASGITransport(app=web)
    with anyio.fail_after(10):
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            yield client, await login(client)


def scope_of(page: str) -> str:
    found = re.search(r'id="pause-scope">(.*?)</dd>', page, re.S)
    assert found is not None, "no pause scope on the job page"
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1))).strip()


async def test_a_pause_kept_in_memory_is_labelled_this_process_only() -> None:
    sched = Scheduler(runs=MemoryRunStore())
    sched.add_cron("flush", "0 * * * * *", flush)
    async with console_for(sched) as (client, csrf):
        scope = scope_of((await client.get("/ops/jobs/flush")).text)
        assert scope.startswith("this process only")
        r = await client.post("/ops/jobs/flush/pause", data={"csrf": csrf})
        banner = result_banner((await client.get(r.headers["location"])).text)
        assert "in this process only" in banner and "other replicas" in banner
    assert await sched.is_paused(sched.get("flush"))


async def test_a_pause_kept_in_the_run_table_reaches_every_replica(tmp_path: Path) -> None:
    async with SqlRunStore.from_url(tmp_path / "runs.db") as runs:
        sched = Scheduler(runs=runs)
        sched.add_cron("flush", "0 * * * * *", flush)
        async with console_for(sched) as (client, csrf):
            scope = scope_of((await client.get("/ops/jobs/flush")).text)
            assert scope.startswith("every replica")
            assert "run table" in scope
            r = await client.post("/ops/jobs/flush/pause", data={"csrf": csrf})
            banner = result_banner((await client.get(r.headers["location"])).text)
            assert "on every replica" in banner
        assert await runs.job_paused("flush")


async def test_a_table_job_s_pause_is_kept_in_the_job_table() -> None:
    table = MemoryJobStore([JobDefinition(name="reminder:1", expr="0 * * * * *")])
    sched = Scheduler(runs=MemoryRunStore(), job_source=table, job_factory=lambda d: flush)
    await sched.load_jobs(table, lambda d: flush)
    async with console_for(sched) as (client, _):
        scope = scope_of((await client.get("/ops/jobs/reminder:1")).text)
        assert scope.startswith("every replica") and "job table" in scope
