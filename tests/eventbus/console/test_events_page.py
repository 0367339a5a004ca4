"""The events page over HTTP: the catalog of a bus with a durable transport on the session's
real redis-server, and its AsyncAPI download."""

from __future__ import annotations

import html
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from eventbus import Event, EventBus, EventRegistry, MemoryFailureStore, upcaster
from eventbus.backends.redis import make_redis_client
from eventbus.backends.sql import make_engine
from eventbus.durable import RedisStreams
from tests.console_support import login
from tests.durable.conftest import FAST
from tests.eventbus.console.conftest import console_client

REG = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=REG, durable=True, version=2):
    """An order was paid (shown on the page)."""

    order_id: int
    currency: str = "EUR"


class Refunded(Event, name="order.refunded", registry=REG):
    order_id: int


@upcaster("order.paid", from_version=1, registry=REG)
def _euros(old: dict[str, object]) -> dict[str, object]:
    return {**old, "currency": "EUR"}


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    c = make_redis_client(redis_url, socket_timeout=3.0)
    yield c
    await c.aclose()


def section(page: str, event: str) -> str:
    start = f'<section class="card event" data-event="{event}">'
    found = re.search(re.escape(start) + "(.*?)</section>", page, re.S)
    assert found is not None, event
    return found.group(1)


async def test_the_page_lists_each_event_with_its_listeners_and_the_asyncapi_download(
    client: Redis, tmp_path: Path
) -> None:
    engine = make_engine(tmp_path / "app.db")
    streams = RedisStreams(
        client, engine, service="svc", registry=REG, options=FAST, failures=MemoryFailureStore(),
        prefix=f"events-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)

    async def grant(e: OrderPaid) -> None:
        pass

    bus.on(OrderPaid, grant, durable=True, name="grant")
    bus.on(Refunded, lambda e: None, name="tests:refund-mail")
    try:
        async with console_client(bus) as (http, _):
            await login(http)
            page = html.unescape((await http.get("/ops/events")).text)
            paid = section(page, "order.paid")
            assert '<span class="version">2</span>, durable' in paid
            assert "upcasters from version 1" in paid
            assert "An order was paid (shown on the page)." in paid
            assert re.search(r'data-field="currency">.*?str</td>.*?"EUR"', paid, re.S)
            assert re.search(r'data-field="order_id">.*?int</td>.*?required', paid, re.S)
            assert 'data-group="svc:grant"' in paid
            assert f"{streams.keys.stream('order.paid')}" in paid
            assert "/ops/failures?event=order.paid&listener=grant" in paid
            refunded = section(page, "order.refunded")
            assert "in-process" in refunded and 'data-listener="tests:refund-mail"' in refunded
            assert "Stream" not in refunded

            r = await http.get("/ops/events/asyncapi.json")
            assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
            doc = json.loads(r.text)
            assert doc["asyncapi"] == "3.0.0"
            assert {o["title"] for o in doc["operations"].values()} >= {"svc:grant"}
            overview = (await http.get("/ops/")).text
            assert "<dt>declared</dt><dd>" in overview
    finally:
        await engine.dispose()


async def test_a_failure_page_shows_the_payload_as_this_process_reads_it() -> None:
    from datetime import UTC, datetime

    from eventbus import FailureRecord

    now = datetime.now(UTC)
    row = FailureRecord(
        id="f" * 32, event_id="e1", event_name="order.paid", payload='{"order_id": 5}',
        payload_ok=True, listener="grant", error_type="RuntimeError", message="down",
        traceback="", first_failed_at=now, last_failed_at=now,
        note="durable group=svc:grant stream=s entry=1-0 deliveries=3 version=1",
    )  # fmt: skip
    store = MemoryFailureStore()
    store.record(row)
    bus = EventBus(REG, store)
    async with console_client(bus) as (http, _):
        await login(http)
        page = html.unescape((await http.get(f"/ops/failures/{row.id}")).text)
    assert "stored at version 1, declared version 2" in page
    assert "OrderPaid(order_id=5, currency='EUR')" in page  # through the upcaster
