"""Durable events across two processes: ``make demo-durable``.

A throwaway ``redis-server`` and a SQLite file; a *shop* process commits orders and publishes
``order.paid`` in the same transactions; a *billing* process handles them with three durable
listeners: one that grants points in its own transaction (the inbox makes it once per event),
one whose first delivery fails and is retried, and one that always fails and ends in the
dead letters (and in the failure table as ``dead``). Then the operator's view: ``streams
status``, ``streams dead`` and ``failures list``.

Run: ``make demo-durable`` (``python -m domain.durable_demo`` from the repository root).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

import anyio
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from eventbus import Event, EventBus, EventRegistry
from eventbus.backends.sql import SqlFailureStore, make_engine
from eventbus.durable import DeadLettered, DurableOptions, RedisStreams, current_delivery

__all__ = ["main"]

_ROOT = Path(__file__).resolve().parents[1]
_REG = EventRegistry()
_ORDERS = 3


class OrderPaid(Event, name="order.paid", registry=_REG, durable=True):
    order_id: int
    amount: Decimal


points = sa.Table(
    "demo_points",
    sa.MetaData(),
    sa.Column("order_id", sa.Integer, primary_key=True),
    sa.Column("points", sa.Integer, nullable=False),
)


def say(role: str, text: str) -> None:
    print(f"[{role} pid {os.getpid()}] {text}", flush=True)


def make_bus(role: str, redis_url: str, db: str) -> EventBus:
    options = DurableOptions(visibility=1.0, retry_backoff=0.2, max_deliveries=3, block=0.5)
    streams = RedisStreams(redis_url, db, service=role, registry=_REG, options=options)
    return EventBus(_REG, SqlFailureStore(db), durable=streams)


async def shop(redis_url: str, db: str) -> None:
    """Commit orders; each publish is part of its order's transaction."""
    bus = make_bus("shop", redis_url, db)
    engine = make_engine(db)
    async with bus:
        for order_id in range(1, _ORDERS + 1):
            async with engine.begin() as conn:
                # ... the application's own writes for the order would go here ...
                event_id = await bus.publish(
                    OrderPaid(order_id=order_id, amount=Decimal("9.90")), conn
                )
            say("shop", f"committed order {order_id}: order.paid {event_id[:8]} in the outbox")
    await engine.dispose()


async def billing(redis_url: str, db: str) -> None:
    """Three durable listeners, each its own consumer group in service 'billing'."""
    bus = make_bus("billing", redis_url, db)
    engine = make_engine(db)
    async with engine.begin() as conn:
        await conn.run_sync(points.metadata.create_all)
    done = anyio.Event()
    seen: set[str] = set()

    def progress(what: str) -> None:
        seen.add(what)
        if len(seen) == 2 * _ORDERS + 1:  # every grant, every receipt, one dead letter
            done.set()

    @bus.on(OrderPaid, durable=True, name="rewards.grant")
    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        await tx.execute(points.insert().values(order_id=e.order_id, points=int(e.amount * 10)))
        d = current_delivery()
        say("billing", f"rewards.grant: order {e.order_id} -> {int(e.amount * 10)} points "
            f"(event {d.event_id[:8]}, seq {d.seq}, delivery {d.deliveries})")  # fmt: skip
        progress(f"grant {e.order_id}")

    @bus.on(OrderPaid, durable=True, name="mailer.receipt")
    async def receipt(e: OrderPaid) -> None:
        d = current_delivery()
        if e.order_id == 2 and d.deliveries == 1:
            say("billing", "mailer.receipt: order 2, delivery 1: SMTP timeout (will be retried)")
            raise TimeoutError("SMTP server did not answer")
        say("billing", f"mailer.receipt: order {e.order_id} sent (delivery {d.deliveries})")
        progress(f"receipt {e.order_id}")

    @bus.on(OrderPaid, durable=True, name="fraud.check")
    async def fraud(e: OrderPaid) -> None:
        if e.order_id == 3:
            say("billing", f"fraud.check: order 3, delivery {current_delivery().deliveries}: "
                "scoring service down")  # fmt: skip
            raise ConnectionError("scoring service down")

    @bus.on(DeadLettered, name="alarm")
    def alarm(e: DeadLettered) -> None:
        say("billing", f"DEAD LETTER: {e.group} gave up on {e.event_name} after "
            f"{e.deliveries} deliveries ({e.error}); failure row {e.failure_id[:12]}")  # fmt: skip
        progress("dead")

    async with bus:
        say("billing", "ready: consumer groups billing:rewards.grant, billing:mailer.receipt, "
            "billing:fraud.check")  # fmt: skip
        with anyio.fail_after(30):
            await done.wait()
    await engine.dispose()


def run(role: str, redis_url: str, db: str) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "domain.durable_demo",
        "--role",
        role,
        "--redis",
        redis_url,
        "--db",
        db,
    ]
    return subprocess.Popen(argv, cwd=_ROOT, text=True)


def operator(args: list[str], redis_url: str, db: str) -> None:
    print(f"\n$ python -m eventbus {' '.join(args)}", flush=True)
    env = {**os.environ, "EVENTBUS_REDIS": redis_url, "EVENTBUS_DB": db}
    subprocess.run([sys.executable, "-m", "eventbus", *args], cwd=_ROOT, env=env, check=True)


def main() -> int:
    sys.path.insert(0, str(_ROOT))
    from tests.redis_server import RedisServer  # the test suite's throwaway server

    with RedisServer() as redis, tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "demo.db")
        print(f"# a throwaway redis-server on {redis.url}, the database {db}\n", flush=True)
        consumer = run("billing", redis.url, db)
        publisher = run("shop", redis.url, db)
        try:
            assert publisher.wait(timeout=60) == 0, "the shop process failed"
            assert consumer.wait(timeout=60) == 0, "the billing process failed"
        finally:
            for proc in (publisher, consumer):
                if proc.poll() is None:
                    proc.kill()
        operator(["streams", "status"], redis.url, db)
        operator(["streams", "dead"], redis.url, db)
        operator(["failures", "list"], redis.url, db)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--role", choices=["shop", "billing"])
    parser.add_argument("--redis")
    parser.add_argument("--db")
    ns = parser.parse_args()
    if ns.role is None:
        sys.exit(main())
    work = shop if ns.role == "shop" else billing
    anyio.run(work, ns.redis, ns.db, backend="asyncio")
