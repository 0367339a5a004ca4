"""Real processes killed, stopped and restarted around one Redis and one SQLite file: the
fault scenarios of durable events that only separate processes can show (F2-F4, F6, F9-F11,
F16, F17). Each process is ``tests.durable.app``; what listeners did is read from the
database, what relays and consumers counted from the statistics a process prints at exit.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import FailureStatus
from eventbus.backends.sql import SqlFailureStore
from eventbus.durable import DeliveriesExhaustedError
from eventbus.durable._tables import outbox
from tests.durable.conftest import App, call_rows, effect_rows, wait_until

pytestmark = pytest.mark.slow

Apps = Callable[..., Awaitable[App]]
STREAM = "eventbus:evt:{order.paid}"


async def outbox_row(engine: AsyncEngine) -> sa.Row[object]:
    async with engine.connect() as conn:
        [row] = (await conn.execute(sa.select(outbox))).all()
    return row


async def n_effects(engine: AsyncEngine, n: int) -> bool:
    return len(await effect_rows(engine)) >= n


async def test_f2_a_publisher_killed_after_commit_is_published_by_another_relay(
    apps: Apps, engine: AsyncEngine, calls_file: Path
) -> None:
    publisher = await apps("--publish", "1", "--pause-at", "claimed", ready="paused claimed")
    publisher.kill()  # committed, claimed by its own relay, never added to Redis
    await publisher.proc.wait()
    consumer = await apps("--listener", "grant=effect")
    await wait_until(lambda: n_effects(engine, 1), what="the effect")
    stats = await consumer.stop()
    assert stats["relay"]["published"] == 1
    row = await outbox_row(engine)
    assert row.published_at is not None and row.attempts == 2  # the dead claim, then ours
    assert len(call_rows(calls_file)) == 1


async def test_f3_a_relay_killed_between_xadd_and_mark_adds_the_event_once(
    apps: Apps, engine: AsyncEngine, client: Redis, calls_file: Path
) -> None:
    relay = await apps("--publish", "1", "--pause-at", "published", ready="paused published")
    relay.kill()
    await relay.proc.wait()
    assert await client.xlen(STREAM) == 1  # it did add the entry
    consumer = await apps("--listener", "grant=effect")
    await wait_until(lambda: n_effects(engine, 1), what="the effect")
    await wait_until(lambda: _published(engine), what="the mark, after the lease")
    stats = await consumer.stop()
    assert (stats["relay"]["published"], stats["relay"]["deduplicated"]) == (0, 1)
    assert await client.xlen(STREAM) == 1
    assert len(call_rows(calls_file)) == 1
    assert (await outbox_row(engine)).published_at is not None


async def test_f4_a_relay_stopped_past_its_lease_marks_nothing_when_it_resumes(
    apps: Apps, engine: AsyncEngine, client: Redis, calls_file: Path
) -> None:
    first = await apps(
        "--publish", "1", "--pause-at", "published", "--pause-seconds", "1.5",
        ready="paused published",
    )  # fmt: skip
    os.kill(first.proc.pid, signal.SIGSTOP)
    try:
        second = await apps("--listener", "grant=effect")
        await wait_until(lambda: n_effects(engine, 1), what="the effect")
        await wait_until(lambda: _published(engine), what="the second relay's mark", within=10)
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    await first.expect("at marked")  # its late mark, after the pause
    first_stats = await first.stop()
    second_stats = await second.stop()
    assert first_stats["relay"]["leases_lost"] == 1  # its mark found another claim's token
    assert second_stats["relay"]["deduplicated"] == 1
    assert await client.xlen(STREAM) == 1
    assert len(call_rows(calls_file)) == 1


async def test_f4_a_relay_stopped_before_its_xadd_past_its_lease_adds_nothing(
    apps: Apps, engine: AsyncEngine, client: Redis, calls_file: Path
) -> None:
    """Regression test: stopped after its lease check and before its XADD, until the other
    relay had published, marked, and its publish key had expired, the first relay added the
    event again when it resumed. The PUBLISH script's fence refuses it now."""
    first = await apps(
        "--publish", "1", "--pause-at", "adding", "--pause-seconds", "0.3",
        ready="paused adding",
    )  # fmt: skip
    os.kill(first.proc.pid, signal.SIGSTOP)
    try:
        second = await apps("--listener", "grant=effect")
        await wait_until(lambda: n_effects(engine, 1), what="the effect")
        await wait_until(lambda: _published(engine), what="the second relay's mark", within=10)
        key = f"eventbus:evt:{{order.paid}}:pub:{(await outbox_row(engine)).event_id}"
        await wait_until(lambda: _no_key(client, key), what="the publish key to expire")
    finally:
        os.kill(first.proc.pid, signal.SIGCONT)
    await first.expect("at published")  # it went on after the pause: the script refused
    first_stats = await first.stop()
    second_stats = await second.stop()
    assert (first_stats["relay"]["published"], first_stats["relay"]["leases_lost"]) == (0, 1)
    assert second_stats["relay"]["published"] == 1
    assert await client.xlen(STREAM) == 1
    assert len(call_rows(calls_file)) == 1


