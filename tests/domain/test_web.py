"""The ASGI application, driven through its ASGI interface with httpx (no network)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import anyio
import httpx
import pytest
from anyio import wait_all_tasks_blocked
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette

from domain import AdminTokenError
from domain.db import articles
from domain.events import ArticleViewed, OrderPaid, ShortlinkVisited
from domain.web import WebConfig, create_app
from eventbus import Event
from eventbus.testing import RecordingListener, capture_failures
from tests.domain.conftest import domain_app, settle

TOKEN = "s3cret-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def config(tmp_path: Path) -> WebConfig:
    return WebConfig(
        db=tmp_path / "web.db", admin_token=TOKEN, app_options={"refill_watermark": 20}
    )


# -- lifespan and health -------------------------------------------------------------------------


async def test_lifespan_starts_the_domain_and_drains_it_on_shutdown(config: WebConfig) -> None:
    """Work queued before shutdown is finished by it: a gated async listener still blocked when
    the lifespan exits completes, and a queued view reaches SQL through the final flush."""
    app = create_app(config)
    gate, effects = anyio.Event(), list[int]()

    async def gated(event: OrderPaid) -> None:
        await gate.wait()
        effects.append(event.order_id)

    async def open_gate_once_draining() -> None:
        await wait_all_tasks_blocked()  # the lifespan is waiting for the bus to drain
        assert effects == []
        gate.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async with app.router.lifespan_context(app):
                running = domain_app(app)
                assert running.bus.running
                assert await running.links.idle_codes() == 20  # refilled at start
                async with running.engine.begin() as conn:
                    await conn.execute(insert(articles).values(id=1, title="a"))
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                    health = await c.get("/healthz")
                running.bus.on(OrderPaid, gated, name="test:gated")
                for order_id in (1, 2, 3):
                    running.bus.emit(OrderPaid(order_id=order_id, user_id=1, amount=Decimal(1)))
                running.bus.emit(ArticleViewed(article_id=1, viewer_key="v"))
                tg.start_soon(open_gate_once_draining)
    assert health.status_code == 200
    body = health.json()
    assert body["status"] == "ok"
    assert body["bus"]["running"] is True
    assert body["scheduler"]["jobs"] == 4
    no_loss = {"buffered": 0, "lost": 0, "store_losses": 0, "lost_in_store": 0}
    assert body["counters"] == {"views": no_loss, "clicks": no_loss}
    assert not running.bus.running
    assert not hasattr(app.state, "domain")
    assert sorted(effects) == [1, 2, 3]
    assert running.listeners.points == {1: 3}
    engine = create_async_engine(f"sqlite+aiosqlite:///{config.db}")
    try:
        async with engine.connect() as conn:
            assert await conn.scalar(select(articles.c.view_count)) == 1
    finally:
        await engine.dispose()


async def test_healthz_is_503_outside_the_lifespan(config: WebConfig) -> None:
    app = create_app(config)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        r = await c.get("/healthz")
    assert r.status_code == 503
    assert r.json()["error"] == "not_running"


def test_config_repr_never_shows_the_token(config: WebConfig) -> None:
    assert TOKEN not in repr(config)
    env = {"EVENTBUS_ADMIN_TOKEN": TOKEN, "EVENTBUS_WEB_DB": "x.db"}
    assert WebConfig.from_env(env).admin_enabled
    assert not WebConfig.from_env({"EVENTBUS_ADMIN_TOKEN": ""}).admin_enabled
    assert WebConfig.from_env(env, db="y.db").db == "y.db"


# -- short links ---------------------------------------------------------------------------------


async def test_create_then_follow_a_link_counts_the_visit(
    web: Starlette, client: httpx.AsyncClient
) -> None:
    app = domain_app(web)
    visits = RecordingListener()
    app.bus.on(ShortlinkVisited, visits)
    created = await client.post("/links", json={"url": "https://example.com/a?b=1"})
    assert created.status_code == 201
    link = created.json()
    assert link["source"] == "pool"
    assert link["short_url"] == f"http://testserver/{link['code']}"
    assert created.headers["location"] == link["short_url"]

    r = await client.get(f"/{link['code']}")
    assert r.status_code == 302
    assert r.headers["location"] == "https://example.com/a?b=1"
    assert r.headers["cache-control"] == "no-store"
    assert visits.events == [ShortlinkVisited(code=link["code"], url="https://example.com/a?b=1")]
    await settle(app.bus)
    await app.links.flush_clicks()
    assert await app.links.clicks_of(link["code"]) == {link["code"]: 1}


async def test_an_alias_is_served_and_a_second_claim_conflicts(client: httpx.AsyncClient) -> None:
    r = await client.post("/links", json={"url": "https://example.com/", "alias": "launch"})
    assert (r.status_code, r.json()["code"], r.json()["source"]) == (201, "launch", "alias")
    again = await client.post("/links", json={"url": "https://example.org/", "alias": "launch"})
    assert again.status_code == 409
    assert again.json()["error"] == "alias_taken"
    assert "'launch' is already taken" in again.json()["detail"]
    assert (await client.get("/launch")).headers["location"] == "https://example.com/"


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        pytest.param({"url": "javascript:alert(1)"}, 400, "invalid_url", id="scheme"),
        pytest.param({"url": "/relative"}, 400, "invalid_url", id="relative"),
        pytest.param({"url": "https://x.example/", "alias": "admin"}, 400, "reserved_alias",
                     id="reserved"),
        pytest.param({"url": "https://x.example/", "alias": "a b"}, 400, "invalid_alias",
                     id="alias-chars"),
        pytest.param({}, 400, "bad_request", id="no-url"),
        pytest.param({"url": 5}, 400, "bad_request", id="url-type"),
        pytest.param({"url": "https://x.example/", "expires_in": 0}, 400, "bad_request",
                     id="expiry"),
        pytest.param([1, 2], 400, "bad_request", id="not-an-object"),
    ],
)  # fmt: skip
async def test_create_link_errors_are_json(
    client: httpx.AsyncClient, body: object, status: int, error: str
) -> None:
    r = await client.post("/links", json=body)
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"] == error
    assert r.json()["detail"]


async def test_a_link_to_the_metadata_service_is_refused_with_the_reason(
    client: httpx.AsyncClient,
) -> None:
    r = await client.post("/links", json={"url": "http://169.254.169.254/latest/meta-data/"})
    assert (r.status_code, r.json()["error"]) == (400, "invalid_url")
    assert r.json()["detail"].endswith("host '169.254.169.254' is a cloud metadata service")
    r = await client.post("/links", json={"url": "http://192.168.0.10/"})
    assert r.json()["detail"].endswith(
        "host '192.168.0.10' is private; intranet targets need allow_intranet=True"
    )


async def test_intranet_links_are_an_option_of_the_web_application(tmp_path: Path) -> None:
    config = WebConfig.from_env(
        {"EVENTBUS_ALLOW_INTRANET_LINKS": "1"},
        db=tmp_path / "web.db",
        app_options={"refill_watermark": 5},
    )
    web = create_app(config)
    async with web.router.lifespan_context(web):
        transport = httpx.ASGITransport(app=web)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            r = await client.post("/links", json={"url": "http://192.168.0.10/"})
            assert r.status_code == 201
            r = await client.post("/links", json={"url": "http://[fd00:ec2::254]/"})
            assert r.status_code == 400


async def test_a_body_that_is_not_json_is_a_json_error(client: httpx.AsyncClient) -> None:
    r = await client.post("/links", content=b"{nope")
    assert r.status_code == 400
    assert r.json()["detail"].startswith("the body is not JSON")


@pytest.mark.parametrize(
    "path", [pytest.param("/links", id="links"), pytest.param("/orders/1/pay", id="orders")]
)
async def test_an_oversized_body_is_413(client: httpx.AsyncClient, path: str) -> None:
    """Regression test: an oversized body was a 400, not 413 Content Too Large."""
    r = await client.post(path, json={"url": "https://example.com/" + "a" * 20_000})
    assert (r.status_code, r.json()["error"]) == (413, "payload_too_large")
    assert r.json()["detail"] == "the body is over 16384 bytes; send a smaller JSON object"


@pytest.mark.parametrize(
    ("method", "path", "status", "detail"),
    [
        pytest.param("GET", "/no/such/page", 404, "no route for GET /no/such/page", id="404"),
        pytest.param("DELETE", "/links", 405, "DELETE is not allowed on /links; use POST",
                     id="405"),
        pytest.param("POST", "/healthz", 405, "POST is not allowed on /healthz; use GET",
                     id="405-get-only"),
    ],
)  # fmt: skip
async def test_routing_errors_are_json_like_every_other_error(
    client: httpx.AsyncClient, method: str, path: str, status: int, detail: str
) -> None:
    """Regression test: the router's own 404 and 405 were plain text."""
    r = await client.request(method, path)
    assert r.status_code == status
    assert r.headers["content-type"] == "application/json"
    error = {404: "not_found", 405: "method_not_allowed"}[status]
    assert r.json() == {"error": error, "detail": detail}
    if status == 405:
        assert detail.rsplit(" ", 1)[1] in r.headers["allow"]


