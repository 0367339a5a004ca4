"""The streams page over HTTP, against a bus with ``RedisStreams`` on the session's real
redis-server: lag, pending and dead per group, replaying a dead letter, bad input, and the
security rules as for every page."""

from __future__ import annotations

import dataclasses
import html
import re
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.applications import Starlette
from starlette.routing import Mount

from eventbus import EventBus, FailureStatus, MemoryFailureStore
from eventbus.backends.redis import make_redis_client
from eventbus.backends.sql import make_engine
from eventbus.console import Console, StreamsPage, bus_pages
from eventbus.durable import DeadLettered, RedisStreams
from tests.console_support import TOKEN, csrf_of, login, result_banner
from tests.durable.conftest import FAST, wait_until
from tests.durable.events import REG, OrderPaid
from tests.eventbus.console.conftest import console_client


class Fragile:
    """The durable listener ``fragile``: raises while ``broken``."""

    def __init__(self) -> None:
        self.broken = True
        self.handled: list[int] = []

    async def __call__(self, event: OrderPaid) -> None:
        if self.broken:
            raise RuntimeError(f"cannot handle order {event.order_id}")
        self.handled.append(event.order_id)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    c = make_redis_client(redis_url, socket_timeout=3.0, max_connections=64)
    yield c
    await c.aclose()


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(tmp_path / "app.db")
    yield eng
    await eng.dispose()


@pytest.fixture
def fragile() -> Fragile:
    return Fragile()


@pytest.fixture
def dead_letters() -> list[DeadLettered]:
    return []


@pytest.fixture
def bus(
    client: Redis, engine: AsyncEngine, fragile: Fragile, dead_letters: list[DeadLettered]
) -> Iterator[EventBus]:
    """A bus of service ``svc`` whose durable listener dies at its first failure; its own key
    prefix keeps other tests' streams out of the page."""
    streams = RedisStreams(
        client,
        engine,
        service="svc",
        registry=REG,
        options=dataclasses.replace(FAST, max_deliveries=1),
        prefix=f"console-{uuid.uuid4().hex[:8]}",
    )
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    bus.on(OrderPaid, fragile, durable=True, name="fragile")
    bus.on(DeadLettered, dead_letters.append, name="tests:dead")
    yield bus


async def publish(bus: EventBus, engine: AsyncEngine, *order_ids: int) -> None:
    async with engine.begin() as conn:
        for order_id in order_ids:
            await bus.publish(OrderPaid(order_id=order_id), conn)


def group_row(page: str, group: str) -> dict[str, str]:
    row = re.search(rf'<tr data-group="{re.escape(group)}">(.*?)</tr>', page, re.S)
    assert row is not None, group
    return dict(re.findall(r'<td class="num (lag|pending|dead)">([^<]*)</td>', row.group(1)))


def dead_ids(page: str) -> list[str]:
    return re.findall(r'<tr data-dead="([^"]+)">', page)


async def test_the_page_shows_each_group_and_replays_a_dead_letter(
    bus: EventBus, engine: AsyncEngine, fragile: Fragile, dead_letters: list[DeadLettered]
) -> None:
    assert [p.slug for p in bus_pages(bus)] == ["failures", "bus", "events", "streams"]
    async with console_client(bus) as (http, console):
        csrf = await login(http)
        await publish(bus, engine, 1, 2)
        await wait_until(lambda: len(dead_letters) == 2, what="two dead letters")
        page = (await http.get("/ops/streams")).text
        assert 'data-event="order.paid"' in page
        assert group_row(page, "svc:fragile") == {"lag": "0", "pending": "0", "dead": "2"}
        first, second = dead_ids(page)
        # the two died in the order their calls ended: the first row's order is either
        order = int(re.findall(r"RuntimeError: cannot handle order (\d)", page)[0])
        assert sorted(map(int, re.findall(r"cannot handle order (\d)", page))) == [1, 2]
        overview = (await http.get("/ops/")).text
        assert "<dt>dead letters</dt><dd>2</dd>" in overview

        fragile.broken = False
        r = await http.post("/ops/streams/replay", data={"csrf": csrf, "event": "order.paid",
                                                         "dead_id": first})  # fmt: skip
        assert r.status_code == 303
        page = (await http.get(r.headers["location"])).text
        assert result_banner(page).startswith(
            f"Replayed dead letter {first} of order.paid to its group (new entry "
        )
        await wait_until(lambda: fragile.handled == [order], what="the replayed event")
        page = (await http.get("/ops/streams")).text
        assert dead_ids(page) == [second]  # the other one is still dead
        assert group_row(page, "svc:fragile")["dead"] == "1"
        [entry] = console.audit.entries(limit=1)
        assert (entry.action, entry.target, entry.outcome) == (
            "streams.replay",
            f"order.paid {first}",
            "ok",
        )
        await wait_until(lambda: _resolved(bus), what="the failure row resolved")


