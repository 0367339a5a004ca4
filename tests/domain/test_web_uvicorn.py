"""The web application under a real uvicorn server on a loopback port: a real redirect."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import uvicorn

from domain.web import WebConfig, _server_options, create_app
from tests.console_support import _NONCE, TOKEN, field_of, hang_up_mid_body, serving


async def test_a_real_redirect_round_trip_under_uvicorn(tmp_path: Path) -> None:
    app = create_app(WebConfig(db=tmp_path / "web.db", app_options={"refill_watermark": 5}))
    config = uvicorn.Config(app, lifespan="on", log_level="warning", ws="none", http="h11")
    async with serving(config) as base:
        async with httpx.AsyncClient(base_url=base, timeout=5) as client:
            created = await client.post("/links", json={"url": "https://example.com/x"})
            assert created.status_code == 201
            code = created.json()["code"]
            assert created.json()["short_url"] == f"{base}/{code}"
            r = await client.get(f"/{code}", follow_redirects=False)
            assert r.status_code == 302
            assert r.headers["location"] == "https://example.com/x"
            assert (await client.get("/no-such")).status_code == 404
    assert not hasattr(app.state, "domain")  # the lifespan ran its shutdown


async def _logins_until_refused(
    base: str, forwarded: Callable[[int], str], tries: int = 11
) -> list[int]:
    """Wrong tokens at the console's login, each attempt from another forwarded address."""
    statuses = []
    async with httpx.AsyncClient(base_url=base, timeout=5) as client:
        for i in range(tries):
            form = await client.get("/ops/login")
            r = await client.post(
                "/ops/login",
                data={"nonce": field_of(_NONCE, form.text), "user": "eve", "token": "w" * 20},
                headers={"X-Forwarded-For": forwarded(i)},
            )
            statuses.append(r.status_code)
    return statuses


@pytest.mark.parametrize(
    ("trusted", "last"),
    [
        pytest.param(None, 429, id="believed-from-nobody"),
        pytest.param("127.0.0.1", 401, id="believed-from-the-configured-proxy"),
    ],
)
async def test_forwarded_headers_from_loopback_are_ignored_unless_configured(
    tmp_path: Path, trusted: str | None, last: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: ``python -m domain.web`` ran uvicorn with its defaults, which believe
    ``X-Forwarded-For`` from any loopback peer, so a client on 127.0.0.1 chose its address:
    a fresh one for each wrong token, and the login throttle never refused it."""
    config = WebConfig(
        db=tmp_path / "web.db",
        console_token=TOKEN,
        app_options={"refill_watermark": 5},
        trusted_proxies=trusted,
    )
    web = create_app(config)
    options = _server_options(config, host="127.0.0.1", port=0)
    options.update(log_level="warning", lifespan="on", ws="none", http="h11")
    async with serving(uvicorn.Config(web, **options)) as base:
        statuses = await _logins_until_refused(base, lambda i: f"198.51.100.{i + 1}")
    # 10 wrong tokens from one address, and the 11th attempt from it is refused (429);
    # behind a trusted proxy, each forwarded address is another client (401: a wrong token)
    assert statuses == [401] * 10 + [last]
    seen = [
        r.getMessage().rsplit(" ", 1)[1]
        for r in caplog.records
        if r.getMessage().startswith("console login refused for 'eve' from")
    ]
    assert seen == (
        ["127.0.0.1"] * 10 if trusted is None else [f"198.51.100.{i}" for i in range(1, 12)]
    )


async def test_a_client_that_hangs_up_mid_body_logs_no_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: ``ClientDisconnect`` went up from the JSON body reader, and uvicorn
    logged an ERROR "Exception in ASGI application" with its traceback."""
    web = create_app(WebConfig(db=tmp_path / "web.db", app_options={"refill_watermark": 5}))
    caplog.set_level(logging.INFO)
    await hang_up_mid_body(
        web,
        b"POST /links HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"url": "https://exa',
        lifespan="on",
    )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not [r for r in caplog.records if r.exc_info]
    assert "the client hung up while sending the body of POST /links" in caplog.messages
