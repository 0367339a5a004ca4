"""The failures and bus pages over HTTP: filters, pages, the detail, and the actions."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from eventbus import EventBus, FailureRecord, FailureStatus, MemoryFailureStore
from eventbus.console import Bar, bar_chart, line_chart, time_buckets
from tests.console_support import login, result_banner
from tests.eventbus.console.conftest import Invoicer, console_client, make_bus
from tests.eventbus.helpers import OrderPaid, OrderShipped, reg


@pytest.fixture
def bus(invoicer: Invoicer) -> EventBus:
    bus = make_bus(invoicer)

    @bus.on(OrderShipped, name="tests:label")
    def label(event: OrderShipped) -> None:
        raise KeyError(event.order_id)

    return bus


@pytest.fixture
async def csrf(client: httpx.AsyncClient) -> str:
    return await login(client)


def rows_of(page: str) -> list[str]:
    """The failure ids linked from a failures list, in order."""
    return list(dict.fromkeys(re.findall(r'href="/ops/failures/([0-9a-f]{32})"', page)))


# -- the list ------------------------------------------------------------------------------------


async def test_the_list_shows_failures_newest_first_and_filters_them(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    bus.emit(OrderPaid(order_id=1, user_id=1))
    bus.emit(OrderShipped(order_id=2))
    paid, shipped = (
        (await bus.failures.query(event="order.paid"))[0],
        (await bus.failures.query(event="order.shipped"))[0],
    )
    page = (await client.get("/ops/failures")).text
    assert rows_of(page) == [shipped.id, paid.id]
    assert "invoice service down for order 1" in page
    by_event = (await client.get("/ops/failures", params={"event": "order.paid"})).text
    assert rows_of(by_event) == [paid.id]
    by_listener = (await client.get("/ops/failures", params={"listener": "tests:label"})).text
    assert rows_of(by_listener) == [shipped.id]
    await bus.failures.update(paid.replace(status=FailureStatus.DEAD))
    dead = (await client.get("/ops/failures", params={"status": "dead"})).text
    assert rows_of(dead) == [paid.id]


async def test_the_time_filters_keep_what_failed_in_the_window(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    for order_id, hours in enumerate([5, 3, 1]):
        bus.emit(OrderPaid(order_id=order_id, user_id=1))
        [rec] = await bus.failures.query(limit=1)
        at = now - timedelta(hours=hours)
        await bus.failures.update(rec.replace(first_failed_at=at, last_failed_at=at))
    ids = [r.id for r in await bus.failures.query()]  # by insertion: orders 2, 1, 0
    window = {
        "since": (now - timedelta(hours=4)).strftime("%Y-%m-%dT%H:%M"),
        "until": (now - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M"),
    }
    page = (await client.get("/ops/failures", params=window)).text
    assert rows_of(page) == [ids[1]]


async def test_the_correlation_filter_lists_one_chain(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    @bus.on(OrderPaid, name="tests:ship")
    def ship(event: OrderPaid) -> None:
        bus.emit(OrderShipped(order_id=event.order_id))  # fails in tests:label

    bus.emit(OrderPaid(order_id=1, user_id=1))
    bus.emit(OrderPaid(order_id=2, user_id=1))
    label, invoice = await bus.failures.query(limit=2)  # the second chain, newest first
    assert label.correlation_id == invoice.correlation_id == invoice.event_id
    page = (await client.get("/ops/failures", params={"correlation": invoice.event_id})).text
    assert rows_of(page) == [label.id, invoice.id]


class QueryLog(MemoryFailureStore):
    """A memory store that notes the keywords of every ``query()``."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[dict[str, object]] = []

    async def query(self, **filters: Any) -> list[FailureRecord]:
        self.queries.append(filters)
        return await super().query(**filters)


