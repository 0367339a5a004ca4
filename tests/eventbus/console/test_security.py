"""The console's security rules, over HTTP: login, sessions, CSRF, POST-only actions,
read-only mode, the action log, and the headers on every response."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx
import itsdangerous
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from eventbus import EventBus, FailureStatus
from eventbus.console import Action, Console, LoginSecretError, View, bus_pages
from tests.console_support import TOKEN, csrf_of, field_of, login
from tests.eventbus.console.conftest import Invoicer, console_client
from tests.eventbus.helpers import OrderPaid

KEY = "a-session-key-for-the-auth-tests"


async def a_failure(bus: EventBus) -> str:
    bus.emit(OrderPaid(order_id=1, user_id=2))
    [rec] = await bus.failures.query()
    return rec.id


def view_paths(bus: EventBus, failure_id: str) -> list[str]:
    return ["/ops/", "/ops/actions"] + [
        f"/ops/{page.slug}{route.path.replace('{failure_id}', failure_id)}"
        for page in bus_pages(bus)
        for route in page.routes()
        if isinstance(route, View)
    ]


def action_paths(bus: EventBus, failure_id: str) -> list[str]:
    return [
        f"/ops/{page.slug}{route.path.replace('{failure_id}', failure_id)}"
        for page in bus_pages(bus)
        for route in page.routes()
        if isinstance(route, Action)
    ]


# -- configuration ------------------------------------------------------------------------------


def test_a_console_needs_exactly_one_way_to_log_in(bus: EventBus) -> None:
    with pytest.raises(ValueError, match="exactly one of secret= .* and auth="):
        Console(bus_pages(bus))
    with pytest.raises(ValueError, match="exactly one of"):
        Console(bus_pages(bus), secret=TOKEN, auth=lambda r: "ann", session_key=KEY)


@pytest.mark.parametrize("secret", ["short", "   ", "x" * 15])
def test_a_weak_secret_is_refused_with_its_length(bus: EventBus, secret: str) -> None:
    with pytest.raises(LoginSecretError, match="at least 16 characters"):
        Console(bus_pages(bus), secret=secret)


def test_the_repr_never_shows_the_secret(bus: EventBus) -> None:
    assert TOKEN not in repr(Console(bus_pages(bus), secret=TOKEN))


# -- login and sessions --------------------------------------------------------------------------


async def test_without_a_session_every_page_leads_to_the_login_form(
    bus: EventBus, client: httpx.AsyncClient
) -> None:
    failure_id = await a_failure(bus)
    for path in view_paths(bus, failure_id):
        r = await client.get(path)
        assert r.status_code == 303, path
        assert r.headers["location"].startswith("/ops/login?next="), path
    login_page = await client.get("/ops/login?next=/ops/bus")
    assert login_page.status_code == 200
    assert 'name="token"' in login_page.text
    assert 'value="/ops/bus"' in login_page.text


async def test_without_a_session_no_action_runs(bus: EventBus, client: httpx.AsyncClient) -> None:
    failure_id = await a_failure(bus)
    for path in action_paths(bus, failure_id):
        r = await client.post(path, data={"note": "x", "confirm": "yes"})
        assert r.status_code == 303, path
        assert r.headers["location"].startswith("/ops/login"), path
    assert [r.status for r in await bus.failures.query()] == [FailureStatus.PENDING]


async def test_a_wrong_token_is_refused_and_sets_no_session(client: httpx.AsyncClient) -> None:
    form = await client.get("/ops/login")
    nonce = field_of(re.compile(r'name="nonce" value="([^"]+)"'), form.text)
    r = await client.post(
        "/ops/login", data={"nonce": nonce, "user": "ann", "token": "nope", "next": "/ops/bus"}
    )
    assert r.status_code == 401
    assert "Wrong token." in r.text
    assert 'name="next" value="/ops/bus"' in r.text  # the form again, going to the same page
    assert "eventbus_console=" not in r.headers.get("set-cookie", "")
    assert (await client.get("/ops/")).status_code == 303


async def test_the_login_form_needs_a_name(client: httpx.AsyncClient) -> None:
    form = await client.get("/ops/login")
    nonce = field_of(re.compile(r'name="nonce" value="([^"]+)"'), form.text)
    r = await client.post("/ops/login", data={"nonce": nonce, "user": "  ", "token": TOKEN})
    assert r.status_code == 401
    assert "Give your name" in r.text


async def test_a_login_post_without_the_form_s_nonce_is_refused(
    client: httpx.AsyncClient,
) -> None:
    """Login CSRF: a post that did not come from our form (no nonce cookie) cannot sign in."""
    r = await client.post("/ops/login", data={"nonce": "forged", "user": "ann", "token": TOKEN})
    assert r.status_code == 403
    assert "expired or came from another site" in r.text
    assert (await client.get("/ops/")).status_code == 303


async def test_the_session_cookie_is_httponly_strict_and_scoped(client: httpx.AsyncClient) -> None:
    form = await client.get("/ops/login")
    nonce = field_of(re.compile(r'name="nonce" value="([^"]+)"'), form.text)
    r = await client.post("/ops/login", data={"nonce": nonce, "user": "ann", "token": TOKEN})
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("eventbus_console="))
    attributes = {a.strip().split("=")[0].lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "max-age", "path"} <= attributes
    assert "samesite=strict" in cookie.lower()
    assert "path=/ops" in cookie.lower()
    assert "max-age=28800" in cookie.lower()  # 8 hours


@pytest.mark.parametrize(
    "next_url",
    ["https://evil.example/ops/", "//evil.example/ops/", "/elsewhere", "/ops\\@evil", ""],
)
async def test_login_never_redirects_out_of_the_console(
    client: httpx.AsyncClient, next_url: str
) -> None:
    form = await client.get("/ops/login")
    nonce = field_of(re.compile(r'name="nonce" value="([^"]+)"'), form.text)
    r = await client.post(
        "/ops/login", data={"nonce": nonce, "user": "ann", "token": TOKEN, "next": next_url}
    )
    assert r.status_code == 303
    assert r.headers["location"] == "/ops/"


async def test_login_returns_to_the_page_asked_for(client: httpx.AsyncClient) -> None:
    form = await client.get("/ops/login?next=/ops/bus")
    nonce = field_of(re.compile(r'name="nonce" value="([^"]+)"'), form.text)
    r = await client.post(
        "/ops/login", data={"nonce": nonce, "user": "ann", "token": TOKEN, "next": "/ops/bus"}
    )
    assert r.headers["location"] == "/ops/bus"


async def test_an_expired_session_leads_back_to_login(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cookie signed 8 hours and 1 second ago (the default session_ttl is 8 hours)."""
    real = itsdangerous.TimestampSigner.get_timestamp
    monkeypatch.setattr(
        itsdangerous.TimestampSigner, "get_timestamp", lambda self: real(self) - 8 * 3600 - 1
    )
    form = await client.get("/ops/login")
    nonce = field_of(re.compile(r'name="nonce" value="([^"]+)"'), form.text)
    monkeypatch.setattr(itsdangerous.TimestampSigner, "get_timestamp", real)
    r = await client.post("/ops/login", data={"nonce": nonce, "user": "ann", "token": TOKEN})
    assert r.status_code == 403  # the login form's own nonce expired long ago
    monkeypatch.setattr(
        itsdangerous.TimestampSigner, "get_timestamp", lambda self: real(self) - 8 * 3600 - 1
    )
    await login(client)  # signed in the past...
    monkeypatch.setattr(itsdangerous.TimestampSigner, "get_timestamp", real)
    r = await client.get("/ops/")  # ...and expired now
    assert r.status_code == 303
    assert r.headers["location"].startswith("/ops/login")


