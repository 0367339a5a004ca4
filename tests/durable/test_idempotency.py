"""``eventbus.testing.check_idempotency``: its verdicts on a listener that keeps its effect in
``tx`` (idempotent) and on one that sends an e-mail outside it without a key (not)."""

from __future__ import annotations

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

    report = await check_idempotency(grant, OrderPaid(order_id=1), engine=db, tables=[effects])
    assert report.idempotent and bool(report)
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

    report = await check_idempotency(remind, OrderPaid(order_id=1), engine=db, tables=[mail])
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
    assert report.idempotent and len(sent) == 3
    quiet = await check_idempotency(
        lambda e: None, OrderPaid(order_id=1), engine=db, tables=[mail], name="quiet"
    )
    assert "the check proves little" in str(quiet)
    with pytest.raises(ValueError, match="give tables= or snapshot="):
        await check_idempotency(remind, OrderPaid(order_id=1), engine=db)