async def _no_key(client: Redis, key: str) -> bool:
    return not await client.exists(key)


async def _published(engine: AsyncEngine) -> bool:
    return (await outbox_row(engine)).published_at is not None


async def test_f6_a_consumer_killed_mid_call_is_reclaimed_by_a_replica(
    apps: Apps, engine: AsyncEngine, calls_file: Path
) -> None:
    doomed = await apps("--consumer", "doomed", "--listener", "grant=slow:30", "--publish", "1")
    await wait_until(lambda: _calls(calls_file, 1), what="the first call")
    replica = await apps("--consumer", "replica", "--listener", "grant=effect")
    doomed.kill()
    await wait_until(lambda: n_effects(engine, 1), what="the reclaimed call's effect")
    stats = await replica.stop()
    [group] = stats["groups"]
    assert (group["reclaimed"], group["succeeded"]) == (1, 1)
    assert [c.consumer for c in call_rows(calls_file)] == ["doomed", "replica"]
    assert len(await effect_rows(engine)) == 1  # one effect: the killed call's never committed


def _calls(path: Path, n: int) -> bool:
    return len(call_rows(path)) >= n


async def test_f9_a_listener_that_kills_its_process_still_ends_dead(
    apps: Apps, engine: AsyncEngine, db_url: str, calls_file: Path
) -> None:
    common = ("--listener", "boom=exit", "--max-deliveries", "3")
    first = await apps(*common, "--publish", "1", ready="published")
    assert await first.proc.wait() == 3  # the listener ended the process
    for _ in range(2):  # a supervisor restarts it; each restart is one more delivery
        app = await apps(*common)
        with anyio.fail_after(20):
            assert await app.proc.wait() == 3
    last = await apps(*common)
    store = SqlFailureStore(db_url, create_table=False)
    try:
        await wait_until(lambda: _dead(store), what="the dead row", within=15)
        [rec] = await store.query()
    finally:
        await store.aclose()
    stats = await last.stop()
    assert len(call_rows(calls_file)) == 3  # exactly max_deliveries calls
    assert stats["groups"][0]["dead"] == 1
    assert rec.status == FailureStatus.DEAD and rec.attempts == 3  # calls, not deliveries
    assert rec.error_type.endswith(DeliveriesExhaustedError.__qualname__)
    assert "the process ended" in rec.message and "while it ran, 3 times" in rec.message


async def _dead(store: SqlFailureStore) -> bool:
    try:
        return bool(await store.query(status=FailureStatus.DEAD))
    except sa.exc.OperationalError:  # the table is created with the first record
        return False


async def test_f10_two_services_with_two_replicas_each(
    apps: Apps, engine: AsyncEngine, calls_file: Path
) -> None:
    n = 120
    replicas: list[App] = []

    async def replica(service: str, i: int, spec: str) -> None:
        replicas.append(
            await apps("--service", service, "--consumer", f"{service}-{i}", "--listener", spec)
        )

    async with anyio.create_task_group() as tg:  # four interpreters start at once
        for service, spec in (("billing", "grant=slow:0.02"), ("audit", "audit=slow:0.02")):
            for i in (1, 2):
                tg.start_soon(replica, service, i, spec)
    publisher = await apps("--publish", str(n), "--no-relay", ready="published")
    await wait_until(lambda: n_effects(engine, 2 * n), what="every effect", within=30)
    for app in (publisher, *replicas):
        await app.stop()
    effects = await effect_rows(engine)
    for listener in ("grant", "audit"):
        orders = Counter(e.order_id for e in effects if e.listener == listener)
        assert sorted(orders) == list(range(n)) and set(orders.values()) == {1}
    per_consumer = Counter(c.consumer for c in call_rows(calls_file))
    assert set(per_consumer) == {"billing-1", "billing-2", "audit-1", "audit-2"}  # shared


async def test_f11_events_published_before_the_service_first_ran_are_delivered(
    apps: Apps, engine: AsyncEngine, client: Redis
) -> None:
    publisher = await apps("--publish", "20")
    await wait_until(lambda: _xlen(client, 20), what="20 entries")
    await publisher.stop()
    assert await client.exists("eventbus:evt:{order.paid}") and not await client.xinfo_groups(
        STREAM
    )
    service = await apps("--service", "late", "--listener", "grant=effect")
    await wait_until(lambda: n_effects(engine, 20), what="the backlog")
    await service.stop()
    assert sorted(e.order_id for e in await effect_rows(engine)) == list(range(20))


