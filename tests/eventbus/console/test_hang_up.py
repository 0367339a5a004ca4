"""A client that hangs up in the middle of a form, under a real uvicorn server."""

from __future__ import annotations

import logging

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from eventbus import EventBus
from eventbus.console import Console, bus_pages
from tests.console_support import TOKEN, hang_up_mid_body


async def test_a_client_that_hangs_up_mid_form_logs_no_traceback(
    bus: EventBus, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: starlette's ``ClientDisconnect`` went up from the form reader, and
    uvicorn logged it as a ~70-line ERROR "Exception in ASGI application"."""
    web = Starlette(routes=[Mount("/ops", Console(bus_pages(bus), secret=TOKEN))])
    caplog.set_level(logging.INFO)
    async with bus:
        await hang_up_mid_body(
            web,
            b"POST /ops/login HTTP/1.1\r\nHost: t\r\n"
            b"Content-Type: application/x-www-form-urlencoded\r\n"
            b"Content-Length: 1000\r\n\r\nnonce=abc&user=ann&tok",
        )
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert not [r for r in caplog.records if r.exc_info]
    assert "the client hung up while sending the form of POST /ops/login" in caplog.messages
