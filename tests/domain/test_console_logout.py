"""The domain web app's console keeps its logouts in the app's database (review risk 1): two
apps on one database file, as two replicas, and a cookie logged out on one refused by the
other."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import httpx

from domain.web import WebConfig, create_app
from tests.console_support import TOKEN, login


async def test_a_logout_on_one_replica_is_refused_by_the_other(tmp_path: Path) -> None:
    config = WebConfig(
        db=tmp_path / "web.db", console_token=TOKEN, app_options={"refill_watermark": 20}
    )
    first, second = create_app(config), create_app(config)
    with anyio.fail_after(20):
        async with first.router.lifespan_context(first), second.router.lifespan_context(second):
            a = httpx.AsyncClient(transport=httpx.ASGITransport(app=first), base_url="http://t")
            b = httpx.AsyncClient(transport=httpx.ASGITransport(app=second), base_url="http://t")
            async with a, b:
                csrf = await login(a)
                b.cookies.set("eventbus_console", a.cookies["eventbus_console"], path="/ops")
                assert (await b.get("/ops/")).status_code == 200
                assert (await a.post("/ops/logout", data={"csrf": csrf})).status_code == 303
                r = await b.get("/ops/")
                assert r.status_code == 303 and r.headers["location"].startswith("/ops/login")
    with sqlite3.connect(tmp_path / "web.db") as conn:
        assert conn.execute("SELECT count(*) FROM console_revoked_sessions").fetchone() == (1,)
