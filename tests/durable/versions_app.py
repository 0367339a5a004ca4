"""One durable-events process that declares ``order.paid`` at the version it is told, for the
rolling-deploy tests: ``python -m tests.durable.versions_app --version N [options]``.

Versions: 1 (``order_id``), 2 (adds ``currency: str = "EUR"``), 3 (``order_id``,
``currency``, ``cents``, with upcasters from 1 and 2); ``--strict`` declares the type with
``unknown_fields="reject"``. Each listener call appends a JSON line (the event's fields and
the version it was stored at) to the ``--calls`` file. Prints ``ready`` once running,
``progress {json}`` every ``--progress`` seconds and ``stats {json}`` when it stops (stdin
closed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

import anyio

from eventbus import Event, EventBus, EventRegistry, MemoryFailureStore, upcaster
from eventbus.backends.redis import make_redis_client
from eventbus.backends.sql import make_engine
from eventbus.durable import DurableOptions, RedisStreams, current_delivery


def declare(version: int, strict: bool) -> tuple[EventRegistry, type[Event]]:
    reg = EventRegistry()
    unknown = "reject" if strict else "ignore"
    if version == 1:

        class PaidV1(Event, name="order.paid", registry=reg, durable=True, unknown_fields=unknown):
            order_id: int

        return reg, PaidV1
    if version == 2:

        class PaidV2(
            Event,
            name="order.paid",
            registry=reg,
            durable=True,
            version=2,
            unknown_fields=unknown,
        ):
            order_id: int
            currency: str = "EUR"

        return reg, PaidV2

    class PaidV3(
        Event, name="order.paid", registry=reg, durable=True, version=3, unknown_fields=unknown
    ):
        order_id: int
        currency: str
        cents: int

    @upcaster("order.paid", from_version=1, registry=reg)
    def _v1_to_v2(old: dict[str, Any]) -> dict[str, Any]:
        return {**old, "currency": "EUR"}

    @upcaster("order.paid", from_version=2, registry=reg)
    def _v2_to_v3(old: dict[str, Any]) -> dict[str, Any]:
        return {**old, "cents": old["order_id"] * 100}

    return reg, PaidV3


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def record(path: str, event: Event, consumer: str) -> None:
    delivery = current_delivery()
    line = json.dumps(
        {
            "event_id": delivery.event_id,
            "fields": {f.name: getattr(event, f.name) for f in dataclasses.fields(event)},
            "consumer": consumer,
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def main(args: argparse.Namespace) -> None:
    reg, paid = declare(args.version, args.strict)
    client = make_redis_client(args.redis, socket_timeout=3.0, max_connections=32)
    engine = make_engine(args.db)
    options = DurableOptions(
        visibility=args.visibility,
        max_deliveries=args.max_deliveries,
        retry_backoff=0.1,
        lease=1.0,
        poll_interval=0.1,
        block=0.3,
        shutdown_grace=2.0,
        publish_key_ttl=60.0,
    )
    streams = RedisStreams(
        client,
        engine,
        service="svc",
        registry=reg,
        options=options,
        failures=MemoryFailureStore(),
    )
    bus = EventBus(reg, durable=streams)
    for name in args.listener:

        async def on_paid(e: Event) -> None:
            record(args.calls, e, streams.consumer)

        bus.on(paid, on_paid, durable=True, name=name)
    try:
        async with bus:
            if args.publish:
                async with engine.begin() as conn:
                    for i in range(args.publish_from, args.publish_from + args.publish):
                        extra: dict[str, Any] = {"order_id": i}
                        extra |= {"currency": "USD"} if args.version >= 2 else {}
                        extra |= {"cents": i * 100} if args.version >= 3 else {}
                        await bus.publish(paid(**extra), conn)
            if args.backfill:
                since = datetime(2000, 1, 1, tzinfo=UTC)
                await streams.backfill("order.paid", f"svc:{args.backfill}", since=since)
            say("ready")
            async with anyio.create_task_group() as tg:

                async def until_stdin_closes() -> None:
                    await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
                    tg.cancel_scope.cancel()

                async def progress() -> None:
                    while True:
                        await anyio.sleep(args.progress)
                        say("progress " + json.dumps(dataclasses.asdict(streams.statistics())))

                tg.start_soon(until_stdin_closes)
                if args.progress:
                    tg.start_soon(progress)
        say("stats " + json.dumps(dataclasses.asdict(streams.statistics())))
    finally:
        await client.aclose()
        await engine.dispose()


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--redis", required=True)
    p.add_argument("--db", required=True)
    p.add_argument("--calls", required=True)
    p.add_argument("--version", type=int, choices=(1, 2, 3), required=True)
    p.add_argument("--strict", action="store_true")
    p.add_argument("--listener", action="append", default=[])
    p.add_argument("--publish", type=int, default=0)
    p.add_argument("--publish-from", type=int, default=0)
    p.add_argument("--backfill", help="a listener name: hand its group the outbox's rows")
    p.add_argument("--visibility", type=float, default=1.0)
    p.add_argument("--max-deliveries", type=int, default=3)
    p.add_argument("--progress", type=float, default=0.0)
    return p.parse_args(argv)


if __name__ == "__main__":
    anyio.run(main, parse(sys.argv[1:]), backend="asyncio")
    sys.stdout.flush()
    os._exit(0)
