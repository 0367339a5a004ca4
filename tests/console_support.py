"""Helpers of the console tests: signing in with httpx, reading forms, a live server for the
browser, and headless Chromium driven by selenium.

The live server runs uvicorn in a thread of its own (its own event loop), because selenium's
calls block: the test thread drives the browser, the server thread serves it.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Literal

import anyio
import httpx
import pytest
import uvicorn

TOKEN = "console-token-for-tests"

_NONCE = re.compile(r'name="nonce" value="([^"]+)"')
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def field_of(pattern: re.Pattern[str], page: str) -> str:
    found = pattern.search(page)
    assert found is not None, f"no {pattern.pattern!r} in the page"
    return html.unescape(found.group(1))


def csrf_of(page: str) -> str:
    """The CSRF token of the first form of a console page."""
    return field_of(_CSRF, page)


async def login(client: httpx.AsyncClient, base: str = "/ops", user: str = "ann") -> str:
    """Sign in through the login form; return the session's CSRF token."""
    form = await client.get(f"{base}/login")
    assert form.status_code == 200
    done = await client.post(
        f"{base}/login",
        data={"nonce": field_of(_NONCE, form.text), "user": user, "token": TOKEN},
    )
    assert done.status_code == 303, done.text
    overview = await client.get(f"{base}/")
    assert overview.status_code == 200
    return csrf_of(overview.text)


def text(response: httpx.Response) -> str:
    """A page's HTML with its entities decoded (``&#39;`` reads ``'``)."""
    return html.unescape(response.text)


def result_banner(page: str) -> str:
    """The text of the banner that shows an action's result (empty when there is none)."""
    found = re.search(r'id="result">(.*?)<small', page, re.S)
    return html.unescape(found.group(1)).strip() if found else ""


class LiveServer:
    """*app* under uvicorn on a free loopback port, in a thread, lifespan included."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, lifespan="on", log_level="warning", ws="none", http="h11")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the live server did not start (see the log above)")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(20)
        self.sock.close()


class _ReadyServer(uvicorn.Server):
    """A uvicorn server that says when it is ready, instead of being polled for it."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.ready.set()


@asynccontextmanager
async def serving(config: uvicorn.Config) -> AsyncIterator[str]:
    """Serve *config*'s app in this event loop on a free loopback port; yield its base URL.

    The socket is bound before the server starts, so the port cannot be taken in between
    (the host and port of *config* are not used)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    server = _ReadyServer(config)
    with sock:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                await server.ready.wait()
            try:
                yield f"http://127.0.0.1:{sock.getsockname()[1]}"
            finally:
                server.should_exit = True


async def hang_up_mid_body(
    web: Any, request: bytes, *, lifespan: Literal["on", "off"] = "off"
) -> None:
    """Serve *web* through a real uvicorn server, send *request* (a body shorter than its
    Content-Length) and hang up; return once the app has handled it. uvicorn's loggers
    propagate to the root (``log_config=None``), where ``caplog`` listens."""
    handled = anyio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        try:
            await web(scope, receive, send)
        finally:
            if scope["type"] == "http":
                handled.set()

    config = uvicorn.Config(app, lifespan=lifespan, log_config=None, ws="none", http="h11")
    async with serving(config) as base:
        port = int(base.rsplit(":", 1)[1])
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            await stream.send(request)
        with anyio.fail_after(10):
            await handled.wait()


#: The flags that make Debian's Chromium work as root on a closed network.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium session with a fresh profile; skipped when it is not installed
    (failed under CI, which must run it: ``make test`` installs it)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        message = "chromium and chromedriver are not installed (make servers installs them)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    with tempfile.TemporaryDirectory(prefix="console-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        options.add_argument("--window-size=1280,900")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = webdriver.Chrome(options=options, service=Service(driver_path))
        driver.set_page_load_timeout(20)
        try:
            yield driver
        finally:
            driver.quit()
