"""The janitor and groups that do not exist yet (F11 with another group consuming): a group
declared before its service first runs, or one that vanished, keeps its entries in the
stream until the outbox's retention; ``forget_group`` lets them go; ``backfill`` hands a
group that came too late what the outbox still retains."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus.durable import RedisStreams
from eventbus.durable._tables import inbox
from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import OrderPaid

STREAM = "eventbus:evt:{order.paid}"


async def publish(streams: RedisStreams, engine: AsyncEngine, *order_ids: int) -> None:
    async with engine.begin() as conn:
        await streams.publish_many([OrderPaid(order_id=i) for i in order_ids], conn)


async def consume_all(
    make_streams: Factory, engine: AsyncEngine, n: int, **kwargs: Any
) -> RedisStreams:
    """Service "billing" publishes *n* events, reads them all, and runs its janitor."""
    got: list[int] = []
    billing = make_streams(service="billing", **kwargs)
    billing.subscribe(OrderPaid, lambda e: got.append(e.order_id), name="grant")
    async with billing:
        await publish(billing, engine, *range(n))
        await wait_until(lambda: len(got) == n, what="billing's events")
        await wait_until(lambda: _acked(billing), what="billing's acknowledgements")
        await billing.sweep()
    return billing


async def _acked(streams: RedisStreams) -> bool:
    [status] = await streams.status(["order.paid"])
    return all(g.pending == 0 and g.lag == 0 for g in status.groups)


async def late_service(make_streams: Factory, n: int) -> list[int]:
    """Service "audit" starts for the first time; return what its listener got once it has
    had *n* events (waited for on a busy machine too, never cut off at a fixed time)."""
    got: list[int] = []
    audit = make_streams(service="audit")
    audit.subscribe(OrderPaid, lambda e: got.append(e.order_id), name="log")
    async with audit:
        await wait_until(lambda: len(got) >= n, what=f"the late service's {n} events")
    return got


async def test_f11_without_a_declaration_the_janitor_trims_what_every_group_has_read(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """What the declaration is for: an unknown group cannot be waited for."""
    billing = await consume_all(make_streams, engine, 300)
    assert billing.statistics().janitor.trimmed > 0
    kept = await client.xlen(STREAM)
    assert kept < 300
    assert sorted(await late_service(make_streams, kept)) == list(range(300 - kept, 300))


async def test_f11_a_group_declared_before_its_service_first_runs_gets_every_event(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    """Regression test: the janitor of a service already consuming trimmed the events a
    newly deployed service needed (the reviewer's e2_janitor_newservice: 0 of 300)."""
    operator = make_streams(service="deploy", options=replace(FAST, relay=False))
    await operator.declare_group("order.paid", "audit:log")  # a deployment step
    billing = await consume_all(make_streams, engine, 300)
    assert billing.statistics().janitor.trimmed == 0
    assert sorted(await late_service(make_streams, 300)) == list(range(300))
    [status] = await billing.status(["order.paid"])
    assert status.absent_groups == ()  # it exists now
    await billing.sweep()  # every registered group has read them: now they go
    assert billing.statistics().janitor.trimmed > 0


async def test_a_registered_group_that_vanished_keeps_its_entries_until_retention(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    opts = replace(FAST, retention=timedelta(hours=1))
    audit = make_streams(service="audit", options=opts)
    audit.subscribe(OrderPaid, lambda e: None, name="log")
    async with audit:  # registers its group (and creates it)
        pass
    await client.xgroup_destroy(STREAM, "audit:log")  # gone (by hand, a failover...)
    billing = await consume_all(make_streams, engine, 300, options=opts)
    [status] = await billing.status(["order.paid"])
    assert status.absent_groups == ("audit:log",)
    assert billing.statistics().janitor.trimmed == 0  # younger than the outbox retains: kept
    # The same entries to a janitor whose retention is shorter than their age (a retention
    # the test outlives, rather than one the consumption above must beat on a busy machine).
    brief = make_streams(service="billing", options=replace(FAST, retention=timedelta(seconds=0.2)))
    await wait_until(lambda: _swept(brief), what="entries older than the retention trimmed")
    assert brief.statistics().janitor.trimmed > 0


async def _swept(streams: RedisStreams) -> bool:
    return await streams.sweep(["order.paid"]) > 0


async def test_forget_group_lets_the_janitor_trim_and_removes_the_group(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    operator = make_streams(service="deploy", options=replace(FAST, relay=False))
    await operator.declare_group("order.paid", "audit:log")
    billing = await consume_all(make_streams, engine, 300)
    assert billing.statistics().janitor.trimmed == 0
    await operator.forget_group("order.paid", "audit:log")
    await billing.sweep()
    assert billing.statistics().janitor.trimmed > 0
    [status] = await billing.status(["order.paid"])
    assert status.absent_groups == () and [g.name for g in status.groups] == ["billing:grant"]


async def test_backfill_hands_a_late_group_the_retained_outbox_rows_and_no_one_else(
    make_streams: Factory, engine: AsyncEngine, client: Redis
) -> None:
    since = datetime.now(UTC)
    billing = await consume_all(make_streams, engine, 300)
    assert billing.statistics().janitor.trimmed > 0  # undeclared: trimmed
    operator = make_streams(service="deploy", options=replace(FAST, relay=False))
    still_there = await client.xlen(STREAM)  # XTRIM ~ trims whole nodes only
    assert await operator.backfill("order.paid", "audit:log", since=since) == 300 - still_there
    got = await late_service(make_streams, 300)
    assert sorted(got) == list(range(300))
    [status] = await billing.status(["order.paid"])
    [grant] = [g for g in status.groups if g.name == "billing:grant"]
    assert (grant.pending, grant.lag) == (0, 0)  # billing saw nothing again


async def test_a_service_that_only_consumes_purges_its_inbox(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    """Review risk 10e: only relays purged the inbox, so a consumer-only service
    (``relay=False``) kept every inbox row for ever."""
    publisher = make_streams(service="shop")
    async with publisher:
        await publish(publisher, engine, 1, 2, 3)
        await wait_until(lambda: publisher.statistics().relay.published == 3, what="published")
    opts = replace(FAST, relay=False, retention=timedelta(seconds=0.3), purge_interval=0.1)
    consumer = make_streams(service="billing", options=opts)
    done: list[int] = []

    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        done.append(e.order_id)

    consumer.subscribe(OrderPaid, grant, name="grant")
    async with consumer:
        await wait_until(lambda: len(done) == 3, what="the three events")
        await wait_until(lambda: _inbox_empty(engine), what="the inbox purged")


async def _inbox_empty(engine: AsyncEngine) -> bool:
    async with engine.connect() as conn:
        return (await conn.execute(sa.select(sa.func.count()).select_from(inbox))).scalar() == 0
