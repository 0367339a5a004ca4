"""``python -m eventbus streams ...`` against the real Redis and a SQLite file."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis import Redis as SyncRedis
from sqlalchemy.ext.asyncio import AsyncConnection

from eventbus import Event, MemoryFailureStore
from eventbus._cli._main import main
from eventbus.backends.redis import make_redis_client
from eventbus.backends.sql import make_engine
from eventbus.durable import DeadLettered, DurableOptions, RedisStreams
from tests.durable.conftest import FAST
from tests.durable.events import REG, OrderPaid
from tests.redis_server import free_port

STREAM = "eventbus:evt:{order.paid}"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def scenario(redis_url: str, db: Path) -> None:
    """Three events: 'ok' takes them all, 'broken' dies on each (max_deliveries=1); then two
    outbox rows are left unpublished and a zombie consumer holds one entry pending."""

    async def go() -> None:
        client = make_redis_client(redis_url)
        engine = make_engine(db)
        streams = RedisStreams(
            client,
            engine,
            service="svc",
            registry=REG,
            failures=MemoryFailureStore(),
            options=replace(FAST, max_deliveries=1),
        )

        async def broken(e: OrderPaid) -> None:
            raise RuntimeError(f"broken {e.order_id}")

        oks: list[int] = []
        all_ok = anyio.Event()

        async def ok(e: OrderPaid, tx: AsyncConnection) -> None:
            oks.append(e.order_id)
            if len(oks) == 3:
                all_ok.set()

        streams.subscribe(OrderPaid, broken, name="broken")
        streams.subscribe(OrderPaid, ok, name="ok")
        dead: list[Event] = []
        all_dead = anyio.Event()

        def note(event: Event) -> None:
            dead.append(event)
            if sum(isinstance(e, DeadLettered) for e in dead) == 3:
                all_dead.set()

        streams.notify = note
        async with streams:
            async with engine.begin() as conn:
                await streams.publish_many([OrderPaid(order_id=i) for i in range(3)], conn)
            with anyio.fail_after(10):
                await all_dead.wait()
                await all_ok.wait()
        quiet = RedisStreams(
            client, engine, service="svc", registry=REG, options=DurableOptions(relay=False)
        )
        async with engine.begin() as conn:
            await quiet.publish_many([OrderPaid(order_id=9), OrderPaid(order_id=10)], conn)
        await client.xgroup_create(STREAM, "other:zombie", id="0")
        await client.xreadgroup("other:zombie", "z1", {STREAM: ">"}, count=1)
        await client.aclose()
        await engine.dispose()

    anyio.run(go, backend="asyncio")


@pytest.fixture
def filled(redis_url: str, tmp_path: Path) -> tuple[str, Path]:
    db = tmp_path / "app.db"
    scenario(redis_url, db)
    return redis_url, db


def test_status_shows_streams_groups_dead_letters_and_the_outbox(
    filled: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, db = filled
    code, out, _ = run(capsys, "streams", "status", "--redis", url, "--db", str(db))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("outbox: 2 unpublished, oldest ")
    assert lines[1] == f"order.paid  ({STREAM}): 3 entries, 3 dead letters"
    rows = {line.split()[0]: line.split()[1:] for line in lines[3:]}
    assert rows["other:zombie"][:3] == ["1", "1", "2"]  # consumers, pending, lag
    assert rows["svc:broken"][:3] == ["1", "0", "0"] and rows["svc:ok"][:3] == ["1", "0", "0"]
    code, out, _ = run(capsys, "streams", "status", "--redis", url, "--no-db", "--json")
    data = json.loads(out)
    assert "outbox" not in data and data["streams"][0]["dead"] == 3


def test_pending_and_dead_list_entries(
    filled: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = filled
    code, out, _ = run(
        capsys, "streams", "pending", "order.paid", "--group", "other:zombie", "--redis", url
    )
    assert code == 0 and out.splitlines()[0].split() == [
        "ENTRY",
        "CONSUMER",
        "IDLE",
        "(s)",
        "DELIVERIES",
        "STREAM",
    ]
    [row] = out.splitlines()[1:]
    assert row.split()[1] == "z1" and row.split()[3] == "1"
    code, out, _ = run(capsys, "streams", "dead", "--redis", url, "--json")
    letters = json.loads(out)
    assert sorted((d["group"], d["deliveries"], d["error"]) for d in letters) == [
        ("svc:broken", 1, f"RuntimeError: broken {i}") for i in range(3)
    ]
    code, out, _ = run(capsys, "streams", "dead", "order.paid", "--group", "svc:ok", "--redis", url)
    assert out == "no dead letters\n"


def test_replay_and_republish(filled: tuple[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    url, db = filled
    code, _, err = run(capsys, "streams", "replay", "order.paid", "--redis", url)
    assert code == 2 and "needs --id DEAD_ID (repeatable) or --all" in err
    sync = SyncRedis.from_url(url)
    try:
        letters: Any = sync.xrange("eventbus:evt:{order.paid}:dlq")
        first_dead = letters[0][0].decode()
        code, out, _ = run(
            capsys, "streams", "replay", "order.paid", "--id", first_dead, "--redis", url
        )
        assert (code, out) == (0, "replayed 1 dead letter\n")
        assert sync.xlen("eventbus:evt:{order.paid}:dlq") == 2
        assert sync.xlen("eventbus:evt:{order.paid}:re:svc:broken") == 1
        code, out, _ = run(capsys, "streams", "replay", "order.paid", "--all", "--redis", url)
        assert out == "replayed 2 dead letters\n"
        code, out, _ = run(
            capsys, "streams", "republish", "--since", "1h", "--redis", url, "--db", str(db)
        )
        assert (code, out) == (0, "3 outbox rows will be published again by the relays\n")
    finally:
        sync.close()


def test_bad_input_and_unreachable_servers(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "streams", "status", "--redis", "http://x", "--no-db")
    assert code == 2 and err.startswith("error: --redis 'http://x'")
    missing = tmp_path / "nope.db"
    code, _, err = run(capsys, "streams", "status", "--redis", redis_url, "--db", str(missing))
    assert code == 2 and "no database file" in err and not missing.exists()
    down = f"redis://127.0.0.1:{free_port()}/0"
    code, _, err = run(capsys, "streams", "dead", "--redis", down)
    assert code == 1 and err.startswith("error: Redis failed: ConnectionError")


def test_declare_forget_and_backfill_a_group(
    filled: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, db = filled
    code, out, _ = run(
        capsys, "streams", "declare", "order.paid", "--group", "audit:log", "--redis", url
    )
    assert (code, out) == (0, "group audit:log declared for order.paid\n")
    code, out, _ = run(capsys, "streams", "status", "--redis", url, "--no-db")
    assert "  registered, not created: audit:log (the janitor keeps" in out
    code, _, err = run(
        capsys, "streams", "declare", "order.paid", "--group", "nocolon", "--redis", url
    )
    assert code == 2 and "group 'nocolon' must be 'service:listener'" in err
    code, out, _ = run(
        capsys, "streams", "forget", "order.paid", "--group", "audit:log", "--redis", url
    )
    assert (code, out) == (0, "group audit:log of order.paid forgotten\n")
    code, out, _ = run(capsys, "streams", "status", "--redis", url, "--no-db", "--json")
    assert json.loads(out)["streams"][0]["absent_groups"] == []
    sync = SyncRedis.from_url(url)
    try:
        sync.xtrim(
            STREAM, maxlen=1, approximate=False
        )  # two of the three published events are gone
        code, out, _ = run(
            capsys, "streams", "backfill", "order.paid", "--group", "audit:log",
            "--since", "1h", "--redis", url, "--db", str(db),
        )  # fmt: skip
        assert (code, out) == (0, "2 events handed to group audit:log\n")
        assert sync.xlen("eventbus:evt:{order.paid}:re:audit:log") == 2
    finally:
        sync.close()