async def test_unknown_and_expired_codes_are_404(web: Starlette, client: httpx.AsyncClient) -> None:
    app = domain_app(web)
    visits = RecordingListener()
    app.bus.on(ShortlinkVisited, visits)
    past = datetime.now(UTC) - timedelta(seconds=1)
    await app.links.create("https://example.com/old", alias="old-news", expires_at=past)
    unknown, expired = await client.get("/nope42"), await client.get("/old-news")
    assert (unknown.status_code, unknown.json()["detail"]) == (
        404,
        "no short link 'nope42' (unknown)",
    )
    assert (expired.status_code, expired.json()["detail"]) == (
        404,
        "no short link 'old-news' (expired)",
    )
    assert visits.count == 0  # not a visit


async def test_expires_in_sets_the_expiry(client: httpx.AsyncClient) -> None:
    r = await client.post("/links", json={"url": "https://example.com/", "expires_in": 60})
    expires = datetime.fromisoformat(r.json()["expires_at"])
    assert timedelta(seconds=55) < expires - datetime.now(UTC) <= timedelta(seconds=60)
    assert (await client.get(f"/{r.json()['code']}")).status_code == 302


# -- articles and orders -------------------------------------------------------------------------


async def test_article_views_come_from_the_cookie_or_the_client_address(
    web: Starlette, client: httpx.AsyncClient
) -> None:
    app = domain_app(web)
    async with app.engine.begin() as conn:
        await conn.execute(insert(articles).values(id=1, title="Why 302"))
    viewed = RecordingListener()
    app.bus.on(ArticleViewed, viewed)
    for cookies in ({"viewer": "u-1"}, {"viewer": "u-1"}, {"viewer": "u-2"}, {}):
        client.cookies.clear()
        client.cookies.update(cookies)
        r = await client.get("/articles/1")
        assert r.status_code == 200
        assert r.json()["title"] == "Why 302"
    keys = [e.viewer_key for e in viewed.events if isinstance(e, ArticleViewed)]
    assert keys == [cookie_key("u-1"), cookie_key("u-1"), cookie_key("u-2"), "ip:203.0.113.7"]
    await settle(app.bus)
    await app.views.flush()
    assert await app.views.counts(1) == {1: 3}  # the repeated viewer counted once
    assert (await client.get("/articles/1")).json()["view_count"] == 3