async def test_a_tampered_session_cookie_is_no_session(client: httpx.AsyncClient) -> None:
    await login(client)
    value = client.cookies["eventbus_console"]
    client.cookies.set(
        "eventbus_console", value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1], path="/ops"
    )
    r = await client.get("/ops/")
    assert r.status_code == 303


async def test_a_session_from_another_secret_is_refused(bus: EventBus) -> None:
    async with console_client(bus) as (c1, _):
        await login(c1)
        cookie = c1.cookies["eventbus_console"]
    async with console_client(bus, secret="another-secret-of-16+") as (c2, _):
        c2.cookies.set("eventbus_console", cookie, path="/ops")
        assert (await c2.get("/ops/")).status_code == 303


async def test_logout_is_a_post_with_the_csrf_token(client: httpx.AsyncClient) -> None:
    csrf = await login(client)
    assert (await client.get("/ops/logout")).status_code == 405
    r = await client.post("/ops/logout", data={"csrf": "wrong"})
    assert r.status_code == 403
    assert (await client.get("/ops/")).status_code == 200
    r = await client.post("/ops/logout", data={"csrf": csrf})
    assert r.status_code == 303
    assert (await client.get("/ops/")).status_code == 303


# -- CSRF and POST-only actions ------------------------------------------------------------------


