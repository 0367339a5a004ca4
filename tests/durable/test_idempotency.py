"""``eventbus.testing.check_idempotency``: its verdicts on a listener that keeps its effect in
``tx`` (idempotent), on one that sends an e-mail outside it without a key (not), and on one
that remembers handled events in process memory (idempotent in one process, not across the
restart the test supplies; and said so plainly when it supplies none)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from eventbus.durable import current_delivery
from eventbus.testing import check_idempotency
from tests.durable.events import OrderPaid, effects

mail = sa.Table(
    "test_sent_mail",
    sa.MetaData(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("order_id", sa.Integer, nullable=False),
)
mail_log = sa.Table(  # no key: a second e-mail logs the same row again
    "test_mail_log", mail.metadata, sa.Column("order_id", sa.Integer, nullable=False)
)


@pytest.fixture
async def db(engine: AsyncEngine) -> AsyncEngine:
    async with engine.begin() as conn:
        await conn.run_sync(mail.metadata.create_all)
    return engine


async def test_a_listener_keeping_its_effect_in_tx_is_idempotent(db: AsyncEngine) -> None:
    async def grant(e: OrderPaid, tx: AsyncConnection) -> None:
        event_id = current_delivery().event_id
        await tx.execute(
            effects.insert().values(listener="grant", event_id=event_id, order_id=e.order_id)
        )

    report = await check_idempotency(
        grant, OrderPaid(order_id=1), engine=db, tables=[effects], restart=lambda: grant
    )
    assert report.idempotent and bool(report) and report.restart_checked
    assert [o.changes for o in report.outcomes] == [("test_effects: +1 row",), (), ()]
    assert [o.deliveries for o in report.outcomes] == [1, 2, 3]
    report.assert_idempotent()
    assert (
        str(report)
        .splitlines()[0]
        .endswith("idempotent: deliveries after the first changed nothing")
    )


async def test_an_email_sent_outside_tx_without_a_key_is_not(db: AsyncEngine) -> None:
    async def remind(e: OrderPaid) -> None:
        async with db.begin() as conn:  # the mail provider: every call sends one more
            await conn.execute(mail.insert().values(order_id=e.order_id))

    report = await check_idempotency(
        remind, OrderPaid(order_id=1), engine=db, tables=[mail], restart=lambda: remind
    )
    assert not report.idempotent
    assert [o.changes for o in report.outcomes] == [("test_sent_mail: +1 row",)] * 3
    with pytest.raises(AssertionError, match="NOT idempotent"):
        report.assert_idempotent()
    text = str(report)
    assert "delivery 2, redelivery (same event id): test_sent_mail: +1 row" in text


async def test_a_snapshot_function_and_a_listener_that_changes_nothing(db: AsyncEngine) -> None:
    sent: list[str] = []

    async def remind(e: OrderPaid) -> None:
        sent.append(current_delivery().event_id)  # keyed: a real provider drops repeats

    async def provider() -> list[str]:
        return sorted(set(sent))

    report = await check_idempotency(remind, OrderPaid(order_id=1), engine=db, snapshot=provider)
    assert report.idempotent and len(sent) == 2  # no restart= given: two deliveries
    quiet = await check_idempotency(
        lambda e: None, OrderPaid(order_id=1), engine=db, tables=[mail], name="quiet"
    )
    assert "the check proves little" in str(quiet)
    with pytest.raises(ValueError, match="give tables= or snapshot="):
        await check_idempotency(remind, OrderPaid(order_id=1), engine=db)


def deduping_in_memory(db: AsyncEngine) -> Callable[..., Any]:
    """A listener as one process builds it: it remembers the event ids it handled in a set,
    which a restart empties."""
    seen: set[str] = set()

    async def remind(e: OrderPaid) -> None:
        event_id = current_delivery().event_id
        if event_id in seen:
            return
        seen.add(event_id)
        async with db.begin() as conn:
            await conn.execute(mail.insert().values(order_id=e.order_id))

    return remind


async def test_an_in_process_set_is_idempotent_only_until_a_restart(db: AsyncEngine) -> None:
    paid = OrderPaid(order_id=1)
    restarted = await check_idempotency(
        deduping_in_memory(db),
        paid,
        engine=db,
        tables=[mail],
        name="remind",
        restart=lambda: deduping_in_memory(db),
    )
    assert not restarted.idempotent and restarted.restart_checked
    assert [o.changes for o in restarted.outcomes] == [
        ("test_sent_mail: +1 row",),
        (),
        ("test_sent_mail: +1 row",),
    ]
    assert "a restarted process): test_sent_mail: +1 row" in str(restarted)
    # Without restart= it cannot see that: it says so rather than vouch for it.
    unchecked = await check_idempotency(
        deduping_in_memory(db), paid, engine=db, tables=[mail], name="remind"
    )
    assert unchecked.idempotent and not unchecked.restart_checked
    assert [o.deliveries for o in unchecked.outcomes] == [1, 2]
    first, *rest = str(unchecked).splitlines()
    assert first.endswith(
        "idempotent in one process: a redelivery changed nothing (a restart was not checked)"
    )
    assert rest[-1].startswith("  restart not checked (no restart= given)")


async def test_each_delivery_gets_the_event_decoded_from_the_stored_payload(
    db: AsyncEngine,
) -> None:
    got: list[OrderPaid] = []

    async def keep(e: OrderPaid) -> None:
        got.append(e)

    paid = OrderPaid(order_id=4)
    await check_idempotency(keep, paid, engine=db, tables=[mail], restart=lambda: keep)
    assert got == [paid] * 3  # equal, and none of them the caller's object, nor shared
    assert len({id(e) for e in [paid, *got]}) == 4


async def test_a_duplicate_row_is_a_row_added(db: AsyncEngine) -> None:
    async def log(e: OrderPaid) -> None:
        async with db.begin() as conn:
            await conn.execute(mail_log.insert().values(order_id=e.order_id))

    report = await check_idempotency(log, OrderPaid(order_id=1), engine=db, tables=[mail_log])
    assert [o.changes for o in report.outcomes] == [("test_mail_log: +1 row",)] * 2