async def _resolved(bus: EventBus) -> bool:
    return len(await bus.failures.query(status=FailureStatus.RESOLVED)) == 1


@pytest.mark.parametrize(
    ("data", "status", "message"),
    [
        pytest.param({"dead_id": "1-0"}, 400, "the field 'event' is empty", id="no-event"),
        pytest.param(
            {"event": "order.paid", "dead_id": "DROP"},
            400,
            "dead_id must be a stream entry id such as 1700000000000-0, not 'DROP'",
            id="bad-id",
        ),
        pytest.param(
            {"event": "order.paid", "dead_id": "1-0"},
            404,
            "There is no dead letter 1-0 of 'order.paid'",
            id="unknown-id",
        ),
        pytest.param(
            {"event": "e" * 301, "dead_id": "1-0"},
            400,
            "the field 'event' is 301 characters long; at most 300",
            id="long-event",
        ),
    ],
)
async def test_bad_replays_are_refused_with_a_message_and_logged(
    bus: EventBus, data: dict[str, str], status: int, message: str
) -> None:
    async with console_client(bus) as (http, console):
        csrf = await login(http)
        r = await http.post("/ops/streams/replay", data={"csrf": csrf, **data})
        assert r.status_code == status
        assert message in html.unescape(r.text)
        [entry] = console.audit.entries(limit=1)
        assert (entry.action, entry.outcome) == ("streams.replay", "refused")


async def test_the_security_rules_hold_for_the_streams_page(
    bus: EventBus, engine: AsyncEngine, dead_letters: list[DeadLettered]
) -> None:
    async with console_client(bus) as (http, _console):
        r = await http.get("/ops/streams")
        assert r.status_code == 303 and "/ops/login" in r.headers["location"]  # no session
        csrf = await login(http)
        await publish(bus, engine, 3)
        await wait_until(lambda: len(dead_letters) == 1, what="the dead letter")
        page = (await http.get("/ops/streams")).text
        [dead_id] = dead_ids(page)
        assert csrf_of(page) == csrf  # the Replay button's form carries the session's token
        data = {"event": "order.paid", "dead_id": dead_id}
        r = await http.post("/ops/streams/replay", data={"csrf": "forged", **data})
        assert r.status_code == 403
        r = await http.get("/ops/streams/replay", params=data)
        assert r.status_code == 405
        assert dead_ids((await http.get("/ops/streams")).text) == [dead_id]  # nothing replayed


async def test_read_only_lists_the_streams_without_a_replay_button(
    bus: EventBus, engine: AsyncEngine, dead_letters: list[DeadLettered]
) -> None:
    async with console_client(bus, read_only=True) as (http, _console):
        csrf = await login(http)
        await publish(bus, engine, 4)
        await wait_until(lambda: len(dead_letters) == 1, what="the dead letter")
        page = (await http.get("/ops/streams")).text
        [dead_id] = dead_ids(page)
        assert "/ops/streams/replay" not in page
        r = await http.post(
            "/ops/streams/replay", data={"csrf": csrf, "event": "order.paid", "dead_id": dead_id}
        )
        assert r.status_code == 403 and "read-only" in r.text


