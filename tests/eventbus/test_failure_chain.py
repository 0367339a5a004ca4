"""Causation and correlation ids in the SQL failure table: new columns, added in place to a
table of the older version, filtered by ``--correlation``, and printed by ``failures show`` as
a chain (real SQLite files)."""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path

import pytest

from eventbus import Event, EventBus, EventRegistry, FailureRecord
from eventbus._cli._main import main
from eventbus.backends.sql import (
    SqlFailureStore,
    add_missing_columns,
    create_tables,
    failure_table,
    make_engine,
    missing_columns,
)

reg = EventRegistry()


class Placed(Event, name="chain.placed", registry=reg):
    n: int


class Paid(Event, name="chain.paid", registry=reg):
    n: int


class Shipped(Event, name="chain.shipped", registry=reg):
    n: int


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


OLD_SCHEMA = """
CREATE TABLE eventbus_failures (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id VARCHAR(64) NOT NULL UNIQUE,
    event_id VARCHAR(64) NOT NULL, event_name VARCHAR(255) NOT NULL, payload TEXT NOT NULL,
    payload_ok BOOLEAN NOT NULL, listener VARCHAR(255) NOT NULL,
    error_type VARCHAR(255) NOT NULL, message TEXT NOT NULL, traceback TEXT NOT NULL,
    attempts INTEGER NOT NULL, status VARCHAR(16) NOT NULL, first_failed_at DATETIME NOT NULL,
    last_failed_at DATETIME NOT NULL, resolved_at DATETIME, note TEXT
);
INSERT INTO eventbus_failures (id, event_id, event_name, payload, payload_ok, listener,
    error_type, message, traceback, attempts, status, first_failed_at, last_failed_at)
VALUES ('old-1', 'ev-old', 'chain.placed', '{"n": 0}', 1, 'app:old', 'ValueError', 'old',
    'tb', 1, 'pending', '2026-01-01 00:00:00.000000', '2026-01-01 00:00:00.000000');
"""


#: the columns added since the old schema (in the order add_missing_columns adds them)
ADDED = (
    "causation_id",
    "correlation_id",
    "durable_deliveries",
    "durable_entry",
    "durable_group",
    "durable_seq",
    "durable_stream",
)


