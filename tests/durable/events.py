"""The events and tables the durable tests and their subprocess app share."""

from __future__ import annotations

import sqlalchemy as sa

from eventbus import Event, EventRegistry

__all__ = ["REG", "OrderPaid", "OrderShipped", "Refunded", "effects", "test_metadata"]

REG = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=REG, durable=True):
    order_id: int


class OrderShipped(Event, name="order.shipped", registry=REG, durable=True):
    """Its stream hashes to another slot than order.paid's (14179 vs 524): on a three-master
    cluster, to another node."""

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
