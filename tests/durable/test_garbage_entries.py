"""Garbage in the streams, kind by kind, on SQLite and PostgreSQL: every malformed or forged
entry ends as a dead letter and a failure row of its own whose message names the reason (or,
a well-formed event carrying forged ``dead_*`` fields, as a plain delivery); no other row of
the failure table changes; and the consumer goes on with the next event.

Anyone who can write to the application's Redis can add such entries (``redis-cli XADD``);
the listener takes ``tx``, so the inbox insert would meet whatever the envelope let through.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus import FailureRecord, FailureStatus
from eventbus.backends.sql import SqlFailureStore, make_engine
from eventbus.durable import RedisStreams, create_durable_tables
from eventbus.durable._link import failure_id
from tests.durable.conftest import Factory, entries, wait_until
from tests.durable.events import OrderPaid, effects, test_metadata
from tests.eventbus.helpers import make_record

GROUP = "svc:grant"
GOOD: dict[Any, Any] = {
    "v": "1",
    "event_id": "garbage-1",
    "name": "order.paid",
    "seq": "99",
    "occurred_at": "2026-01-01T00:00:00+00:00",
    "payload": '{"order_id": 2}',
}
#: an in-process listener's failure, and a dead row of another group: neither may change
VICTIM = make_record(7)
OTHER = make_record(8).replace(
    durable_group="svc:other",
    durable_stream="eventbus:evt:{order.paid}",
    durable_entry="1-1",
    durable_deliveries=3,
    durable_seq=1,
    status=FailureStatus.DEAD,
)


def forged(row: FailureRecord, group: str = GROUP) -> dict[Any, Any]:
    return {
        "dead_group": group,
        "dead_entry": "1-1",
        "dead_deliveries": "3",
        "dead_error": "ValueError: forged",
        "dead_failure_id": row.id,
    }


def text(entry_id: bytes | str) -> str:
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id


def without(field: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD.items() if k != field}


@dataclasses.dataclass(frozen=True)
class Garbage:
    fields: dict[Any, Any]
    reason: str | None  #: in the dead letter's error and the row's message; None: delivered
    restream: bool = False  #: added to the group's own redelivery stream


CASES = {
    "no-fields-of-ours": Garbage({"junk": "1"}, "version None"),
    "missing-version": Garbage(without("v"), "version None"),
    "unknown-version": Garbage({**GOOD, "v": "9"}, "version '9', expected '1'"),
    "missing-event_id": Garbage(without("event_id"), "field 'event_id' is missing"),
    "missing-name": Garbage(without("name"), "field 'name' is missing"),
    "missing-seq": Garbage(without("seq"), "field 'seq' is missing"),
    "missing-occurred_at": Garbage(without("occurred_at"), "field 'occurred_at' is missing"),
    "missing-payload": Garbage(without("payload"), "field 'payload' is missing"),
    "other-event": Garbage({**GOOD, "name": "order.refunded"}, "for 'order.refunded'"),
    "name-10k": Garbage({**GOOD, "name": "n" * 10_000}, "(10000 characters), not for"),
    "version-10k": Garbage({**GOOD, "v": "9" * 10_000}, "(10000 characters), expected '1'"),
    "seq-text": Garbage({**GOOD, "seq": "x"}, "seq 'x' is not an int"),
    "seq-float": Garbage({**GOOD, "seq": "1.5"}, "seq '1.5' is not an int"),
    "seq-past-int64": Garbage({**GOOD, "seq": str(2**63)}, "does not fit 64 bits"),
    "seq-below-int64": Garbage({**GOOD, "seq": str(-(2**63) - 1)}, "does not fit 64 bits"),
    "seq-huge": Garbage({**GOOD, "seq": "9" * 5000}, "is not an int"),
    "4000-fields": Garbage(
        {**GOOD, **{f"x{i}": "y" for i in range(4_000)}}, "4006 fields, more than the 64"
    ),
    "65-fields": Garbage({**GOOD, **{f"x{i}": "y" for i in range(59)}}, "65 fields"),
    "event_id-65": Garbage({**GOOD, "event_id": "e" * 65}, "event_id 'eeeeeeeeeeeeeeeeeeeeeeee'"),
    "event_id-10k": Garbage({**GOOD, "event_id": "e" * 10_000}, "(10000 characters)"),
    "event_id-nul": Garbage({**GOOD, "event_id": "e\x001"}, "'event_id' holds a NUL"),
    "correlation-65": Garbage({**GOOD, "correlation_id": "c" * 65}, "correlation_id 'cccc"),
    "causation-300": Garbage({**GOOD, "causation_id": "c" * 300}, "causation_id 'cccc"),
    "payload-nul": Garbage({**GOOD, "payload": '{"order_id": 2}\x00'}, "'payload' holds a NUL"),
    "field-name-nul": Garbage({**GOOD, "x\x00": "1"}, "field 'x\\x00' holds a NUL"),
    "payload-not-utf8": Garbage({**GOOD, "payload": b"\xc3("}, "'payload' is not UTF-8"),
    "name-not-utf8": Garbage({**GOOD, b"\xff": "1"}, "is not UTF-8"),
    "payload-not-json": Garbage({**GOOD, "payload": "{not json"}, "stored payload is not JSON"),
    "payload-a-list": Garbage({**GOOD, "payload": "[1, 2]"}, "is a JSON list, not an object"),
    "payload-missing-field": Garbage({**GOOD, "payload": "{}"}, "PayloadError"),
    "payload-unknown-field": Garbage(
        {**GOOD, "payload": '{"order_id": 2, "x": 1}'}, "PayloadError"
    ),
    "headers-not-json": Garbage({**GOOD, "headers": "{bad"}, "headers are not a JSON object"),
    "headers-a-list": Garbage({**GOOD, "headers": "[1]"}, "headers are not a JSON object"),
    "headers-not-strings": Garbage(
        {**GOOD, "headers": '{"a": 1}'}, "headers are not a JSON object"
    ),
    "forged-dead-on-stream": Garbage({**GOOD, **forged(VICTIM)}, None),
    "forged-dead-on-stream-dies": Garbage(
        {**GOOD, "payload": "{not json", **forged(VICTIM)}, "stored payload is not JSON"
    ),
    "forged-dead-other-group": Garbage({**GOOD, **forged(OTHER, "svc:other")}, None),
    "forged-dead-on-restream": Garbage({**GOOD, **forged(OTHER)}, None, restream=True),
    "forged-dead-on-restream-dies": Garbage(
        {**GOOD, "seq": "x", **forged(VICTIM)}, "seq 'x' is not an int", restream=True
    ),
    "forged-dead-on-restream-its-id": Garbage(
        {**GOOD, "event_id": VICTIM.event_id, **forged(VICTIM)}, None, restream=True
    ),
}


@pytest.fixture(params=["sqlite", "postgres"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'app.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    eng = make_engine(url)
    async with eng.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
    await create_durable_tables(eng)
    yield eng
    await eng.dispose()


async def table(store: SqlFailureStore) -> dict[str, FailureRecord]:
    await store.flush()
    return {r.id: r for r in await store.query(limit=None)}


def transport(
    make_streams: Factory, db: AsyncEngine, store: SqlFailureStore
) -> tuple[RedisStreams, list[int]]:
    """A transport whose listener takes ``tx`` (an inbox row per event) and an effect row."""
    streams = make_streams(engine=db, failures=store)
    got: list[int] = []

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        row = {"listener": "grant", "event_id": "", "order_id": e.order_id}
        await tx.execute(effects.insert().values(**row))
        got.append(e.order_id)

    streams.subscribe(OrderPaid, grant, name="grant")
    return streams, got


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
async def test_each_kind_of_garbage_entry_ends_as_a_dead_letter_and_a_row_of_its_own(
    make_streams: Factory, db: AsyncEngine, client: Redis, tmp_path: Path, case: Garbage
) -> None:
    store = SqlFailureStore(db, spill_path=tmp_path / "spill.jsonl")
    store.record(VICTIM)
    store.record(OTHER)
    before = await table(store)
    streams, got = transport(make_streams, db, store)
    stream = streams.keys.stream("order.paid")
    key = streams.keys.redeliver("order.paid", GROUP) if case.restream else stream
    delivered = [2] if case.reason is None else []
    async with streams:
        entry = text(await client.xadd(key, case.fields))
        async with db.begin() as conn:
            await streams.publish(OrderPaid(order_id=3), conn)
        await wait_until(lambda: sorted(got) == sorted([*delivered, 3]), what="the good event")
        if case.reason is not None:
            await wait_until(lambda: streams.statistics().group("grant").dead == 1, what="dead")
        await wait_until(lambda: streams.statistics().group("grant").in_flight == 0, what="done")
        assert streams.running

        async def acknowledged() -> bool:  # acknowledgements go out a few ms later
            return all([(await client.xpending(k, GROUP))["pending"] == 0 for k in (stream, key)])

        await wait_until(acknowledged, what="every entry acknowledged")
    after = await table(store)
    new = {fid: row for fid, row in after.items() if fid not in before}
    assert {fid: after[fid] for fid in before} == before  # nothing else changed
    letters = await entries(client, streams.keys.dead("order.paid"))
    if case.reason is None:
        assert new == {} and letters == []
        return
    [(_, dead)] = letters
    assert dead[b"dead_entry"] == entry.encode() and dead[b"dead_group"] == GROUP.encode()
    assert case.reason in dead[b"dead_error"].decode("utf-8", "replace")
    [(fid, row)] = new.items()
    assert fid == failure_id(GROUP, key, entry) == dead[b"dead_failure_id"].decode()
    assert (row.status, row.listener, row.attempts) == (FailureStatus.DEAD, "grant", 1)
    assert case.reason in f"{row.error_type}: {row.message}"
    assert len(row.event_id) <= 64 and "\x00" not in row.event_id