def cookie_key(cookie: str) -> str:
    return "c:" + hashlib.sha256(cookie.encode()).hexdigest()[:32]


@pytest.mark.parametrize(
    "cookie",
    [
        pytest.param('"a\\011b"', id="tab"),
        pytest.param("x" * 3000, id="long"),
        pytest.param("\u00e9t\u00e9", id="non-ascii"),
    ],
)
async def test_a_hostile_viewer_cookie_becomes_a_fixed_length_key(
    web: Starlette, client: httpx.AsyncClient, cookie: str
) -> None:
    """Regression test: the cookie was the viewer key as is, so a tab in it made the counter
    refuse the view (one failure record per request) and a long one made long Redis keys."""
    app = domain_app(web)
    async with app.engine.begin() as conn:
        await conn.execute(insert(articles).values(id=1, title="a"))
    viewed = RecordingListener()
    app.bus.on(ArticleViewed, viewed)
    with capture_failures(app.bus) as failures:
        r = await client.get("/articles/1", headers={b"Cookie": f"viewer={cookie}".encode()})
        assert r.status_code == 200
        await settle(app.bus)
    assert list(failures) == []
    [event] = viewed.events
    assert isinstance(event, ArticleViewed)
    assert len(event.viewer_key) == 34 and event.viewer_key.startswith("c:")
    await app.views.flush()
    assert await app.views.counts(1) == {1: 1}


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(f"/articles/{2**63}", id="2**63"),
        pytest.param("/articles/" + "9" * 30, id="30-digits"),
    ],
)
async def test_an_article_id_beyond_64_bits_is_404(client: httpx.AsyncClient, path: str) -> None:
    """Regression test: the id reached SQLite, whose driver raised OverflowError (500)."""
    r = await client.get(path)
    assert (r.status_code, r.json()["error"]) == (404, "not_found")
    assert (await client.get(f"/articles/{2**63 - 1}")).status_code == 404  # largest id: SQL


