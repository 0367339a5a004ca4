"""Where the console redirects after a login or an action stays inside it (review finding 5):
a dot segment, plain or percent-encoded, is resolved by the browser, so ``/ops/../x`` leaves
the console (in the domain's app, for a short link anyone can create to any site)."""

from __future__ import annotations

import re

import httpx
import pytest

from eventbus import EventBus
from tests.console_support import TOKEN, field_of, login
from tests.eventbus.helpers import OrderPaid

LEAVING = [
    "/ops/../welcome",
    "/ops/%2e%2e/welcome",
    "/ops/%2E%2E/welcome",
    "/ops/.%2e/welcome",
    "/ops/%2e./welcome",
    "/ops/./../../x",
    "/ops/bus/../../x",
    "/ops/bus/..",
    "/ops/.",
    "http://testserver/ops/../welcome",
]


@pytest.mark.parametrize("next_url", LEAVING)
async def test_login_never_follows_a_dot_segment_out_of_the_console(
    client: httpx.AsyncClient, next_url: str
) -> None:
    form = await client.get("/ops/login", params={"next": next_url})
    assert "welcome" not in form.text and "/x" not in re.sub(r"<[^>]+>", "", form.text)
    nonce = field_of(re.compile(r'name="nonce" value="([^"]+)"'), form.text)
    r = await client.post(
        "/ops/login", data={"nonce": nonce, "user": "ann", "token": TOKEN, "next": next_url}
    )
    assert r.status_code == 303
    assert r.headers["location"] == "/ops/"


async def test_dots_inside_a_segment_are_not_dot_segments(client: httpx.AsyncClient) -> None:
    form = await client.get("/ops/login", params={"next": "/ops/failures?event=a..b"})
    nonce = field_of(re.compile(r'name="nonce" value="([^"]+)"'), form.text)
    r = await client.post(
        "/ops/login",
        data={"nonce": nonce, "user": "ann", "token": TOKEN, "next": "/ops/failures?event=a..b"},
    )
    assert r.headers["location"] == "/ops/failures?event=a..b"


@pytest.mark.parametrize("referer", [f"http://testserver{p}" for p in LEAVING[:3]])
async def test_an_action_never_goes_back_through_a_dot_segment(
    bus: EventBus, client: httpx.AsyncClient, referer: str
) -> None:
    bus.emit(OrderPaid(order_id=1, user_id=2))
    [failure] = await bus.failures.query()
    csrf = await login(client)
    r = await client.post(
        f"/ops/failures/{failure.id}/resolve",
        data={"csrf": csrf, "note": "x"},
        headers={"referer": referer},
    )
    assert r.status_code == 303
    assert r.headers["location"].startswith("/ops/failures/")  # the page's own, not the referer
    r = await client.post(  # refused (already resolved): the error page's way back
        f"/ops/failures/{failure.id}/resolve",
        data={"csrf": csrf, "note": "x"},
        headers={"referer": referer},
    )
    assert r.status_code == 400
    assert "welcome" not in r.text
