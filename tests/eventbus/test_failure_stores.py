"""One conformance suite for the ``FailureStore`` Protocol, run over every implementation.

``MemoryFailureStore`` is the verified fake of ``SqlFailureStore``: both pass these tests, the
SQL store on SQLite and on PostgreSQL (asyncio only), the memory store on asyncio and on trio
(the core runs on both). What only one of them does (the SQL store's batches, outages and spill
file; the memory store's bound) is tested in its own module.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import (
    Event,
    EventBus,
    EventRegistry,
    FailureStatus,
    MemoryFailureStore,
    RetryItem,
)
from eventbus.abc import FailureStore
from eventbus.backends.sql import SqlFailureStore, make_engine
from tests.eventbus.helpers import Flaky, make_record

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int
    amount: Decimal = Decimal("0")
    paid_at: datetime | None = None
    ref: uuid.UUID | None = None


#: A payload of every type the codec must rebuild on retry.
PAID = OrderPaid(
    order_id=1,
    amount=Decimal("9.90"),
    paid_at=datetime(2026, 1, 2, 3, 4, tzinfo=UTC),
    ref=uuid.UUID(int=7),
)

STORES = [
    pytest.param(("memory", "asyncio"), id="memory-asyncio"),
    pytest.param(("memory", "trio"), id="memory-trio"),
    pytest.param(("sqlite", "asyncio"), id="sqlite"),
    pytest.param(("postgresql", "asyncio"), id="postgresql"),
]


@pytest.fixture(params=STORES)
def kind(request: pytest.FixtureRequest) -> tuple[str, str]:
    """``(store, anyio backend)``: SQL runs on asyncio only."""
    param: tuple[str, str] = request.param
    return param


@pytest.fixture
def anyio_backend(kind: tuple[str, str]) -> str:
    return kind[1]


@pytest.fixture
def db_url(kind: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest) -> str | None:
    if kind[0] == "memory":
        return None
    if kind[0] == "sqlite":
        return str(tmp_path / "failures.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.fixture
async def engine(db_url: str | None) -> AsyncIterator[AsyncEngine | None]:
    if db_url is None:
        yield None
        return
    eng = make_engine(db_url)
    yield eng
    assert eng.pool.checkedout() == 0  # type: ignore[attr-defined]
    await eng.dispose()


@pytest.fixture
def make_store(engine: AsyncEngine | None) -> Callable[[], FailureStore]:
    """A store on the test's database; each SQL one is a new store (another process, say)
    on the same table, while the memory store is one per process, so always the same."""
    memory = MemoryFailureStore()
    # small batches: 95 records are ten transactions, concurrent emits a hundred and sixty
    return lambda: memory if engine is None else SqlFailureStore(engine, batch_size=10)


@pytest.fixture
def store(make_store: Callable[[], FailureStore]) -> FailureStore:
    return make_store()


async def test_fits_the_protocol(store: FailureStore) -> None:
    _: FailureStore = store
    assert isinstance(store, FailureStore)


async def test_every_field_round_trips(store: FailureStore) -> None:
    plus2 = timezone(timedelta(hours=2))
    rec = make_record(1).replace(
        first_failed_at=datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=plus2),
        last_failed_at=datetime(2026, 5, 1, 13, 0, tzinfo=plus2),
        resolved_at=datetime(2026, 5, 1, 14, 0, tzinfo=plus2),
        status=FailureStatus.RESOLVED,
        attempts=3,
        payload_ok=False,
        note="a note ünïcode",
    )
    with anyio.fail_after(10):
        store.record(rec)
        [back] = await store.query()
        await store.aclose()
    assert back == rec  # aware datetimes compare as instants
    assert back.first_failed_at.tzinfo is not None
    assert back.status is FailureStatus.RESOLVED


async def test_queries_filter_get_update_purge_and_return_newest_first(
    store: FailureStore,
) -> None:
    with anyio.fail_after(10):
        for n in range(6):
            store.record(
                make_record(
                    n,
                    listener="billing" if n % 2 else "audit",
                    event="order.paid" if n < 4 else "user.registered",
                )
            )
        newest_first = [f"rec-0000{n}" for n in (5, 4, 3, 2, 1, 0)]
        assert [r.id for r in await store.query()] == newest_first
        assert [r.id for r in await store.query(limit=None)] == newest_first
        assert [r.id for r in await store.query(listener="audit")] == [
            "rec-00004",
            "rec-00002",
            "rec-00000",
        ]
        assert [r.id for r in await store.query(event="user.registered")] == [
            "rec-00005",
            "rec-00004",
        ]
        since = datetime(2026, 1, 1, 0, 3, tzinfo=UTC)
        assert len(await store.query(since=since)) == 3
        minus7 = since.astimezone(timezone(timedelta(hours=-7)))
        assert len(await store.query(since=minus7)) == 3
        assert len(await store.query(limit=2)) == 2

        rec = await store.get("rec-00001")
        assert rec is not None and rec.message == "boom 1"
        assert await store.get("nope") is None
        await store.update(rec.replace(status=FailureStatus.DEAD, attempts=5))
        assert [r.id for r in await store.query(status=FailureStatus.DEAD)] == ["rec-00001"]
        assert len(await store.query(status=FailureStatus.RESOLVED)) == 0
        with pytest.raises(KeyError):
            await store.update(make_record(99))

        assert await store.purge(status=FailureStatus.DEAD) == 1
        assert await store.purge(before=since) == 2  # rec 0 and 2 (rec 1 is gone)
        assert [r.id for r in await store.query()] == ["rec-00005", "rec-00004", "rec-00003"]
        assert await store.purge() == 3
        assert await store.query() == []
        await store.aclose()


async def test_concurrent_emits_record_every_failure_once_and_only_once(
    store: FailureStore,
) -> None:
    bus = EventBus(reg, store, queue_size=10_000)

    @bus.on(OrderPaid, name="sync_boom")
    def sync_boom(e: OrderPaid) -> None:
        raise ValueError("sync")

    @bus.on("order.*", name="async_boom")
    async def async_boom(e: Event) -> None:
        await anyio.lowlevel.checkpoint()
        raise RuntimeError("async")

    @bus.on(OrderPaid, name="fine")
    async def fine(e: OrderPaid) -> None:
        await anyio.lowlevel.checkpoint()

    async def publisher(task: int) -> None:
        for i in range(5):
            bus.emit(OrderPaid(order_id=task * 100 + i))
            await bus.emit_async(OrderPaid(order_id=task * 100 + i))

    with anyio.fail_after(20):
        async with bus:
            async with anyio.create_task_group() as tg:
                for task in range(40):
                    tg.start_soon(publisher, task)
        records = await store.query(limit=None)
    emissions = 40 * 5 * 2
    assert len(records) == emissions * 2  # two failing listeners per emission
    assert len({r.id for r in records}) == len(records)  # no duplicated record
    assert len({(r.event_id, r.listener) for r in records}) == len(records)  # once per call
    assert {r.listener for r in records} == {"sync_boom", "async_boom"}


async def test_close_flushes_everything_accepted_before_close(
    make_store: Callable[[], FailureStore],
) -> None:
    store = make_store()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            for n in range(95):
                store.record(make_record(n))
            await store.aclose()
        reader = make_store()  # another reader of the same table
        assert len(await reader.query(limit=None)) == 95
        await reader.aclose()


async def record_failures(store: FailureStore, *events: Event) -> None:
    """A first bus: listener ``flaky`` fails once for each event."""
    bus = EventBus(reg, store)
    bus.on("**", Flaky(), name="flaky")
    with anyio.fail_after(10):
        async with bus:
            for e in events:
                bus.emit(e)


def fixed_listener_bus(store: FailureStore) -> tuple[EventBus, Flaky]:
    """The process that retries: its listener ``flaky`` was fixed (it succeeds now)."""
    bus = EventBus(reg, store)
    flaky = Flaky()
    flaky.failing = False
    bus.on("**", flaky, name="flaky")
    return bus, flaky


def replace_id(event: OrderPaid, order_id: int) -> OrderPaid:
    return OrderPaid(order_id=order_id, amount=event.amount, paid_at=event.paid_at, ref=event.ref)


async def test_a_retry_that_succeeds_resolves_the_row_with_the_rehydrated_event(
    make_store: Callable[[], FailureStore],
) -> None:
    await record_failures(make_store(), PAID)
    bus, flaky = fixed_listener_bus(make_store())
    with anyio.fail_after(10):
        async with bus:
            report = await bus.retry_failures()
            [row] = await bus.failures.query()
    assert flaky.seen == [PAID]  # Decimal, datetime and UUID rebuilt, not strings
    assert (report.resolved, report.failed, report.dead, report.skipped) == (1, 0, 0, 0)
    assert report.items == (
        RetryItem(row.id, "order.paid", "flaky", "resolved", attempts=2, reason=None),
    )
    assert row.status is FailureStatus.RESOLVED
    assert row.attempts == 2 and row.resolved_at is not None


async def test_a_retry_that_fails_again_counts_the_attempt_and_keeps_the_row_pending(
    make_store: Callable[[], FailureStore],
) -> None:
    await record_failures(make_store(), PAID)
    bus = EventBus(reg, make_store())  # the process that retries
    bus.on("**", Flaky(), name="flaky")
    with anyio.fail_after(10):
        async with bus:
            [before] = await bus.failures.query()
            report = await bus.retry_failures(max_attempts=5)
            [row] = await bus.failures.query()
    assert (report.failed, str(report)) == (
        1,
        "1 retried: 0 resolved, 1 failed again, 0 dead, 0 skipped",
    )
    assert report.items[0].reason == "ValueError: flaky 1"
    assert row.status is FailureStatus.PENDING and row.attempts == 2
    assert row.message == "flaky 1" and "ValueError: flaky 1" in row.traceback
    assert row.last_failed_at > before.last_failed_at
    assert row.first_failed_at == before.first_failed_at


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


def unprintable(e: Event) -> None:
    raise Unprintable


async def test_a_retry_that_fails_with_an_unprintable_error_is_still_counted(
    make_store: Callable[[], FailureStore],
) -> None:
    """Regression test: an exception whose ``str()`` raised ended the whole retry run."""
    bus = EventBus(reg, make_store())
    bus.on(OrderPaid, unprintable, name="unprintable")
    with anyio.fail_after(10):
        async with bus:
            bus.emit(PAID)
            report = await bus.retry_failures()
            [row] = await bus.failures.query()
    assert (report.failed, report.items[0].reason) == (1, f"{__name__}.Unprintable: Unprintable()")
    assert (row.attempts, row.message) == (2, "Unprintable()")
    assert f"{__name__}.Unprintable: <exception str() failed>" in row.traceback


async def test_a_row_becomes_dead_after_max_attempts(
    make_store: Callable[[], FailureStore],
) -> None:
    await record_failures(make_store(), PAID)
    bus = EventBus(reg, make_store())  # the process that retries
    bus.on("**", Flaky(), name="flaky")
    with anyio.fail_after(10):
        async with bus:
            first = await bus.retry_failures(max_attempts=3)  # attempt 2
            second = await bus.retry_failures(max_attempts=3)  # attempt 3: dead
            third = await bus.retry_failures(max_attempts=3)  # nothing pending any more
            [row] = await bus.failures.query()
    assert (first.failed, second.dead, third.items) == (1, 1, ())
    assert row.status is FailureStatus.DEAD and row.attempts == 3
    assert row.note == "dead after 3 attempts (max_attempts=3)"


async def test_a_failure_recorded_just_before_a_retry_is_retried(store: FailureStore) -> None:
    bus = EventBus(reg, store)
    flaky = Flaky()
    bus.on(OrderPaid, flaky, name="flaky")
    with anyio.fail_after(10):
        async with bus:
            bus.emit(PAID)
            flaky.failing = False
            report = await bus.retry_failures()  # no flush() in between
            [row] = await bus.failures.query()
    assert report.resolved == 1 and row.status is FailureStatus.RESOLVED


async def test_until_and_offset_page_through_the_matching_records_newest_first(
    store: FailureStore,
) -> None:
    with anyio.fail_after(10):
        for n in range(8):
            store.record(make_record(n, listener="audit" if n % 2 else "billing"))
        until = datetime(2026, 1, 1, 0, 6, tzinfo=UTC)  # exclusive: rec 6 and 7 are out
        assert [r.id for r in await store.query(until=until)] == [
            f"rec-0000{n}" for n in (5, 4, 3, 2, 1, 0)
        ]
        minus7 = until.astimezone(timezone(timedelta(hours=-7)))
        assert len(await store.query(until=minus7)) == 6
        since = datetime(2026, 1, 1, 0, 2, tzinfo=UTC)
        window = await store.query(since=since, until=until, listener="audit")
        assert [r.id for r in window] == ["rec-00005", "rec-00003"]
        pages = [await store.query(limit=3, offset=offset) for offset in (0, 3, 6, 9)]
        assert [[r.id[-1] for r in page] for page in pages] == [
            ["7", "6", "5"],
            ["4", "3", "2"],
            ["1", "0"],
            [],
        ]
        assert [r.id for r in await store.query(listener="billing", limit=2, offset=1)] == [
            "rec-00004",
            "rec-00002",
        ]
        assert [r.id for r in await store.query(limit=None, offset=6)] == ["rec-00001", "rec-00000"]
        await store.aclose()


async def test_purge_by_ids_deletes_exactly_those(store: FailureStore) -> None:
    with anyio.fail_after(10):
        for n in range(5):
            store.record(make_record(n))
        assert await store.purge(ids=[]) == 0  # an empty list is no filter at all
        assert await store.purge(ids=["rec-00001", "rec-00003", "nope", "rec-00001"]) == 2
        assert [r.id for r in await store.query()] == ["rec-00004", "rec-00002", "rec-00000"]
        rec = await store.get("rec-00002")
        assert rec is not None
        await store.update(rec.replace(status=FailureStatus.RESOLVED))
        # with another filter: both must match
        assert await store.purge(ids=["rec-00000", "rec-00002"], status=FailureStatus.RESOLVED) == 1
        assert [r.id for r in await store.query()] == ["rec-00004", "rec-00000"]
        many = [f"x-{n}" for n in range(1200)] + ["rec-00004"]  # more than one statement's worth
        assert await store.purge(ids=many) == 1
        await store.aclose()


async def test_bad_offsets_and_ids_are_refused_naming_the_argument(store: FailureStore) -> None:
    with anyio.fail_after(10):
        store.record(make_record(1))
        for offset in (-1, 1.5, True):
            with pytest.raises(ValueError, match=r"^offset=.* must be an int >= 0"):
                await store.query(offset=offset)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"purge\(ids='rec-00001'\): give a list"):
            await store.purge(ids="rec-00001")
        with pytest.raises(TypeError, match="every id must be a string, not 7"):
            await store.purge(ids=[7])  # type: ignore[list-item]
        assert len(await store.query()) == 1  # nothing lost
        await store.aclose()


async def test_a_retry_by_ids_retries_exactly_those_failures(
    make_store: Callable[[], FailureStore],
) -> None:
    await record_failures(make_store(), PAID, replace_id(PAID, 2), replace_id(PAID, 3))
    bus, flaky = fixed_listener_bus(make_store())
    with anyio.fail_after(10):
        async with bus:
            third, second, first = await bus.failures.query()
            await bus.failures.update(third.replace(status=FailureStatus.RESOLVED))
            report = await bus.retry_failures(ids=[second.id, third.id, "nope"])
            rows = {r.id: r.status for r in await bus.failures.query()}
    assert flaky.seen == [replace_id(PAID, 2)]  # the one pending row named, nothing else
    assert [(i.failure_id, i.result, i.reason) for i in report.items] == [
        (third.id, "skipped", "it is resolved; only pending failures are retried"),
        ("nope", "skipped", "no failure has this id"),
        (second.id, "resolved", None),
    ]
    assert rows == {
        third.id: FailureStatus.RESOLVED,
        second.id: FailureStatus.RESOLVED,
        first.id: FailureStatus.PENDING,
    }


async def test_a_retry_by_ids_refuses_a_string_and_other_filters(store: FailureStore) -> None:
    bus = EventBus(reg, store)
    with anyio.fail_after(10):
        with pytest.raises(TypeError, match=r"retry_failures\(ids='abc'\): give a list"):
            await bus.retry_failures(ids="abc")
        with pytest.raises(ValueError, match="names the failures itself; drop listener=, limit="):
            await bus.retry_failures(ids=["abc"], listener="x", limit=3)
        assert (await bus.retry_failures(ids=[])).items == ()