@pytest.mark.parametrize("csrf", [None, "", "not-the-token"])
async def test_an_action_without_the_right_csrf_token_is_403_and_changes_nothing(
    bus: EventBus, client: httpx.AsyncClient, invoicer: Invoicer, csrf: str | None
) -> None:
    failure_id = await a_failure(bus)
    await login(client)
    invoicer.broken = False
    data = {"note": "fixed", "confirm": "yes"} | ({} if csrf is None else {"csrf": csrf})
    for path in action_paths(bus, failure_id):
        r = await client.post(path, data=data)
        assert r.status_code == 403, path
        assert "CSRF token is missing or wrong" in r.text
    [rec] = await bus.failures.query()
    assert (rec.status, rec.attempts, invoicer.invoiced) == (FailureStatus.PENDING, 1, [])


async def test_another_user_s_csrf_token_does_not_work(bus: EventBus) -> None:
    failure_id = await a_failure(bus)
    web = Starlette(routes=[Mount("/ops", Console(bus_pages(bus), secret=TOKEN))])
    transport = httpx.ASGITransport(app=web)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as mallory,
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as ann,
    ):
        mallory_csrf = await login(mallory, user="mallory")
        await login(ann, user="ann")
        r = await ann.post(
            f"/ops/failures/{failure_id}/resolve", data={"csrf": mallory_csrf, "note": "x"}
        )
        assert r.status_code == 403
    [rec] = await bus.failures.query()
    assert rec.status == FailureStatus.PENDING


async def test_no_action_is_reachable_by_get(
    bus: EventBus, client: httpx.AsyncClient, invoicer: Invoicer
) -> None:
    failure_id = await a_failure(bus)
    await login(client)
    invoicer.broken = False
    views = view_paths(bus, failure_id)
    for path in action_paths(bus, failure_id):
        r = await client.get(path, params={"note": "x", "confirm": "yes"})
        # a view at the same path only shows (the purge confirmation); the others are 405,
        # /failures/retry too (it was read as a failure id: 404)
        assert r.status_code == (200 if path in views else 405), path
        if r.status_code == 405:
            assert r.headers["allow"] == "POST"
        assert "<h1>" in r.text
    [rec] = await bus.failures.query()
    assert (rec.status, invoicer.invoiced) == (FailureStatus.PENDING, [])


async def test_a_form_that_is_not_urlencoded_or_too_large_is_refused(
    bus: EventBus, client: httpx.AsyncClient
) -> None:
    failure_id = await a_failure(bus)
    csrf = await login(client)
    path = f"/ops/failures/{failure_id}/resolve"
    r = await client.post(path, json={"csrf": csrf, "note": "x"})
    assert r.status_code == 415
    r = await client.post(path, data={"csrf": csrf, "note": "x" * 70_000})
    assert r.status_code == 413
    headers = {"content-type": "application/x-www-form-urlencoded"}
    r = await client.post(path, content=b"csrf=" + csrf.encode() + b"&note=\xff", headers=headers)
    assert r.status_code == 400
    assert "not UTF-8" in r.text
    r = await client.post(path, content="&".join(["a=1"] * 101).encode(), headers=headers)
    assert r.status_code == 400
    assert "more than 100 fields" in r.text
    [rec] = await bus.failures.query()
    assert rec.status == FailureStatus.PENDING


# -- read-only mode ------------------------------------------------------------------------------


async def test_read_only_shows_no_action_and_refuses_every_post(
    bus: EventBus, invoicer: Invoicer
) -> None:
    failure_id = await a_failure(bus)
    async with console_client(bus, read_only=True) as (client, console):
        csrf = await login(client)
        for path in view_paths(bus, failure_id):
            page = (await client.get(path)).text
            forms = re.findall(r'<form[^>]*method="post"[^>]*action="([^"]+)"', page)
            assert forms == ["/ops/logout"], path
            assert "Read-only" in page
        invoicer.broken = False
        for path in action_paths(bus, failure_id):
            r = await client.post(path, data={"csrf": csrf, "note": "x", "confirm": "yes"})
            assert r.status_code == 403, path
            assert "read-only" in r.text
        [rec] = await bus.failures.query()
        assert (rec.status, invoicer.invoiced) == (FailureStatus.PENDING, [])
        refused = [e for e in console.audit.entries() if e.action != "login"]
        assert len(refused) == len(action_paths(bus, failure_id))
        assert {e.outcome for e in refused} == {"refused"}