async def test_an_unknown_article_is_404_and_records_no_view(
    web: Starlette, client: httpx.AsyncClient
) -> None:
    viewed = RecordingListener()
    domain_app(web).bus.on(ArticleViewed, viewed)
    r = await client.get("/articles/99")
    assert (r.status_code, r.json()["error"]) == (404, "not_found")
    assert viewed.count == 0


async def test_paying_an_order_emits_order_paid(web: Starlette, client: httpx.AsyncClient) -> None:
    app = domain_app(web)
    paid = RecordingListener()
    app.bus.on(OrderPaid, paid)
    r = await client.post("/orders/7/pay", json={"user_id": 1, "amount": "19.90"})
    assert (r.status_code, r.json()) == (202, {"order_id": 7, "event": "order.paid"})
    assert paid.events == [OrderPaid(order_id=7, user_id=1, amount=Decimal("19.90"))]
    await settle(app.bus)
    assert app.listeners.points == {1: 19}
    r = await client.post("/orders/8/pay", json={"user_id": 1, "amount": "1e2"})
    assert r.status_code == 202
    assert paid.events[-1] == OrderPaid(order_id=8, user_id=1, amount=Decimal("100.00"))


async def test_the_points_listener_refuses_an_amount_out_of_bounds(web: Starlette) -> None:
    """Regression test: ``int(event.amount)`` ran on any amount (``1e9999999`` froze the loop);
    a huge amount is now a recorded failure before any conversion."""
    app = domain_app(web)
    with anyio.fail_after(5), capture_failures(app.bus) as failures:
        await app.bus.emit_async(OrderPaid(order_id=1, user_id=1, amount=Decimal("1e15")))
    failures.assert_one(listener="rewards:grant_points", error_type=ValueError)
    assert app.listeners.points == {}


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"amount": "1"}, id="no-user"),
        pytest.param({"user_id": True, "amount": "1"}, id="bool-user"),
        pytest.param({"user_id": 1, "amount": "abc"}, id="amount-text"),
        pytest.param({"user_id": 1, "amount": "-3"}, id="amount-negative"),
        pytest.param({"user_id": 1, "amount": 1.5}, id="amount-float"),
        pytest.param({"user_id": 1, "amount": "1e9999999"}, id="amount-huge-exponent"),
        pytest.param({"user_id": 1, "amount": "1000000000000"}, id="amount-10**12"),
        pytest.param({"user_id": 1, "amount": "0.001"}, id="amount-3-places"),
        pytest.param({"user_id": 1, "amount": "1e-9999999"}, id="amount-tiny-exponent"),
        pytest.param({"user_id": 1, "amount": "NaN"}, id="amount-nan"),
        pytest.param({"user_id": 1, "amount": "Infinity"}, id="amount-infinite"),
        pytest.param({"user_id": 1, "amount": "0"}, id="amount-zero"),
        pytest.param({"user_id": 2**63, "amount": "1"}, id="user-beyond-64-bits"),
    ],
)
async def test_a_bad_payment_is_400_and_emits_nothing(
    web: Starlette, client: httpx.AsyncClient, body: dict[str, object]
) -> None:
    paid = RecordingListener()
    domain_app(web).bus.on(OrderPaid, paid)
    with anyio.fail_after(5):
        r = await client.post("/orders/7/pay", json=body)
    assert (r.status_code, r.json()["error"]) == (400, "bad_request")
    assert paid.count == 0


