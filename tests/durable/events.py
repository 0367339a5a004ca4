"""The events and tables the durable tests and their subprocess app share."""

from __future__ import annotations

import sqlalchemy as sa

from eventbus import Event, EventRegistry

__all__ = ["REG", "OrderPaid", "Refunded", "effects", "test_metadata"]

REG = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=REG, durable=True):
    order_id: int


class Refunded(Event, name="order.refunded", registry=REG):
    order_id: int


test_metadata = sa.MetaData()

#: one row per effect, written in the listener's own transaction (with the inbox row)
effects = sa.Table(
    "test_effects",
    test_metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("listener", sa.String(100), nullable=False),
    sa.Column("event_id", sa.String(64), nullable=False),
    sa.Column("order_id", sa.Integer, nullable=False),
)
