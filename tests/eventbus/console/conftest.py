"""Fixtures of the console tests: a bus with a listener that fails until it is fixed
(``tests:invoice``), and an httpx client of its console mounted at ``/ops``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from eventbus import EventBus, MemoryFailureStore
from eventbus.console import Console, bus_pages
from tests.console_support import TOKEN
from tests.eventbus.helpers import OrderPaid, reg


class Invoicer:
    """The listener ``tests:invoice``: raises while ``broken``, records what it invoiced."""

    def __init__(self) -> None:
        self.broken = True
        self.invoiced: list[int] = []

    def __call__(self, event: Any) -> None:  # any event with an order_id (domain's too)
        if self.broken:
            raise ConnectionError(f"invoice service down for order {event.order_id}")
        self.invoiced.append(event.order_id)


def make_bus(invoicer: Invoicer) -> EventBus:
    bus = EventBus(reg, MemoryFailureStore(), retry_backoff=0)
    bus.on(OrderPaid, invoicer, name="tests:invoice")
    return bus


@asynccontextmanager
async def console_client(
    bus: EventBus, **options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, Console]]:
    """An httpx client of a Starlette app with the bus's console at ``/ops`` (bus entered)."""
    options.setdefault("secret", TOKEN)
    console = Console(bus_pages(bus), **options)
    web = Starlette(routes=[Mount("/ops", console)])
    transport = httpx.ASGITransport(app=web, client=("203.0.113.9", 5555))
    async with bus, httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        yield c, console


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def invoicer() -> Invoicer:
    return Invoicer()


@pytest.fixture
def bus(invoicer: Invoicer) -> EventBus:
    return make_bus(invoicer)


@pytest.fixture
async def client(bus: EventBus) -> AsyncIterator[httpx.AsyncClient]:
    async with console_client(bus) as (c, _console):
        yield c
