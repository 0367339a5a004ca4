"""A failed run keeps its traceback in the run record, and the console shows it beside the
error (SQL run store and memory alike).

Regression test: a failed job run showed only its ``Type: message``; the traceback was in
the log alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from eventbus.console import Console
from scheduler import MemoryRunStore, RunContext, Scheduler
from scheduler.backends.sql import SqlRunStore
from scheduler.console import scheduler_pages
from tests.console_support import TOKEN, login, text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def deep_failure() -> None:
    raise LookupError("no ledger row for invoice 7")


@pytest.fixture(params=["memory", "sql"])
async def sched(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Scheduler]:
    runs = (
        MemoryRunStore() if request.param == "memory" else SqlRunStore.from_url(tmp_path / "r.db")
    )
    sched = Scheduler(runs=runs)

    @sched.interval(seconds=3600, name="ledger")
    async def ledger(run: RunContext) -> None:
        deep_failure()

    yield sched
    if isinstance(runs, SqlRunStore):
        await runs.aclose()


async def test_a_failed_run_keeps_its_traceback_and_the_runs_page_shows_it(
    sched: Scheduler,
) -> None:
    record = await sched.trigger("ledger")
    assert (record.status, record.error) == ("failed", "LookupError: no ledger row for invoice 7")
    [stored] = await sched.runs.query(task_name="ledger")
    assert stored.traceback is not None
    assert stored.traceback.startswith("Traceback (most recent call last):")
    assert "in deep_failure" in stored.traceback
    assert stored.traceback.rstrip().endswith("LookupError: no ledger row for invoice 7")
    console = Console(scheduler_pages(sched), secret=TOKEN)
    transport = httpx.ASGITransport(app=Starlette(routes=[Mount("/ops", console)]))
    with anyio.fail_after(10):
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await login(client)
            page = text(await client.get("/ops/runs"))
    shown = page.split("<summary>traceback</summary>", 1)[1].split("</details>", 1)[0]
    assert "in deep_failure" in shown and "LookupError: no ledger row for invoice 7" in shown
