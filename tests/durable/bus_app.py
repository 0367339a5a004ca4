"""An application's bus with a durable listener, for ``--app`` in the CLI tests.

Configured from the environment the test sets: ``TEST_REDIS_URL``, ``TEST_DB`` (a SQLite
path), and ``TEST_BROKEN`` (when set, the listener raises).
"""

from __future__ import annotations

import os

from eventbus import EventBus
from eventbus.backends.sql import SqlFailureStore
from eventbus.durable import DurableOptions, RedisStreams
from tests.durable.events import REG, OrderPaid

#: what the listener handled, in this process
handled: list[int] = []

OPTIONS = DurableOptions(
    visibility=1.0, retry_backoff=0.1, max_deliveries=1, lease=1.0, poll_interval=0.1, block=0.5
)


def make_bus() -> EventBus:
    db = os.environ["TEST_DB"]
    streams = RedisStreams(
        os.environ["TEST_REDIS_URL"], db, service="svc", registry=REG, options=OPTIONS
    )
    bus = EventBus(REG, SqlFailureStore(db), durable=streams)

    @bus.on(OrderPaid, durable=True, name="fragile")
    async def fragile(e: OrderPaid) -> None:
        if os.environ.get("TEST_BROKEN"):
            raise RuntimeError(f"order {e.order_id} cannot be handled yet")
        handled.append(e.order_id)

    return bus
