"""The scheduler's console pages: a UTC job's fires shown once, the runs page's auto-refresh.

Regression tests (issue 22, item 11): a job page repeated the UTC time of a UTC job beside
its fires; the runs page could only be reloaded by hand.
"""

from __future__ import annotations

import re

import httpx

from tests.console_support import text
from tests.scheduler.test_console import anyio_backend, client, clock, csrf, report, sched

__all__ = ["anyio_backend", "client", "clock", "csrf", "report", "sched"]


def fires_of(page: str) -> str:
    return page.split("<dt>Next fires</dt>", 1)[1].split("</dd>", 1)[0]


async def test_a_utc_jobs_page_shows_each_fire_once(client: httpx.AsyncClient, csrf: str) -> None:
    tick = fires_of(text(await client.get("/ops/jobs/tick")))
    assert tick.count("<div>") == 10 and "UTC" in tick
    assert "<small>" not in tick  # the UTC time is the fire itself
    daily = fires_of(text(await client.get("/ops/jobs/daily:report")))
    assert "CST" in daily and daily.count("<small>") == 10  # another zone: with its UTC time


async def test_the_runs_page_offers_an_auto_refresh_the_jobs_page_does_not(
    client: httpx.AsyncClient, csrf: str
) -> None:
    control = r'<input type="checkbox" id="auto-refresh" data-seconds="(\d+)">'
    runs = await client.get("/ops/runs")
    assert re.search(control, runs.text) is not None
    assert re.search(control, (await client.get("/ops/jobs/tick")).text) is None
    assert "<script>" not in runs.text  # the page's own script file only (the CSP)