# -- the action log ------------------------------------------------------------------------------


async def test_every_action_is_logged_with_who_what_and_when(
    bus: EventBus, invoicer: Invoicer, caplog: pytest.LogCaptureFixture
) -> None:
    failure_id = await a_failure(bus)
    async with console_client(bus) as (client, console):
        csrf = await login(client, user="ann")
        await client.post(f"/ops/failures/{failure_id}/resolve", data={"csrf": csrf, "note": ""})
        with caplog.at_level("INFO", logger="eventbus.console.audit"):
            r = await client.post(
                f"/ops/failures/{failure_id}/resolve", data={"csrf": csrf, "note": "dup"}
            )
        assert r.status_code == 303
        [ok, refused, login_entry] = console.audit.entries()
        assert (login_entry.action, login_entry.outcome) == ("login", "ok")
        assert (ok.user, ok.action, ok.target, ok.outcome) == (
            "ann",
            "failures.resolve",
            failure_id,
            "ok",
        )
        assert ok.client == "203.0.113.9"
        assert (refused.action, refused.outcome) == ("failures.resolve", "refused")
        assert ok.at >= refused.at
        assert any("failures.resolve" in m and "'ann'" in m for m in caplog.messages)
        page = (await client.get("/ops/actions")).text
        assert page.count("failures.resolve") == 2
        assert "ann" in page and failure_id in page and "refused" in page


# -- another application's login -----------------------------------------------------------------


async def test_an_auth_callable_replaces_the_login_form(bus: EventBus) -> None:
    def auth(request: Request) -> str | None:
        return request.headers.get("x-user")

    failure_id = await a_failure(bus)
    async with console_client(bus, secret=None, auth=auth, session_key=KEY) as (client, console):
        assert (await client.get("/ops/")).status_code == 401
        assert (await client.get("/ops/login")).status_code == 401
        client.headers["x-user"] = "bob"
        page = await client.get(f"/ops/failures/{failure_id}")
        assert page.status_code == 200
        assert "bob" in page.text
        r = await client.post(f"/ops/failures/{failure_id}/resolve", data={"note": "x"})
        assert r.status_code == 403  # still a CSRF token per form
        r = await client.post(
            f"/ops/failures/{failure_id}/resolve", data={"note": "x", "csrf": csrf_of(page.text)}
        )
        assert r.status_code == 303
        assert console.audit.entries()[0].user == "bob"


async def test_an_async_auth_callable_and_a_login_url(bus: EventBus) -> None:
    async def auth(request: Request) -> str | None:
        return None

    async with console_client(bus, secret=None, auth=auth, login_url="/sso", session_key=KEY) as (
        client,
        _,
    ):
        r = await client.get("/ops/bus")
        assert (r.status_code, r.headers["location"]) == (303, "/sso")


# -- headers -------------------------------------------------------------------------------------


async def test_every_response_has_the_security_headers(
    bus: EventBus, client: httpx.AsyncClient
) -> None:
    failure_id = await a_failure(bus)
    responses = [await client.get("/ops/login"), await client.get("/ops/static/console.css")]
    await login(client)
    responses += [await client.get(p) for p in view_paths(bus, failure_id)]
    responses.append(await client.get("/ops/no-such-page"))
    for r in responses:
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["cache-control"] == "no-store"


async def test_pages_have_no_inline_script_or_style(
    bus: EventBus, client: httpx.AsyncClient
) -> None:
    """What the CSP would block: a page that needs it would break in the browser."""
    failure_id = await a_failure(bus)
    await login(client)
    for path in [*view_paths(bus, failure_id), "/ops/login"]:
        page = (await client.get(path)).text
        assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", page) == [], path
        assert re.findall(r"\son[a-z]+=", page) == [], path
        assert re.findall(r"\sstyle=", page) == [], path
        assert "<style" not in page, path


async def test_an_unknown_page_is_a_404_page(client: httpx.AsyncClient) -> None:
    await login(client)
    r = await client.get("/ops/no-such-page")
    assert r.status_code == 404
    assert "There is no console page at /ops/no-such-page" in r.text


def test_session_ttl_is_configurable(bus: EventBus) -> None:
    console = Console(bus_pages(bus), secret=TOKEN, session_ttl=timedelta(minutes=5))
    assert console._signer.ttl == timedelta(minutes=5)