async def test_a_page_of_the_list_reads_one_page_of_rows_through_the_store_filters(
    invoicer: Invoicer,
) -> None:
    store = QueryLog()
    bus = EventBus(reg, store)
    bus.on(OrderPaid, invoicer, name="tests:invoice")
    async with console_client(bus) as (client, _console):
        await login(client)
        for order_id in range(120):
            bus.emit(OrderPaid(order_id=order_id, user_id=1))
        store.queries.clear()
        until = "2099-01-01T00:00"
        params = {"page": "3", "until": until, "correlation": "c" * 32, "event": "order.paid"}
        assert (await client.get("/ops/failures", params=params)).status_code == 200
        plain = await client.get("/ops/failures")
    assert store.queries == [
        {
            "status": None,
            "event": "order.paid",
            "listener": None,
            "since": None,
            "until": datetime(2099, 1, 1, tzinfo=UTC),
            "correlation": "c" * 32,
            "limit": 51,
            "offset": 100,
        },
        # no keyword a store of the first Protocol would not know
        {"status": None, "event": None, "listener": None, "since": None, "limit": 51},
    ]
    assert plain.status_code == 200


@pytest.mark.parametrize(
    ("params", "message"),
    [
        pytest.param(
            {"status": "bogus"}, "status must be one of pending, resolved, dead", id="status"
        ),
        pytest.param({"since": "yesterday"}, "since must be a date and time", id="since"),
        pytest.param({"until": "2026-13-45T99:00"}, "until must be a date and time", id="until"),
        pytest.param(
            {"since": "2026-12-02T00:00", "until": "2026-12-01T00:00"},
            "since must be before until",
            id="reversed",
        ),
        pytest.param({"page": "0"}, "page must be from 1 to 10000", id="page-zero"),
        pytest.param({"page": "x" * 5000}, "page must be a whole number", id="page-huge"),
        pytest.param({"event": "e" * 400}, "event is 400 characters long", id="long-event"),
    ],
)
async def test_bad_filters_are_a_400_with_a_message(
    client: httpx.AsyncClient, csrf: str, params: dict[str, str], message: str
) -> None:
    r = await client.get("/ops/failures", params=params)
    assert r.status_code == 400
    assert message in r.text


