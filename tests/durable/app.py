"""One durable-events process for the multi-process tests: a publisher, a relay, consumers,
all through an ``EventBus`` with a ``RedisStreams`` transport.

``python -m tests.durable.app --redis URL --db URL --service NAME [options]``

Listeners (``--listener NAME=KIND``, repeatable) leave traces the tests read: every call
appends a JSON line to the ``--calls`` file (so duplicates show: a file, so that no database
lock is held across the call), and listeners that take ``tx`` add a ``test_effects`` row in
their transaction (the inbox keeps it to one per event). Dead deliveries go to the
database's failure table. Kinds: ``effect`` (tx), ``call`` (no tx),
``slow:S`` (tx, sleeps S seconds first), ``exit`` (exits the process mid-call), ``fail``
(raises), ``poison:N`` and ``hang:N`` (tx; for order N, exit the process, or block it for
``HANG`` seconds first). ``--pause-at POINT`` makes the relay stop at a fault point (``claimed`` or
``published``) once, printing ``paused POINT``; the test then kills or stops the process.

``--schedule-ahead A:B`` publishes each event for later, due A to B seconds ahead (spread by
order id), ``--cancel-every N`` then cancels every Nth one in a transaction of its own, and
``--schedule-log PATH`` gets one JSON line per event (order id, event id, due Unix time,
cancelled).

Prints ``ready`` once running and ``stats {json}`` when it stops. Stops gracefully when
stdin closes or on SIGTERM.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from sqlalchemy.ext.asyncio import AsyncConnection

from eventbus import EventBus
from eventbus.backends.redis import make_redis_client
from eventbus.backends.sql import SqlFailureStore, make_engine
from eventbus.durable import DurableOptions, RedisStreams, current_delivery
from tests.durable.events import REG, OrderPaid, effects, test_metadata

#: how long a ``hang:N`` listener blocks its process (past a test's visibility, below SQLite's
#: busy timeout: the blocked call holds the write lock the next consumer waits for)
HANG = 2.5


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def record_call(path: str, listener: str, e: OrderPaid, consumer: str) -> None:
    """Append one line per call (one ``write``: whole, even if the process dies next)."""
    line = json.dumps(
        {
            "listener": listener,
            "event_id": current_delivery().event_id,
            "order_id": e.order_id,
            "consumer": consumer,
            "at": time.time(),
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def make_listener(
    kind: str, name: str, calls_path: str, consumer: str
) -> Callable[..., Awaitable[None]]:
    async def effect(conn: AsyncConnection, e: OrderPaid) -> None:
        await conn.execute(
            effects.insert().values(
                listener=name, event_id=current_delivery().event_id, order_id=e.order_id
            )
        )

    if kind == "effect":

        async def on_effect(e: OrderPaid, tx: AsyncConnection) -> None:
            record_call(calls_path, name, e, consumer)
            await effect(tx, e)

        return on_effect
    if kind.startswith("slow:"):
        seconds = float(kind.split(":", 1)[1])

        async def on_slow(e: OrderPaid, tx: AsyncConnection) -> None:
            record_call(calls_path, name, e, consumer)
            await anyio.sleep(seconds)
            await effect(tx, e)

        return on_slow
    if kind == "call":

        async def on_call(e: OrderPaid) -> None:
            record_call(calls_path, name, e, consumer)

        return on_call
    if kind == "exit":

        async def on_exit(e: OrderPaid) -> None:
            record_call(calls_path, name, e, consumer)
            os._exit(3)

        return on_exit
    if kind.startswith(("poison:", "hang:")):
        poison = int(kind.split(":", 1)[1])
        hang = kind.startswith("hang:")

        async def on_poison(e: OrderPaid, tx: AsyncConnection) -> None:
            record_call(calls_path, name, e, consumer)
            if e.order_id == poison:
                if hang:  # blocks the event loop past visibility: no lease is renewed
                    time.sleep(HANG)  # noqa: ASYNC251 (the point: a stalled process)
                os._exit(3)
            await effect(tx, e)

        return on_poison
    if kind == "fail":

        async def on_fail(e: OrderPaid) -> None:
            record_call(calls_path, name, e, consumer)
            raise RuntimeError(f"listener {name} fails for order {e.order_id}")

        return on_fail
    raise SystemExit(f"unknown listener kind {kind!r}")


async def main(args: argparse.Namespace) -> None:
    client = make_redis_client(args.redis, socket_timeout=args.block + 2, max_connections=32)
    engine = make_engine(args.db)
    async with engine.begin() as conn:
        await conn.run_sync(test_metadata.create_all)
    paused: set[str] = set()

    async def fault(point: str) -> None:
        if point == args.pause_at and point not in paused:
            paused.add(point)
            say(f"paused {point}")
            await anyio.sleep(args.pause_seconds)
        if args.pause_at:
            say(f"at {point}")

    options = DurableOptions(
        visibility=args.visibility,
        max_deliveries=args.max_deliveries,
        concurrency=args.concurrency,
        retry_backoff=min(args.retry_backoff, args.visibility),
        lease=args.lease,
        poll_interval=args.poll,
        block=args.block,
        relay=not args.no_relay,
        relay_batch=args.batch,
        shutdown_grace=args.grace,
        publish_key_ttl=max(60.0, args.lease * 10),
        consumer_idle=args.consumer_idle,
        janitor_interval=args.janitor_interval,
    )
    streams = RedisStreams(
        client,
        engine,
        service=args.service,
        registry=REG,
        options=options,
        consumer=args.consumer,
        _fault=fault,
    )
    bus = EventBus(REG, SqlFailureStore(engine), durable=streams)
    for spec in args.listener:
        name, _, kind = spec.partition("=")
        listener = make_listener(kind, name, args.calls, streams.consumer)
        bus.on(OrderPaid, listener, durable=True, name=name)
    try:
        async with bus:
            if args.schedule_ahead:
                await publish_scheduled(bus, engine, args)
            for first in range(args.publish_from, args.publish_from + args.publish, 50):
                last = min(first + 50, args.publish_from + args.publish)
                async with engine.begin() as conn:
                    for i in range(first, last):
                        await bus.publish(OrderPaid(order_id=i), conn)
            if args.publish:
                say("published")
                if args.exit_after_publish:
                    os._exit(0)
            say("ready")
            async with anyio.create_task_group() as tg:

                async def until_stdin_closes() -> None:
                    await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
                    tg.cancel_scope.cancel()

                async def until_sigterm() -> None:
                    with anyio.open_signal_receiver(signal.SIGTERM) as signals:
                        async for _ in signals:
                            tg.cancel_scope.cancel()
                            return

                tg.start_soon(until_stdin_closes)
                tg.start_soon(until_sigterm)
        stats: dict[str, Any] = dataclasses.asdict(streams.statistics())
        say("stats " + json.dumps(stats))
    finally:
        await client.aclose()
        await engine.dispose()


async def publish_scheduled(bus: EventBus, engine: Any, args: argparse.Namespace) -> None:
    """Publish ``--publish`` events due ``--schedule-ahead`` seconds ahead, cancel every
    ``--cancel-every``-th one, log each to ``--schedule-log``; then say ``published``."""
    low, high = (float(x) for x in args.schedule_ahead.split(":"))
    orders = range(args.publish_from, args.publish_from + args.publish)
    log: list[dict[str, Any]] = []
    async with engine.begin() as conn:
        for i in orders:
            ahead = low + (high - low) * ((i * 37) % 100) / 99
            due = datetime.now(UTC) + timedelta(seconds=ahead)
            event_id = await bus.publish(OrderPaid(order_id=i), conn, deliver_at=due)
            log.append({"order_id": i, "event_id": event_id, "due": due.timestamp()})
    for entry in log:
        entry["cancelled"] = bool(args.cancel_every) and entry["order_id"] % args.cancel_every == 0
        if entry["cancelled"]:
            async with engine.begin() as conn:
                if not await bus.cancel_scheduled(entry["event_id"], conn):
                    raise SystemExit(f"could not cancel {entry}")
    text = "".join(json.dumps(entry) + "\n" for entry in log)
    async with await anyio.open_file(args.schedule_log, "a") as f:
        await f.write(text)
    say("published")
    args.publish = 0  # done: the plain publishing below has nothing left


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--redis", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--calls", required=True, help="a file: one JSON line per listener call")
    p.add_argument("--service", default="svc")
    p.add_argument("--consumer")
    p.add_argument("--listener", action="append", default=[])
    p.add_argument("--visibility", type=float, default=1.0)
    p.add_argument("--max-deliveries", type=int, default=5)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--retry-backoff", type=float, default=0.1)
    p.add_argument("--lease", type=float, default=1.0)
    p.add_argument("--poll", type=float, default=0.1)
    p.add_argument("--block", type=float, default=0.5)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--grace", type=float, default=2.0)
    p.add_argument("--consumer-idle", type=float, default=3600.0)
    p.add_argument("--janitor-interval", type=float, default=60.0)
    p.add_argument("--no-relay", action="store_true")
    p.add_argument("--pause-at")
    p.add_argument("--pause-seconds", type=float, default=3600.0)
    p.add_argument("--publish", type=int, default=0)
    p.add_argument("--publish-from", type=int, default=0)
    p.add_argument("--exit-after-publish", action="store_true")
    p.add_argument("--schedule-ahead", metavar="A:B")
    p.add_argument("--cancel-every", type=int, default=0)
    p.add_argument("--schedule-log", default=os.devnull)
    return p.parse_args(argv)


if __name__ == "__main__":
    anyio.run(main, parse(sys.argv[1:]), backend="asyncio")
    sys.stdout.flush()
    os._exit(0)  # the thread reading stdin may still block; it has nothing left to do
