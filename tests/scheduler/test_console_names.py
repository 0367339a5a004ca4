"""Every job name can be opened and acted on from the console (review minor d): names from
the job table are user-supplied, and a URL cannot carry every string as a path (``..`` is
resolved away by the client, a newline matches no route)."""

from __future__ import annotations

import html
import re

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from eventbus.console import Console
from scheduler import MemoryRunStore, RunContext, Scheduler
from scheduler.console import job_path, scheduler_pages
from tests.console_support import TOKEN, login

NAMES = [
    "..",
    ".",
    "a/../b",
    "a/./b",
    "a\nb",
    "tab\there",
    "~tilde",
    "x/pause",
    "a?b#c",
    "50%/",
    "daily:report",
    "with space",
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def noop(run: RunContext) -> None:
    pass


def test_ordinary_names_keep_readable_paths() -> None:
    assert job_path("daily:report") == "/jobs/daily%3Areport"
    assert job_path("reports/weekly") == "/jobs/reports/weekly"
    for name in ("..", "a\nb", "~tilde", "a/./b", "x/pause", "a/b/trigger"):
        assert job_path(name).startswith("/jobs/~"), name


async def test_every_name_opens_its_page_and_its_actions_reach_it() -> None:
    sched = Scheduler(runs=MemoryRunStore())
    for name in NAMES:
        sched.add_cron(name, "0 0 * * * *", noop)
    web = Starlette(routes=[Mount("/ops", Console(scheduler_pages(sched), secret=TOKEN))])
    transport = httpx.ASGITransport(app=web)
    with anyio.fail_after(10):
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            csrf = await login(client)
            listing = (await client.get("/ops/jobs")).text
            links = [html.unescape(h) for h in re.findall(r'href="(/ops/jobs/[^"]+)"', listing)]
            assert len(links) == len(NAMES)
            for link in links:
                page = await client.get(link)
                assert page.status_code == 200, link
                shown = re.search(r'<h1>Job <span class="mono">(.*?)</span>', page.text, re.S)
                assert shown is not None
                name = html.unescape(shown.group(1))
                assert name in NAMES, link
                pause = re.search(r'action="([^"]+/pause)"', page.text)
                assert pause is not None, link
                r = await client.post(html.unescape(pause.group(1)), data={"csrf": csrf})
                assert r.status_code == 303, (link, r.text)
                assert await sched.is_paused(sched.get(name)), name
                trigger = html.unescape(re.findall(r'action="([^"]+/trigger)"', page.text)[0])
                r = await client.post(trigger, data={"csrf": csrf})
                assert r.status_code == 303, link
                assert (await client.get(r.headers["location"])).status_code == 200, link
            assert (await client.get("/ops/jobs/~not*base64")).status_code == 404
