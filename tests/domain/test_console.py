"""The domain's console pages over HTTP: short links and articles, their forms' bad input,
the ``/ops`` mount in :mod:`domain.web`, the view history, and the web demo's data."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from sqlalchemy import insert, update
from starlette.applications import Starlette
from starlette.routing import Mount

from domain import App
from domain.console import domain_console
from domain.db import articles
from domain.view_history import ViewHistory
from domain.web import WebConfig, create_app
from domain.web_demo import seed
from eventbus.console import Action, LoginSecretError, View
from tests.console_support import TOKEN, login, result_banner, text
from tests.domain.conftest import domain_app, settle


@pytest.fixture
def config(tmp_path: Path) -> WebConfig:
    return WebConfig(
        db=tmp_path / "web.db", console_token=TOKEN, app_options={"refill_watermark": 20}
    )


@pytest.fixture
async def csrf(client: httpx.AsyncClient) -> str:
    return await login(client)


# -- the mount ----------------------------------------------------------------------------------


async def test_without_a_console_token_there_is_no_console(tmp_path: Path) -> None:
    app = create_app(WebConfig(db=tmp_path / "web.db"))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.get("/ops")
            assert r.status_code == 404  # "ops" is read as a short code, and there is none


def test_a_weak_console_token_fails_when_the_app_is_built(tmp_path: Path) -> None:
    with pytest.raises(LoginSecretError, match="7 characters long"):
        create_app(WebConfig(db=tmp_path / "web.db", console_token="letmein"))


def test_the_console_token_comes_from_the_environment(tmp_path: Path) -> None:
    env = {"EVENTBUS_CONSOLE_TOKEN": TOKEN, "EVENTBUS_CONSOLE_READ_ONLY": "1"}
    cfg = WebConfig.from_env(env, db=tmp_path / "web.db")
    assert (cfg.console_token, cfg.console_read_only) == (TOKEN, True)
    assert TOKEN not in repr(cfg)
    assert WebConfig.from_env({"EVENTBUS_CONSOLE_TOKEN": "  "}).console_token is None


async def test_before_the_lifespan_the_console_answers_503(config: WebConfig) -> None:
    transport = httpx.ASGITransport(app=create_app(config))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        r = await client.get("/ops/")
        assert r.status_code == 503


async def test_the_console_has_every_page_of_the_application(
    client: httpx.AsyncClient, csrf: str
) -> None:
    nav = (await client.get("/ops/")).text
    for title in ["Failures", "Bus", "Short links", "Articles", "Actions"]:
        assert f">{title}</a>" in nav


async def test_ops_is_a_reserved_alias(client: httpx.AsyncClient, csrf: str) -> None:
    r = await client.post("/ops/links", data={"csrf": csrf, "url": "https://e.com", "alias": "ops"})
    assert r.status_code == 400
    assert "reserved" in text(r)


# -- short links --------------------------------------------------------------------------------


async def test_create_a_short_link_from_the_form_and_see_its_clicks(
    web: Starlette, client: httpx.AsyncClient, csrf: str
) -> None:
    r = await client.post(
        "/ops/links",
        data={
            "csrf": csrf,
            "url": "https://example.com/a",
            "alias": "promo",
            "expires_in_days": "3",
        },
    )
    assert r.status_code == 303
    page = await client.get(r.headers["location"])
    assert result_banner(page.text) == (
        "Created http://testserver/promo → https://example.com/a (alias)."
    )
    assert 'href="http://testserver/promo"' in page.text
    assert (await client.get("/promo")).status_code == 302
    app = domain_app(web)
    await settle(app.bus)  # the click is counted by a background listener
    page = await client.get("/ops/links")
    assert "+1 pending" in page.text
    await app.links.flush_clicks()
    page = await client.get("/ops/links")
    row = page.text[page.text.index('href="http://testserver/promo"') :]
    assert '<td class="num">1</td>' in row[: row.index("</tr>")]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({"url": ""}, "Give the URL the short link leads to", id="no-url"),
        pytest.param({"url": "javascript:alert(1)"}, "Not created: ", id="scheme"),
        pytest.param({"url": "https://e.com", "alias": "a b"}, "Not created: ", id="alias"),
        pytest.param(
            {"url": "https://e.com", "expires_in_days": "0"},
            "expires in days must be from 1",
            id="expiry-zero",
        ),
        pytest.param(
            {"url": "https://e.com", "expires_in_days": "soon"},
            "expires in days must be a whole number",
            id="expiry-text",
        ),
        pytest.param({"url": "https://e.com/" + "x" * 5000}, "at most 4096", id="long-url"),
    ],
)
async def test_the_link_form_refuses_bad_input_with_a_message(
    client: httpx.AsyncClient, csrf: str, data: dict[str, str], message: str
) -> None:
    r = await client.post("/ops/links", data={"csrf": csrf, **data})
    assert r.status_code == 400
    assert message in text(r)


async def test_a_taken_alias_is_refused(client: httpx.AsyncClient, csrf: str) -> None:
    data = {"csrf": csrf, "url": "https://example.com", "alias": "twice"}
    assert (await client.post("/ops/links", data=data)).status_code == 303
    r = await client.post("/ops/links", data=data)
    assert r.status_code == 400
    assert "twice" in text(r) and "Not created" in text(r)


# -- articles -----------------------------------------------------------------------------------


async def add_articles(app: App) -> None:
    async with app.engine.begin() as conn:
        await conn.execute(insert(articles), [{"id": 1, "title": "One"}, {"id": 2, "title": "Two"}])


async def test_schedule_and_cancel_a_publication_from_the_form(
    web: Starlette, client: httpx.AsyncClient, csrf: str
) -> None:
    app = domain_app(web)
    await add_articles(app)
    at = (datetime.now(UTC) + timedelta(hours=2)).replace(second=0, microsecond=0)
    r = await client.post(
        "/ops/articles/2/schedule", data={"csrf": csrf, "at": at.strftime("%Y-%m-%dT%H:%M")}
    )
    assert r.status_code == 303
    page = await client.get(r.headers["location"])
    assert result_banner(page.text) == f"Article 2 will be published at {at:%Y-%m-%d %H:%M} UTC."
    assert await app.publisher.pending() == [(2, at)]
    assert "scheduled" in page.text
    r = await client.post("/ops/articles/2/cancel", data={"csrf": csrf})
    assert r.status_code == 303
    assert await app.publisher.pending() == []
    r = await client.post("/ops/articles/2/cancel", data={"csrf": csrf})
    assert r.status_code == 400
    assert "has no scheduled publication to cancel" in r.text


@pytest.mark.parametrize(
    ("path", "at", "status", "message"),
    [
        pytest.param("/ops/articles/1/schedule", "", 400, "Give the publication time", id="none"),
        pytest.param(
            "/ops/articles/1/schedule", "tomorrow", 400, "publication time must be", id="text"
        ),
        pytest.param(
            "/ops/articles/1/schedule", "2001-01-01T00:00", 400, "Not scheduled", id="past"
        ),
        pytest.param(  # review finding 4: was a 500 (OverflowError) with a logged traceback
            "/ops/articles/1/schedule",
            "0001-01-01T00:00+14:00",
            400,
            "publication time '0001-01-01T00:00+14:00' is out of range",
            id="before-year-1-in-utc",
        ),
        pytest.param(
            "/ops/articles/9/schedule", "2999-01-01T00:00", 400, "Not scheduled", id="unknown"
        ),
        pytest.param(
            "/ops/articles/x/schedule", "2999-01-01T00:00", 404, "There is no article 'x'", id="id"
        ),
        pytest.param(
            "/ops/articles/99999999999999999999/cancel", "", 404, "There is no article", id="huge"
        ),
    ],
)
async def test_the_schedule_form_refuses_bad_input_with_a_message(
    web: Starlette,
    client: httpx.AsyncClient,
    csrf: str,
    path: str,
    at: str,
    status: int,
    message: str,
) -> None:
    await add_articles(domain_app(web))
    r = await client.post(path, data={"csrf": csrf, "at": at})
    assert r.status_code == status
    assert message in text(r)
    assert await domain_app(web).publisher.pending() == []


async def test_the_articles_page_charts_flushed_view_counts(
    web: Starlette, client: httpx.AsyncClient, csrf: str
) -> None:
    app = domain_app(web)
    await add_articles(app)
    assert "No views flushed yet" in (await client.get("/ops/articles")).text
    history = ViewHistory(app.engine)
    assert await history.sample() == 2  # the first sample records every article
    assert await history.sample() == 0  # nothing moved
    async with app.engine.begin() as conn:
        await conn.execute(update(articles).where(articles.c.id == 1).values(view_count=5))
    assert await history.sample() == 1
    series = await history.series()
    assert [v for _, v in series[1]] == [0, 5] and [v for _, v in series[2]] == [0]
    page = text(await client.get("/ops/articles"))
    assert "<polyline" in page and "#1 One: 5" in page


async def test_the_flush_job_samples_the_view_counts(web: Starlette) -> None:
    app = domain_app(web)
    await add_articles(app)
    await app.views.view(1, "viewer-a")
    await app.scheduler.trigger("flush_views")
    series = await app.view_history.series()
    assert [v for _, v in series[1]] == [1]


# -- the web demo's data ------------------------------------------------------------------------


async def test_the_web_demo_seeds_every_page_once(
    web: Starlette, client: httpx.AsyncClient, csrf: str
) -> None:
    app = domain_app(web)
    await seed(app)
    await seed(app)  # a database with articles is left as it is
    await settle(app.bus)
    assert "bob@bounce.invalid" in (await client.get("/ops/failures")).text
    links = (await client.get("/ops/links")).text
    assert links.count('class="short"') == 3
    page = (await client.get("/ops/articles")).text
    assert page.count("<tr>") == 5  # the header and four articles
    assert len(await app.publisher.pending()) == 1


async def test_a_get_of_any_action_is_a_405(web: Starlette) -> None:
    """Regression test: a ``GET`` of an action under a page's catch-all view was that view
    (``/ops/jobs/<name>/trigger`` the job ``<name>/trigger``, ``/ops/failures/retry`` the
    failure ``retry``): a 404 "no such ..." instead of a 405. Walks every page's routes."""
    console = domain_console(domain_app(web), secret=TOKEN)
    transport = httpx.ASGITransport(app=Starlette(routes=[Mount("/ops", console)]))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        await login(client)
        walked = []
        for page in console.pages:
            routes = list(page.routes())
            views = {r.path for r in routes if isinstance(r, View)}
            for action in (r for r in routes if isinstance(r, Action)):
                if action.path in views:
                    continue  # a view at the same path shows a form (the purge confirmation)
                path = "/ops/" + page.slug + re.sub(r"\{[^}]*\}", "flush_clicks", action.path)
                for method in ("GET", "HEAD", "PUT"):
                    r = await client.request(method, path)
                    assert (r.status_code, r.headers.get("allow")) == (405, "POST"), (method, path)
                walked.append(path)
    assert {"/ops/failures/retry", "/ops/jobs/flush_clicks/trigger"} <= set(walked)
    assert len(walked) >= 9