def old_database(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.executescript(OLD_SCHEMA)
    conn.close()
    return f"sqlite+aiosqlite:///{path}"


def columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        names = [row[1] for row in conn.execute("PRAGMA table_info(eventbus_failures)")]
    conn.close()
    return names


async def chain_of_failures(url: str) -> list[FailureRecord]:
    """placed -> paid -> shipped, each listener failing after emitting the next event."""
    store = SqlFailureStore(url)
    bus = EventBus(reg, store)

    def on_placed(e: Placed) -> None:
        bus.emit(Paid(n=e.n))
        raise ValueError("placed")

    def on_paid(e: Paid) -> None:
        bus.emit(Shipped(n=e.n))
        raise ValueError("paid")

    def on_shipped(e: Shipped) -> None:
        raise ValueError("shipped")

    bus.on(Placed, on_placed, name="app:placed")
    bus.on(Paid, on_paid, name="app:paid")
    bus.on(Shipped, on_shipped, name="app:shipped")
    async with bus:
        bus.emit(Placed(n=1))
        bus.emit(Placed(n=2))
    async with SqlFailureStore(url) as reader:
        return await reader.query(limit=None)


async def test_records_keep_their_chain_in_the_table(tmp_path: Path) -> None:
    records = await chain_of_failures(f"sqlite+aiosqlite:///{tmp_path / 'f.db'}")
    assert len(records) == 6
    first_chain = [r for r in records if r.payload == '{"n": 1}']
    by_name = {r.event_name: r for r in first_chain}
    placed, paid, shipped = (by_name[f"chain.{n}"] for n in ("placed", "paid", "shipped"))
    assert placed.causation_id is None
    assert paid.causation_id == placed.event_id
    assert shipped.causation_id == paid.event_id
    assert {r.correlation_id for r in first_chain} == {placed.event_id}


async def test_the_store_adds_the_new_columns_to_an_old_table_in_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "old.db"
    url = old_database(path)
    assert "correlation_id" not in columns(path)
    caplog.set_level(logging.WARNING, "eventbus.sql")
    records = await chain_of_failures(url)
    assert columns(path)[-len(ADDED) :] == list(ADDED)
    old = next(r for r in records if r.id == "old-1")
    assert (old.causation_id, old.correlation_id) == (None, None)
    assert sum(r.correlation_id is not None for r in records) == 6
    added = [r.getMessage() for r in caplog.records if "added column" in r.getMessage()]
    assert added == [f"added column eventbus_failures.{c} to the existing table" for c in ADDED]
    with sqlite3.connect(path) as conn:
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(eventbus_failures)")}
    conn.close()
    assert "ix_eventbus_failures_correlation_seq" in indexes


async def test_a_reader_that_may_not_migrate_reads_an_old_table_as_it_is(tmp_path: Path) -> None:
    url = old_database(tmp_path / "old.db")
    async with SqlFailureStore(url, create_table=False) as store:
        [rec] = await store.query()
        assert (rec.id, rec.causation_id, rec.correlation_id) == ("old-1", None, None)
        assert await store.query(correlation="ev-old") == []
        got = await store.get("old-1")
        assert got is not None
        await store.update(got.replace(note="seen"))
        again = await store.get("old-1")
        assert again is not None and again.note == "seen"
    assert "correlation_id" not in columns(tmp_path / "old.db")


async def test_create_tables_migrates_and_the_helper_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    engine = make_engine(old_database(path))
    try:
        async with engine.connect() as conn:
            table = failure_table()
            assert await conn.run_sync(missing_columns, table) == set(ADDED)
        await create_tables(engine)
        async with engine.begin() as conn:
            assert await conn.run_sync(missing_columns, table) == set()
            assert await conn.run_sync(add_missing_columns, table) == []
    finally:
        await engine.dispose()


async def test_cli_lists_one_correlation_and_shows_the_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'f.db'}"
    records = await chain_of_failures(url)
    shipped = next(r for r in records if r.event_name == "chain.shipped" and '"n": 2' in r.payload)
    placed = next(r for r in records if r.event_id == shipped.correlation_id)
    paid = next(r for r in records if r.event_id == shipped.causation_id)
    capsys.readouterr()

    argv = ["failures", "list", "--db", url, "--json", "--correlation", placed.event_id]
    assert await anyio_main(argv) == 0
    listed = json.loads(capsys.readouterr().out)
    names = ["chain.paid", "chain.placed", "chain.shipped"]
    assert sorted(r["event_name"] for r in listed) == names
    assert {r["correlation_id"] for r in listed} == {placed.event_id}

    assert await anyio_main(["failures", "show", "--db", url, shipped.id]) == 0
    out = capsys.readouterr().out
    assert f"correlation:   {placed.event_id}" in out
    chain = out.split("chain (first event first):\n")[1].splitlines()[:3]
    assert chain == [
        f"  {placed.event_id}  chain.placed",
        f"  {paid.event_id}  chain.paid",
        f"  {shipped.event_id}  chain.shipped  <- this failure",
    ]

    assert await anyio_main(["failures", "show", "--db", url, "--json", shipped.id]) == 0
    shown = json.loads(capsys.readouterr().out)
    names = ["chain.placed", "chain.paid", "chain.shipped"]
    assert [c["event_name"] for c in shown["chain"]] == names
    assert (shown["causation_id"], shown["correlation_id"]) == (paid.event_id, placed.event_id)


async def test_show_marks_events_of_the_chain_that_left_no_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'f.db'}"
    store = SqlFailureStore(url)
    bus = EventBus(reg, store)
    bus.on(Placed, lambda e: bus.emit(Paid(n=e.n)), name="ok-placed")
    bus.on(Paid, lambda e: bus.emit(Shipped(n=e.n)), name="ok-paid")
    bus.on(Shipped, lambda e: 1 / 0, name="bad-shipped")
    async with bus:
        bus.emit(Placed(n=1))
    async with SqlFailureStore(url) as reader:
        [rec] = await reader.query()
    assert await anyio_main(["failures", "show", "--db", url, rec.id]) == 0
    chain = capsys.readouterr().out.split("chain (first event first):\n")[1].splitlines()[:4]
    assert chain == [
        f"  {rec.correlation_id}  (no failure recorded for this event: name not known)",
        "  …  (not known: events between may have left no failure row)",
        f"  {rec.causation_id}  (no failure recorded for this event: name not known)",
        f"  {rec.event_id}  chain.shipped  <- this failure",
    ]


async def anyio_main(argv: list[str]) -> int:
    """The CLI runs its own event loop: run it in a worker thread of this test's loop."""
    import anyio.to_thread

    return await anyio.to_thread.run_sync(main, argv)
