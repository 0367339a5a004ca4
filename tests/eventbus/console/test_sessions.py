"""Sessions that end, logins that are logged and limited, and the console behind proxies and
several processes (the review's risks 1 to 3), over httpx."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from eventbus import EventBus, FailureStatus
from eventbus.console import Console, LoginThrottle, MemorySessionRevocations, bus_pages
from tests.console_support import TOKEN, field_of, login, result_banner
from tests.eventbus.console.conftest import console_client
from tests.eventbus.helpers import OrderPaid

NONCE = re.compile(r'name="nonce" value="([^"]+)"')
COOKIE = "eventbus_console"


async def a_failure(bus: EventBus) -> str:
    bus.emit(OrderPaid(order_id=1, user_id=2))
    [rec] = await bus.failures.query()
    return rec.id


async def try_login(
    client: httpx.AsyncClient, token: str, *, user: str = "ann", **headers: str
) -> httpx.Response:
    form = await client.get("/ops/login", headers=headers)
    return await client.post(
        "/ops/login",
        data={"nonce": field_of(NONCE, form.text), "user": user, "token": token},
        headers=headers,
    )


def browser(web: Starlette, address: str = "203.0.113.9") -> httpx.AsyncClient:
    """A client of *web* from *address*, with its own cookies."""
    transport = httpx.ASGITransport(app=web, client=(address, 5555))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver")


def mounted(console: Console) -> Starlette:
    return Starlette(routes=[Mount("/ops", console)])


@asynccontextmanager
async def replicas(bus: EventBus, n: int, **options: Any) -> AsyncIterator[list[httpx.AsyncClient]]:
    """*n* consoles of one bus (as processes would have: one each), each behind its own
    client; the cookies a test copies from one to another are what a browser would send."""
    clients = [browser(mounted(Console(bus_pages(bus), **options))) for _ in range(n)]
    async with bus:
        try:
            yield clients
        finally:
            for c in clients:
                await c.aclose()


# -- risk 1: logout ends the session ------------------------------------------------------------


async def test_a_cookie_saved_before_logout_no_longer_opens_a_page_or_runs_an_action(
    bus: EventBus,
) -> None:
    """Regression test: the session was a signed cookie and nothing else; a copy taken before
    logout still worked, and with its CSRF token an action ran."""
    failure_id = await a_failure(bus)
    async with console_client(bus) as (client, console):
        csrf = await login(client)
        stolen = client.cookies[COOKIE]
        r = await client.post("/ops/logout", data={"csrf": csrf})
        assert (r.status_code, r.headers["location"]) == (303, "/ops/login")
        client.cookies.set(COOKIE, stolen, path="/ops")
        r = await client.get("/ops/failures")
        assert r.status_code == 303 and r.headers["location"].startswith("/ops/login")
        r = await client.post(
            f"/ops/failures/{failure_id}/resolve", data={"csrf": csrf, "note": "x"}
        )
        assert r.status_code == 303 and r.headers["location"].startswith("/ops/login")
        [logout, *_] = console.audit.entries()
        assert (logout.action, logout.user, logout.outcome) == ("logout", "ann", "ok")
    [rec] = await bus.failures.query()
    assert rec.status == FailureStatus.PENDING


async def test_a_logout_reaches_every_replica_that_shares_the_revocations(bus: EventBus) -> None:
    shared = MemorySessionRevocations()  # in one process; SqlSessionRevocations across them
    async with replicas(bus, 2, secret=TOKEN, revocations=shared) as (a, b):
        csrf = await login(a)
        b.cookies.set(COOKIE, a.cookies[COOKIE], path="/ops")
        assert (await b.get("/ops/")).status_code == 200  # one session, any replica
        await a.post("/ops/logout", data={"csrf": csrf})
        assert (await b.get("/ops/")).status_code == 303


async def test_without_a_shared_store_a_logout_holds_in_its_process_only(bus: EventBus) -> None:
    """The default, as documented: each process keeps its own revocations."""
    async with replicas(bus, 2, secret=TOKEN) as (a, b):
        csrf = await login(a)
        b.cookies.set(COOKIE, a.cookies[COOKIE], path="/ops")
        await a.post("/ops/logout", data={"csrf": csrf})
        a.cookies.set(COOKIE, b.cookies[COOKIE], path="/ops")
        assert (await a.get("/ops/")).status_code == 303
        assert (await b.get("/ops/")).status_code == 200  # until its TTL: see docs/console.md


async def test_signing_in_again_after_logout_gives_a_new_session(
    client: httpx.AsyncClient,
) -> None:
    csrf = await login(client)
    await client.post("/ops/logout", data={"csrf": csrf})
    again = await login(client)
    assert again != csrf
    assert (await client.get("/ops/")).status_code == 200


async def test_revocations_are_forgotten_when_the_cookie_could_no_longer_be_used() -> None:
    now = [1000.0]
    revocations = MemorySessionRevocations(clock=lambda: now[0])
    await revocations.revoke("s1", ttl=timedelta(hours=8))
    assert await revocations.is_revoked("s1")
    now[0] += 8 * 3600 + 1
    await revocations.revoke("s2", ttl=timedelta(hours=8))  # prunes the expired
    assert len(revocations) == 1
    assert not await revocations.is_revoked("s1")


# -- risk 2: failed logins are logged, and limited per address -----------------------------------


async def test_a_failed_login_is_in_the_action_log(bus: EventBus) -> None:
    async with console_client(bus) as (client, console):
        r = await try_login(client, "wrong-token-guess", user="mallory")
        assert r.status_code == 401
        [entry] = console.audit.entries()
        assert (entry.action, entry.user, entry.client, entry.outcome) == (
            "login",
            "mallory",
            "203.0.113.9",
            "refused",
        )
        assert entry.message == "wrong token"
        await login(client)
        assert console.audit.entries()[0].action == "login"
        assert console.audit.entries()[0].outcome == "ok"


async def test_too_many_failed_logins_from_one_address_are_refused_for_a_while(
    bus: EventBus,
) -> None:
    now = [0.0]
    throttle = LoginThrottle(failures=3, window=timedelta(minutes=15), clock=lambda: now[0])
    console = Console(bus_pages(bus), secret=TOKEN, login_throttle=throttle)
    web = mounted(console)
    async with bus, browser(web) as client, browser(web, "198.51.100.7") as other:
        for _ in range(3):
            assert (await try_login(client, "wrong-token-guess")).status_code == 401
        r = await try_login(client, TOKEN)  # even the right token, while refused
        assert r.status_code == 429
        assert r.headers["retry-after"] == "900"
        assert "Too many failed logins from your address" in r.text
        assert COOKIE not in client.cookies
        refused = console.audit.entries()[0]
        assert (refused.action, refused.outcome) == ("login", "refused")
        assert "too many failed logins" in refused.message
        assert (await try_login(other, TOKEN)).status_code == 303  # another address is not
        now[0] += 15 * 60  # the oldest failure leaves the window
        assert (await try_login(client, TOKEN)).status_code == 303


def test_the_throttle_forgets_old_addresses_beyond_its_bound() -> None:
    throttle = LoginThrottle(failures=1, window=timedelta(minutes=1), max_addresses=2)
    for address in ("a", "b", "c"):
        throttle.failed(address)
    assert throttle.wait("a") == 0  # forgotten: the oldest goes first
    assert throttle.wait("c") > 0


def test_throttle_options_are_checked() -> None:
    with pytest.raises(ValueError, match="failures=0 must be a whole number, at least 1"):
        LoginThrottle(failures=0)
    with pytest.raises(ValueError, match="window=.* must be positive"):
        LoginThrottle(window=timedelta(0))


# -- risk 3: proxies and several processes --------------------------------------------------------


async def test_x_forwarded_proto_counts_only_from_a_trusted_proxy(bus: EventBus) -> None:
    """Regression test: Secure depended on the scheme the server saw; behind a proxy that
    terminates TLS it is http, and the cookies went without Secure. The headers are believed
    only from the proxies configured (anyone can send them)."""
    forwarded = {"x-forwarded-proto": "https", "x-forwarded-for": "192.0.2.44"}

    async def sign_in(client: httpx.AsyncClient) -> tuple[str, str]:
        """Log in through the proxy; the Set-Cookie of the form and of the session."""
        form = await client.get("/ops/login", headers=forwarded)
        nonce_cookie = form.headers["set-cookie"]
        value = re.search(r"eventbus_console_login=([^;]+)", nonce_cookie)
        assert value is not None
        r = await client.post(  # the cookie sent as a browser on HTTPS would send it
            "/ops/login",
            data={"nonce": field_of(NONCE, form.text), "user": "ann", "token": TOKEN},
            headers={**forwarded, "cookie": f"eventbus_console_login={value.group(1)}"},
        )
        assert r.status_code == 303, r.text
        session = next(c for c in r.headers.get_list("set-cookie") if c.startswith(COOKIE + "="))
        return nonce_cookie, session

    for trusted, secure, client_seen in [
        (None, False, "203.0.113.9"),  # not configured: the headers are ignored
        ("203.0.113.9", True, "192.0.2.44"),  # from the proxy: believed
        (["10.0.0.0/8", "203.0.113.0/24"], True, "192.0.2.44"),  # a network of proxies
        ("10.0.0.1", False, "203.0.113.9"),  # from another address than the proxy's
    ]:
        async with console_client(bus, trusted_proxies=trusted) as (client, console):
            cookies = await sign_in(client)
            assert ["secure" in c.lower() for c in cookies] == [secure, secure], trusted
            assert console.audit.entries()[0].client == client_seen, trusted


def test_an_auth_console_needs_a_session_key(bus: EventBus) -> None:
    """Regression test: each process signed with its own random key, so a form posted to
    another worker was refused (CSRF, 403)."""
    with pytest.raises(ValueError, match=r"auth=\.\.\.\) needs session_key="):
        Console(bus_pages(bus), auth=lambda r: "ann")
    with pytest.raises(ValueError, match=r"session_key is 5 characters long; use at least 16"):
        Console(bus_pages(bus), auth=lambda r: "ann", session_key="short")


async def test_an_auth_console_s_forms_work_on_every_process_with_the_same_key(
    bus: EventBus,
) -> None:
    def auth(request: Request) -> str | None:
        return request.headers.get("x-user")

    failure_id = await a_failure(bus)
    key = "a-session-key-shared-by-processes"
    async with replicas(bus, 2, auth=auth, session_key=key) as (a, b):
        for c in (a, b):
            c.headers["x-user"] = "bob"
        page = await a.get(f"/ops/failures/{failure_id}")
        csrf = field_of(re.compile(r'name="csrf" value="([^"]+)"'), page.text)
        b.cookies.set(COOKIE, a.cookies[COOKIE], path="/ops")
        r = await b.post(f"/ops/failures/{failure_id}/resolve", data={"csrf": csrf, "note": "x"})
        assert r.status_code == 303


async def test_an_action_s_result_is_shown_by_whichever_replica_serves_the_redirect(
    bus: EventBus,
) -> None:
    """Regression test: ``?done=N`` named an entry of one process's action log; another
    process showed nothing (or another action's result)."""
    failure_id = await a_failure(bus)
    async with replicas(bus, 2, secret=TOKEN) as (a, b):
        csrf = await login(a)
        r = await a.post(f"/ops/failures/{failure_id}/resolve", data={"csrf": csrf, "note": "x"})
        b.cookies.set(COOKIE, a.cookies[COOKIE], path="/ops")
        page = (await b.get(r.headers["location"])).text
        assert result_banner(page).endswith("resolved.")
        assert "by ann" in page
        token = r.headers["location"].split("done=")[1]  # signed: it cannot be forged
        tampered = r.headers["location"].replace(token, token[:-3] + "abc")
        assert result_banner((await b.get(tampered)).text) == ""


async def test_a_result_link_opened_by_another_session_shows_nothing(bus: EventBus) -> None:
    failure_id = await a_failure(bus)
    web = mounted(Console(bus_pages(bus), secret=TOKEN))
    async with bus, browser(web) as ann, browser(web) as bob:
        csrf = await login(ann)
        r = await ann.post(f"/ops/failures/{failure_id}/resolve", data={"csrf": csrf, "note": "x"})
        location = r.headers["location"]
        await login(bob, user="bob")
        assert result_banner((await bob.get(location)).text) == ""
        assert result_banner((await ann.get(location)).text).endswith("resolved.")
