"""The relay's ``backlog`` statistic after the transport stops: counted once more at stop.

Regression test (issue 22, item 10): the backlog is counted at most once a second while the
relay runs; after leaving ``async with bus:`` it kept the count taken halfway through a
drain (rows long since published).
"""

from __future__ import annotations

from dataclasses import replace

from sqlalchemy.ext.asyncio import AsyncEngine

from tests.durable.conftest import FAST, Factory, wait_until
from tests.durable.events import OrderPaid


async def test_the_backlog_is_counted_again_when_the_relay_stops(
    make_streams: Factory, engine: AsyncEngine
) -> None:
    streams = make_streams(options=replace(FAST, relay_batch=10))
    async with streams:
        async with engine.begin() as conn:
            await streams.publish_many([OrderPaid(order_id=i) for i in range(60)], conn)
        await wait_until(lambda: streams.statistics().relay.published == 60, what="the relay")
    relay = streams.statistics().relay
    assert (relay.published, relay.backlog) == (60, 0)