async def test_unreachable_redis_is_a_page_that_says_so(engine: AsyncEngine) -> None:
    streams = RedisStreams(
        f"redis://127.0.0.1:{unused_port()}/0",
        engine,
        service="svc",
        registry=REG,
        check_server=False,
    )
    console = Console([StreamsPage(EventBus(REG, durable=streams))], secret=TOKEN)
    transport = httpx.ASGITransport(app=Starlette(routes=[Mount("/ops", console)]))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        await login(http)
        with anyio.fail_after(10):
            r = await http.get("/ops/streams")
            overview = await http.get("/ops/")
    await streams.aclose()
    assert r.status_code == 503
    assert "Could not read the streams: ConnectionError" in r.text
    assert "<dt>error</dt><dd>ConnectionError" in overview.text


def test_the_page_needs_a_durable_transport() -> None:
    assert [p.slug for p in bus_pages(EventBus(REG))] == ["failures", "bus", "events"]
    with pytest.raises(TypeError, match="StreamsPage needs a bus with a durable transport"):
        StreamsPage(EventBus(REG))


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_the_page_lists_scheduled_events_and_cancels_one(
    bus: EventBus, engine: AsyncEngine, fragile: Fragile
) -> None:
    async with console_client(bus) as (http, console):
        csrf = await login(http)
        async with engine.begin() as conn:
            soon = await bus.publish(
                OrderPaid(order_id=1), conn, delay=timedelta(hours=1), aggregate_key="order-1"
            )
            later = await bus.publish(OrderPaid(order_id=2), conn, delay=timedelta(hours=2))
        page = (await http.get("/ops/streams")).text
        assert re.findall(r'<tr data-scheduled="([^"]+)">', page) == [soon, later]
        assert "order-1" in page
        r = await http.post("/ops/streams/cancel", data={"csrf": csrf, "event_id": soon})
        assert r.status_code == 303
        page = (await http.get(r.headers["location"])).text
        assert result_banner(page).startswith(f"Cancelled scheduled event {soon}")
        assert re.findall(r'<tr data-scheduled="([^"]+)">', page) == [later]
        r = await http.post("/ops/streams/cancel", data={"csrf": csrf, "event_id": soon})
        assert r.status_code == 409 and "was not cancelled" in html.unescape(r.text)
        r = await http.post("/ops/streams/cancel", data={"csrf": csrf, "event_id": "<x>"})
        assert r.status_code == 400
        outcomes = [(e.action, e.outcome) for e in console.audit.entries(limit=3)]
        assert outcomes.count(("streams.cancel", "refused")) == 2
        assert ("streams.cancel", "ok") in outcomes


async def test_a_paused_group_shows_its_badge_and_is_resumed_from_the_page(
    client: Redis, engine: AsyncEngine, fragile: Fragile
) -> None:
    options = dataclasses.replace(FAST, max_deliveries=5, trip_after=3, pause=60, max_pause=60)
    streams = RedisStreams(
        client,
        engine,
        service="svc",
        registry=REG,
        options=options,
        prefix=f"console-{uuid.uuid4().hex[:8]}",
    )
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    bus.on(OrderPaid, fragile, durable=True, name="fragile")
    async with console_client(bus) as (http, console):
        csrf = await login(http)
        await publish(bus, engine, 1, 2, 3, 4)

        async def badge() -> bool:
            return "paused since <time" in (await http.get("/ops/streams")).text

        await wait_until(badge, what="the paused badge")
        page = (await http.get("/ops/streams")).text
        assert "resumes at <time" in page and f'data-consumer="{streams.consumer}"' in page
        fragile.broken = False
        data = {"csrf": csrf, "event": "order.paid", "group": "svc:fragile"}
        r = await http.post("/ops/streams/resume", data=data)
        assert r.status_code == 303
        page = (await http.get(r.headers["location"])).text
        assert result_banner(page).startswith("Told 1 paused process of group svc:fragile")
        await wait_until(lambda: sorted(fragile.handled) == [1, 2, 3, 4], what="every event")
        assert not streams.statistics().group("fragile").paused
        r = await http.post("/ops/streams/resume", data=data)
        assert r.status_code == 404 and "is paused nowhere" in html.unescape(r.text)
        [refused, ok] = console.audit.entries(limit=2)
        assert (ok.action, ok.outcome, refused.outcome) == ("streams.resume", "ok", "refused")