async def test_f11_with_another_service_consuming_and_its_janitor_running(
    apps: Apps, engine: AsyncEngine, client: Redis, redis_url: str, calls_file: Path
) -> None:
    """The late service's group is declared by a deployment step (``streams declare``)
    before the first event; the janitor of the service already consuming keeps its entries."""
    declare = [sys.executable, "-m", "eventbus", "streams", "declare", "order.paid"]
    done = await anyio.run_process([*declare, "--group", "late:grant", "--redis", redis_url])
    assert done.stdout.decode() == "group late:grant declared for order.paid\n"
    early = await apps(
        "--service", "early", "--listener", "audit=call", "--janitor-interval", "0.1",
        "--publish", "20",
    )  # fmt: skip
    await wait_until(lambda: _calls(calls_file, 20), what="the early service's calls")
    await anyio.sleep(0.5)  # several janitor rounds, every entry read and acknowledged
    early_stats = await early.stop()
    assert early_stats["janitor"]["trimmed"] == 0 and await client.xlen(STREAM) == 20
    late = await apps("--service", "late", "--listener", "grant=effect")
    await wait_until(lambda: n_effects(engine, 20), what="the backlog")
    await late.stop()
    assert sorted(e.order_id for e in await effect_rows(engine)) == list(range(20))


async def _xlen(client: Redis, n: int) -> bool:
    return bool(await client.xlen(STREAM) >= n)


async def test_f16_a_consumer_restarted_under_a_new_name_takes_over_its_old_entries(
    apps: Apps, engine: AsyncEngine, client: Redis, calls_file: Path
) -> None:
    args = ("--consumer-idle", "0.3", "--janitor-interval", "0.2")
    old = await apps(*args, "--consumer", "old", "--listener", "grant=slow:30", "--publish", "1")
    await wait_until(lambda: _calls(calls_file, 1), what="the first call")
    old.kill()
    # Made after the kill, so idle for less time than the old consumer, and owning nothing:
    # the janitor deletes it in its first round past consumer_idle.
    await client.xgroup_createconsumer(STREAM, "svc:grant", "unused")
    # A process that cannot take the entry over (its visibility is far away) runs the janitor:
    # its rounds are watched with no race against the takeover, however slowly it started.
    keeper = await apps(
        *args, "--visibility", "600", "--consumer", "keeper", "--listener", "grant=effect"
    )
    await wait_until(lambda: _gone(client, b"unused"), what="a janitor round")
    consumers = {c["name"]: c for c in await client.xinfo_consumers(STREAM, "svc:grant")}
    assert consumers[b"old"]["pending"] == 1  # idle past consumer_idle, but owns an entry: kept
    await keeper.stop()
    new = await apps(*args, "--visibility", "2", "--consumer", "new", "--listener", "grant=effect")
    await wait_until(lambda: n_effects(engine, 1), what="the takeover", within=20)
    await wait_until(lambda: _only(client, b"new"), what="the old consumer deleted")
    stats = await new.stop()
    assert stats["groups"][0]["reclaimed"] == 1 and stats["janitor"]["consumers_deleted"] >= 1


async def _gone(client: Redis, name: bytes) -> bool:
    return name not in {c["name"] for c in await client.xinfo_consumers(STREAM, "svc:grant")}


async def _only(client: Redis, name: bytes) -> bool:
    return {c["name"] for c in await client.xinfo_consumers(STREAM, "svc:grant")} == {name}


async def test_f17_sigterm_mid_call_stops_without_acknowledging(
    apps: Apps, engine: AsyncEngine, client: Redis, calls_file: Path
) -> None:
    first = await apps(
        "--consumer", "first", "--listener", "grant=slow:30", "--grace", "0.3", "--publish", "1"
    )
    await wait_until(lambda: _calls(calls_file, 1), what="the call")
    first.proc.send_signal(signal.SIGTERM)
    with anyio.fail_after(15):
        assert await first.proc.wait() == 0  # a clean stop
    [pending] = await client.xpending_range(STREAM, "svc:grant", min="-", max="+", count=10)
    assert pending["consumer"] == b"first"  # cancelled, never acknowledged
    second = await apps("--consumer", "second", "--listener", "grant=effect")
    await wait_until(lambda: n_effects(engine, 1), what="the redelivery")
    await second.stop()
    assert [c.consumer for c in call_rows(calls_file)] == ["first", "second"]


async def test_a_consumer_killed_between_a_batch_commit_and_its_acks_repeats_no_effect(
    apps: Apps, engine: AsyncEngine, client: Redis, calls_file: Path
) -> None:
    doomed = await apps(
        "--listener", "grant=effect", "--concurrency", "20", "--publish", "20",
        "--pause-at", "batch-committed", ready="paused batch-committed",
    )  # fmt: skip
    doomed.kill()  # the batch committed (effects and inbox rows), nothing acknowledged
    await doomed.proc.wait()
    committed = len(await effect_rows(engine))
    assert committed > 1
    replica = await apps("--listener", "grant=effect")
    await wait_until(lambda: _none_pending(client), what="the acknowledgements")
    stats = await replica.stop()
    [group] = stats["groups"]
    assert group["duplicates"] == committed  # the inbox found each committed one
    assert Counter(r.order_id for r in await effect_rows(engine)) == Counter(range(20))
    assert len(call_rows(calls_file)) == 20  # no committed call ran again


async def _none_pending(client: Redis) -> bool:
    summary: Any = await client.xpending(STREAM, "svc:grant")
    return bool(summary["pending"] == 0)