@pytest.mark.parametrize(
    ("amount", "detail"),
    [
        pytest.param(19.9, "'amount' 19.9 is a JSON number with a fraction, which is not exact; "
                     'send a decimal string such as "19.90", or an integer', id="float"),
        pytest.param(None, "'amount' is required: a decimal string such as \"19.90\", or an "
                     "integer", id="missing"),
        pytest.param([1], "'amount' must be a decimal string such as \"19.90\", or an integer, "
                     "not a list", id="list"),
    ],
)  # fmt: skip
async def test_a_bad_amount_says_which_forms_are_accepted(
    client: httpx.AsyncClient, amount: object, detail: str
) -> None:
    """Regression test: a JSON float amount was reported as "required"."""
    body = {"user_id": 1} if amount is None else {"user_id": 1, "amount": amount}
    r = await client.post("/orders/7/pay", json=body)
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "detail": detail}


async def test_an_order_id_beyond_64_bits_is_400(web: Starlette, client: httpx.AsyncClient) -> None:
    """Regression test: an order id of 30 digits was accepted (202) into ``order.paid``."""
    paid = RecordingListener()
    domain_app(web).bus.on(OrderPaid, paid)
    r = await client.post(f"/orders/{2**63}/pay", json={"user_id": 1, "amount": "1"})
    assert (r.status_code, r.json()["error"]) == (400, "bad_request")
    assert "out of range" in r.json()["detail"]
    assert paid.count == 0


# -- admin ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="none"),
        pytest.param({"Authorization": TOKEN}, id="no-scheme"),
        pytest.param({"Authorization": f"Basic {TOKEN}"}, id="basic"),
        pytest.param({"Authorization": "Bearer wrong"}, id="wrong"),
    ],
)
@pytest.mark.parametrize(
    ("method", "path"),
    [
        pytest.param("GET", "/admin/failures", id="failures"),
        pytest.param("POST", "/admin/tasks/flush_views/run", id="run"),
    ],
)
async def test_admin_routes_need_the_bearer_token(
    client: httpx.AsyncClient, method: str, path: str, headers: dict[str, str]
) -> None:
    r = await client.request(method, path, headers=headers)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Bearer realm="admin"'
    assert r.json()["error"] == "unauthorized"


@pytest.mark.parametrize("token", [pytest.param(None, id="unset"), pytest.param("", id="empty")])
async def test_admin_routes_do_not_exist_without_a_token(tmp_path: Path, token: str | None) -> None:
    app = create_app(WebConfig(db=tmp_path / "web.db", admin_token=token))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            failures = await c.get("/admin/failures", headers={"Authorization": "Bearer "})
            run = await c.post("/admin/tasks/flush_views/run")
    assert failures.status_code == 404  # /{code} is GET-only and 'admin' is no code
    assert run.status_code in (404, 405)
    assert failures.json()["error"] == "not_found"
    assert run.json()["error"] in ("not_found", "method_not_allowed")


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        pytest.param("   ", "is blank", id="spaces"),
        pytest.param("\t\n", "is blank", id="tab-newline"),
        pytest.param("short-token", "is 11 characters long", id="short"),
        pytest.param("  " + "x" * 15 + "  ", "is 15 characters long", id="short-once-stripped"),
    ],
)
def test_a_blank_or_short_admin_token_is_a_configuration_error(token: str, reason: str) -> None:
    """Regression test: a whitespace-only token turned the admin routes on."""
    with pytest.raises(AdminTokenError, match=reason) as caught:
        WebConfig(admin_token=token)
    assert "at least 16" in str(caught.value)
    with pytest.raises(AdminTokenError, match=reason):
        WebConfig.from_env({"EVENTBUS_ADMIN_TOKEN": token})