async def test_the_list_is_paginated_by_50(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    for order_id in range(120):
        bus.emit(OrderPaid(order_id=order_id, user_id=1))
    newest_first = [r.id for r in await bus.failures.query(limit=None)]
    first = (await client.get("/ops/failures")).text
    assert rows_of(first) == newest_first[:50]
    assert 'rel="next"' in first and 'rel="prev"' not in first
    third = (await client.get("/ops/failures", params={"page": "3"})).text
    assert rows_of(third) == newest_first[100:]
    assert 'rel="next"' not in third and 'rel="prev"' in third
    assert "101–120" in third


# -- the detail ----------------------------------------------------------------------------------


async def test_the_detail_shows_payload_traceback_and_attempts(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    bus.emit(OrderPaid(order_id=42, user_id=7))
    [rec] = await bus.failures.query()
    page = (await client.get(f"/ops/failures/{rec.id}")).text
    assert "ConnectionError" in page
    assert "&#34;order_id&#34;: 42" in page  # the payload, indented JSON
    assert 'id="traceback">Traceback (most recent call last):' in page
    assert "in __call__" in page
    assert "<dt>Attempts</dt><dd>1</dd>" in page


async def test_the_detail_shows_the_causation_chain_first_event_first(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    @bus.on(OrderPaid, name="tests:ship")
    def ship(event: OrderPaid) -> None:
        bus.emit(OrderShipped(order_id=event.order_id))  # whose listener tests:label fails

    bus.emit(OrderPaid(order_id=7, user_id=1))  # tests:invoice fails too
    label, invoice = await bus.failures.query()
    assert (label.event_name, invoice.event_name) == ("order.shipped", "order.paid")
    page = (await client.get(f"/ops/failures/{label.id}")).text
    chain = re.search(r'<ol class="chain" id="chain">(.*?)</ol>\s*</section>', page, re.S)
    assert chain is not None
    links = re.findall(r'<li(?: class="this")?><span class="mono">([^<]+)</span> '
                       r'<small class="mono">event (\w+)</small>', chain.group(1))  # fmt: skip
    assert links == [("order.paid", invoice.event_id), ("order.shipped", label.event_id)]
    assert f'href="/ops/failures/{invoice.id}">tests:invoice</a>' in chain.group(1)
    assert "<strong>this failure</strong>: tests:label" in chain.group(1)
    assert f'<dt>Causation id</dt><dd class="mono">{invoice.event_id}</dd>' in page


async def test_the_chain_names_what_it_does_not_know(
    bus: EventBus, client: httpx.AsyncClient, csrf: str, invoicer: Invoicer
) -> None:
    invoicer.broken = False  # the first event leaves no failure row

    @bus.on(OrderPaid, name="tests:ship")
    def ship(event: OrderPaid) -> None:
        bus.emit(OrderShipped(order_id=event.order_id))

    bus.emit(OrderPaid(order_id=7, user_id=1))
    [label] = await bus.failures.query()
    page = (await client.get(f"/ops/failures/{label.id}")).text
    chain = re.search(r'<ol class="chain" id="chain">(.*?)</ol>', page, re.S)
    assert chain is not None
    first, second = re.findall(r"<li(?: class=\"this\")?>(.*?)</li>\n", chain.group(1), re.S)
    assert f"event {label.causation_id}" in first and "its name is not known" in first
    assert "order.shipped" in second and "this failure" in second


async def test_purge_one_failure_after_a_confirmation(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    bus.emit(OrderPaid(order_id=1, user_id=7))
    bus.emit(OrderPaid(order_id=2, user_id=7))
    newest, oldest = await bus.failures.query()
    path = f"/ops/failures/{newest.id}/purge"
    r = await client.post(path, data={"csrf": csrf})
    assert r.status_code == 400
    assert "Tick the confirmation box" in r.text
    r = await client.post(path, data={"csrf": csrf, "confirm": "yes"})
    assert r.status_code == 303 and r.headers["location"].startswith("/ops/failures?done=")
    banner = result_banner((await client.get(r.headers["location"])).text)
    assert banner == f"Purged failure {newest.id} (tests:invoice for order.paid)."
    assert [r.id for r in await bus.failures.query()] == [oldest.id]
    r = await client.post(path, data={"csrf": csrf, "confirm": "yes"})
    assert r.status_code == 404
    assert "There is no failure with id" in r.text


async def test_an_unknown_failure_is_a_404_page(client: httpx.AsyncClient, csrf: str) -> None:
    for failure_id in ["0" * 32, "x" * 500]:
        r = await client.get(f"/ops/failures/{failure_id}")
        assert r.status_code == 404
        assert "There is no failure with id" in r.text


# -- actions -------------------------------------------------------------------------------------


async def test_retry_after_the_listener_was_fixed_resolves_the_failure(
    bus: EventBus, client: httpx.AsyncClient, csrf: str, invoicer: Invoicer
) -> None:
    bus.emit(OrderPaid(order_id=42, user_id=7))
    [rec] = await bus.failures.query()
    r = await client.post(f"/ops/failures/{rec.id}/retry", data={"csrf": csrf})
    assert r.status_code == 303
    page = (await client.get(r.headers["location"])).text
    assert "failed: ConnectionError: invoice service down for order 42" in result_banner(page)
    assert "<dt>Attempts</dt><dd>2</dd>" in page
    invoicer.broken = False
    r = await client.post(f"/ops/failures/{rec.id}/retry", data={"csrf": csrf})
    page = (await client.get(r.headers["location"])).text
    assert result_banner(page) == "Retried tests:invoice for order.paid: resolved."
    assert 'id="failure-status"><span class="status s-resolved">resolved' in page
    assert invoicer.invoiced == [42]
    r = await client.post(f"/ops/failures/{rec.id}/retry", data={"csrf": csrf})
    assert r.status_code == 400
    assert "is resolved; only pending failures are retried" in r.text


async def test_retry_retries_this_failure_only(
    bus: EventBus, client: httpx.AsyncClient, csrf: str, invoicer: Invoicer
) -> None:
    bus.emit(OrderPaid(order_id=1, user_id=7))
    bus.emit(OrderPaid(order_id=2, user_id=7))  # the same listener and event, pending too
    newest, oldest = await bus.failures.query()
    detail = (await client.get(f"/ops/failures/{newest.id}")).text
    assert "for this failure only" in detail and "every pending failure" not in detail
    invoicer.broken = False
    r = await client.post(f"/ops/failures/{newest.id}/retry", data={"csrf": csrf})
    page = (await client.get(r.headers["location"])).text
    assert result_banner(page) == "Retried tests:invoice for order.paid: resolved."
    assert invoicer.invoiced == [2]
    assert (await bus.failures.get(oldest.id)).status == FailureStatus.PENDING  # type: ignore[union-attr]


async def test_retry_matching_retries_the_filtered_pending_failures(
    bus: EventBus, client: httpx.AsyncClient, csrf: str, invoicer: Invoicer
) -> None:
    bus.emit(OrderPaid(order_id=1, user_id=7))
    bus.emit(OrderShipped(order_id=2))
    invoicer.broken = False
    r = await client.post(
        "/ops/failures/retry", data={"csrf": csrf, "event": "order.paid", "listener": ""}
    )
    assert r.status_code == 303
    banner = result_banner((await client.get(r.headers["location"])).text)
    assert banner == "1 retried: 1 resolved, 0 failed again, 0 dead, 0 skipped."
    r = await client.post("/ops/failures/retry", data={"csrf": csrf, "event": "order.paid"})
    assert r.status_code == 400
    assert "No pending failure matches" in r.text


async def test_resolve_needs_a_note_and_records_it_with_the_user(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    bus.emit(OrderPaid(order_id=1, user_id=7))
    [rec] = await bus.failures.query()
    path = f"/ops/failures/{rec.id}/resolve"
    r = await client.post(path, data={"csrf": csrf, "note": "   "})
    assert r.status_code == 400
    assert "Write a note saying why" in r.text
    r = await client.post(path, data={"csrf": csrf, "note": "n" * 501})
    assert r.status_code == 400
    assert "the field 'note' is 501 characters long; at most 500" in html.unescape(r.text)
    assert (await bus.failures.get(rec.id)).status == FailureStatus.PENDING  # type: ignore[union-attr]
    r = await client.post(path, data={"csrf": csrf, "note": "refunded by hand"})
    assert r.status_code == 303
    done = await bus.failures.get(rec.id)
    assert done is not None
    assert (done.status, done.note) == (
        FailureStatus.RESOLVED,
        "refunded by hand (resolved by ann)",
    )
    assert done.resolved_at is not None
    r = await client.post(path, data={"csrf": csrf, "note": "again"})
    assert r.status_code == 400
    assert "already resolved" in r.text


async def test_purge_asks_for_confirmation_then_deletes_what_it_counted(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    for order_id in range(3):
        bus.emit(OrderPaid(order_id=order_id, user_id=7))
    rows = await bus.failures.query()
    old = datetime.now(UTC) - timedelta(days=40)
    for rec in rows[:2]:
        await bus.failures.update(
            rec.replace(status=FailureStatus.RESOLVED, first_failed_at=old, last_failed_at=old)
        )
    confirm = await client.get(
        "/ops/failures/purge", params={"status": "resolved", "older_than_days": "30"}
    )
    assert '<p id="purge-count"><strong>2</strong> resolved failure(s)' in confirm.text
    data = {"csrf": csrf, "status": "resolved", "older_than_days": "30"}
    r = await client.post("/ops/failures/purge", data=data)
    assert r.status_code == 400
    assert "Tick the confirmation box" in r.text
    assert len(await bus.failures.query()) == 3
    r = await client.post("/ops/failures/purge", data=data | {"confirm": "yes"})
    assert r.status_code == 303
    assert result_banner((await client.get(r.headers["location"])).text) == (
        "Purged 2 resolved failure(s) older than 30 day(s)."
    )
    assert [r.id for r in await bus.failures.query()] == [rows[2].id]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param({"status": "gone"}, "status must be one of", id="status"),
        pytest.param({"older_than_days": "-1"}, "older_than_days must be a whole number", id="neg"),
        pytest.param(
            {"older_than_days": "99999"}, "older_than_days must be from 0 to 36500", id="big"
        ),
    ],
)
async def test_purge_refuses_bad_input_on_both_forms(
    bus: EventBus, client: httpx.AsyncClient, csrf: str, data: dict[str, str], message: str
) -> None:
    bus.emit(OrderPaid(order_id=1, user_id=7))
    r = await client.get("/ops/failures/purge", params=data)
    assert r.status_code == 400
    assert message in r.text
    r = await client.post("/ops/failures/purge", data={"csrf": csrf, "confirm": "yes"} | data)
    assert r.status_code == 400
    assert message in r.text
    assert len(await bus.failures.query()) == 1


# -- the bus page and the overview --------------------------------------------------------------


async def test_the_bus_page_lists_listeners_with_their_call_and_failure_counts(
    bus: EventBus, client: httpx.AsyncClient, csrf: str, invoicer: Invoicer
) -> None:
    assert bus.count_calls  # the page turned counting on
    bus.emit(OrderPaid(order_id=1, user_id=7))
    invoicer.broken = False
    bus.emit(OrderPaid(order_id=2, user_id=7))
    await bus.emit_async(OrderPaid(order_id=3, user_id=7))
    bus.emit(OrderShipped(order_id=3))
    page = (await client.get("/ops/bus")).text

    def figures(event: str, listener: str) -> list[str]:
        row = re.search(
            rf'<td class="mono">{re.escape(event)}</td>\s*<td class="mono"><a[^>]*>'
            rf"{re.escape(listener)}</a>.*?</tr>",
            page,
            re.S,
        )
        assert row is not None, (event, listener)
        return re.findall(r'<td class="num (?:calls|failures)">(\d+)</td>', row.group(0))

    assert figures("order.paid", "tests:invoice") == ["3", "1"]
    assert figures("order.shipped", "tests:label") == ["1", "1"]
    assert "<dt>Failures since start</dt><dd>2</dd>" in page
    assert "<dt>Running</dt><dd>yes</dd>" in page
    assert page.count("<rect") > 48  # the chart: a box per bucket, bars for the failures
    r = await client.get("/ops/bus", params={"window": "1y"})
    assert r.status_code == 400
    assert "window must be one of 1h, 24h, 7d" in r.text


async def test_the_bus_page_says_when_the_bus_does_not_count(
    bus: EventBus, invoicer: Invoicer
) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from eventbus.console import BusPage, Console
    from tests.console_support import TOKEN

    bus.count_calls = False
    console = Console([BusPage(bus, count_calls=False)], secret=TOKEN)
    transport = httpx.ASGITransport(app=Starlette(routes=[Mount("/ops", console)]))
    async with bus, httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        await login(client)
        text = (await client.get("/ops/bus")).text
    assert bus.count_calls is False
    assert "does not count calls" in text


async def test_the_overview_shows_the_panels(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    bus.emit(OrderPaid(order_id=1, user_id=7))
    page = (await client.get("/ops/")).text
    assert "<dt>pending</dt><dd>1</dd>" in page
    assert "<dt>dropped</dt><dd>0</dd>" in page


# -- charts --------------------------------------------------------------------------------------


def test_time_buckets_count_each_stamp_in_its_bucket() -> None:
    end = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    stamps = [
        (end - timedelta(minutes=59, seconds=30), "dead"),  # first bucket
        (end - timedelta(seconds=1), "pending"),  # last bucket
        (end - timedelta(seconds=2), "pending"),
        (end - timedelta(hours=2), "pending"),  # before the window: not counted
        (end, "pending"),  # the end is excluded
    ]
    bars = time_buckets(stamps, end=end, span=timedelta(hours=1), count=60)
    assert len(bars) == 60
    assert bars[0].values == {"dead": 1}
    assert bars[-1].values == {"pending": 2}
    assert sum(sum(b.values.values()) for b in bars) == 3


def test_charts_escape_their_text_and_scale_to_the_largest_bar() -> None:
    svg = bar_chart([Bar("<b>", {"<x>": 3}), Bar("b", {"<x>": 1})], label="a & b")
    assert "<b>" not in svg and "&lt;b&gt;" in svg and 'aria-label="a &amp; b"' in svg
    bars = r'<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)" fill="#'
    heights = [float(h) for h in re.findall(bars, svg)]
    assert len(heights) == 2
    assert heights[0] == pytest.approx(3 * heights[1], rel=0.01)
    t = datetime(2026, 12, 1, tzinfo=UTC)
    line = line_chart({"<a>": [(t, 1), (t + timedelta(hours=1), 2)]}, label="views")
    assert "<polyline" in line and "&lt;a&gt;: 2 at 2026-12-01 01:00:00 UTC" in line


def test_a_sub_second_maximum_is_not_rounded_up_to_one() -> None:
    """Regression test: the axis's top was 1 for any maximum under 1, so runs of a few
    milliseconds were 1-pixel bars (and a failed one vanished among them)."""
    svg = bar_chart([Bar("a", {"ok": 0.004}), Bar("b", {"failed": 0.002})], label="runs", unit=" s")
    bars = r'<rect x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)" fill="#'
    heights = [float(h) for h in re.findall(bars, svg)]
    assert ">0.005 s</text>" in svg and ">1 s</text>" not in svg
    assert heights[0] == pytest.approx(2 * heights[1], rel=0.01) and heights[1] > 40


AUTO_REFRESH = r'<p class="refresh" hidden><label><input type="checkbox" id="auto-refresh" '


async def test_watching_pages_offer_an_auto_refresh_that_needs_no_inline_script(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    """Regression test: the overview and failures pages could only be reloaded by hand.
    The control is hidden until console.js shows it; the CSP is the same as before."""
    bus.emit(OrderPaid(order_id=1, user_id=1))
    [rec] = await bus.failures.query()
    for path in ("/ops/", "/ops/failures"):
        page = await client.get(path)
        assert AUTO_REFRESH in page.text and 'data-seconds="15"' in page.text
        assert "<script>" not in page.text
        assert page.headers["content-security-policy"].startswith(
            "default-src 'none'; script-src 'self'; style-src 'self';"
        )
    assert AUTO_REFRESH not in (await client.get(f"/ops/failures/{rec.id}")).text
    script = (await client.get("/ops/static/console.js")).text
    assert 'getElementById("auto-refresh")' in script and "localStorage" in script


async def test_the_url_after_an_action_is_short_and_shows_the_result_to_its_session_only(
    bus: EventBus, client: httpx.AsyncClient, csrf: str
) -> None:
    """Regression test: the URL an action redirected to was 301 characters long here (the
    session id, the user and an ISO time were carried in it, beside the message): now 205."""
    bus.emit(OrderPaid(order_id=1, user_id=7))
    [rec] = await bus.failures.query()
    r = await client.post(f"/ops/failures/{rec.id}/purge", data={"csrf": csrf, "confirm": "yes"})
    location = r.headers["location"]
    assert len(location) <= 210, (len(location), location)
    page = (await client.get(location)).text
    assert result_banner(page) == f"Purged failure {rec.id} (tests:invoice for order.paid)."
    assert ", by " in page.split('id="result">', 1)[1].split("</p>", 1)[0]  # the session's user
    await client.post("/ops/logout", data={"csrf": csrf})
    await login(client)  # another session: the same URL shows nothing
    assert result_banner((await client.get(location)).text) == ""