async def test_the_admin_token_is_stripped(tmp_path: Path) -> None:
    config = WebConfig(db=tmp_path / "web.db", admin_token=f"  {TOKEN}\n")
    assert config.admin_token == TOKEN
    app = create_app(config)
    with anyio.fail_after(10):
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                assert (await c.get("/admin/failures", headers=AUTH)).status_code == 200


def explode(e: Event) -> None:
    raise ValueError("ledger offline")


async def test_a_failing_listener_leaves_the_payer_unharmed_and_shows_in_admin_failures(
    web: Starlette, client: httpx.AsyncClient
) -> None:
    app = domain_app(web)
    app.bus.on(OrderPaid, explode, name="ledger:book")
    with capture_failures(app.bus) as failures:
        r = await client.post("/orders/8/pay", json={"user_id": 2, "amount": "5"})
    assert r.status_code == 202
    failures.assert_one(listener="ledger:book", error_type=ValueError)
    listed = await client.get("/admin/failures", params={"event": "order.paid"}, headers=AUTH)
    assert listed.status_code == 200
    [row] = listed.json()["failures"]
    assert (row["listener"], row["error_type"], row["message"]) == (
        "ledger:book",
        "ValueError",
        "ledger offline",
    )
    assert json.loads(row["payload"])["order_id"] == 8
    assert row["status"] == "pending"
    bad = await client.get("/admin/failures", params={"limit": "0"}, headers=AUTH)
    assert bad.status_code == 400


@pytest.mark.parametrize(
    ("params", "detail"),
    [
        pytest.param({"limit": "abc"}, "'limit' must be an integer from 1 to 500, not 'abc'",
                     id="limit-text"),
        pytest.param({"limit": "0"}, "'limit' must be an integer from 1 to 500, not '0'",
                     id="limit-0"),
        pytest.param({"limit": "1e3"}, "'limit' must be an integer from 1 to 500, not '1e3'",
                     id="limit-float"),
        pytest.param({"limit": "9" * 5000}, f"'limit' must be an integer from 1 to 500, not "
                     f"{'9' * 5000!r}", id="limit-5000-digits"),
        pytest.param({"status": "lost"},
                     "'status' must be one of 'pending', 'resolved', 'dead', not 'lost'",
                     id="status"),
    ],
)  # fmt: skip
async def test_bad_admin_query_parameters_are_named(
    client: httpx.AsyncClient, params: dict[str, str], detail: str
) -> None:
    """Regression test: ``limit=abc`` answered with Python's ``int()`` message."""
    r = await client.get("/admin/failures", params=params, headers=AUTH)
    assert r.status_code == 400
    assert r.json() == {"error": "bad_request", "detail": detail}


async def test_admin_runs_a_task_now(web: Starlette, client: httpx.AsyncClient) -> None:
    app = domain_app(web)
    async with app.engine.begin() as conn:
        await conn.execute(insert(articles).values(id=3, title="Cron with seconds"))
    client.cookies.set("viewer", "v")
    await client.get("/articles/3")
    await settle(app.bus)
    r = await client.post("/admin/tasks/flush_views/run", headers=AUTH)
    assert r.status_code == 200
    run = r.json()
    assert (run["task_name"], run["trigger"], run["status"]) == (
        "flush_views",
        "manual",
        "succeeded",
    )
    assert await app.views.counts(3) == {3: 1}
    missing = await client.post("/admin/tasks/nope/run", headers=AUTH)
    assert (missing.status_code, missing.json()["error"]) == (404, "unknown_task")
