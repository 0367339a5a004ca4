"""Durable events across processes: a transactional outbox, Redis Streams, consumer groups.

Importing this package loads SQLAlchemy and redis; ``import eventbus`` does not.
"""

from __future__ import annotations

from .._public import show_as_module
from ..extras import missing_extra

if _missing := missing_extra(__name__, "redis", "sql"):
    raise _missing

from ._context import Delivery as Delivery
from ._context import current_delivery as current_delivery
from ._envelope import DeadInfo as DeadInfo
from ._envelope import Envelope as Envelope
from ._envelope import EnvelopeError as EnvelopeError
from ._events import DURABLE_EVENTS as DURABLE_EVENTS
from ._events import BacklogHigh as BacklogHigh
from ._events import BacklogNormal as BacklogNormal
from ._events import DeadLettered as DeadLettered
from ._events import DurableStarted as DurableStarted
from ._events import DurableStopped as DurableStopped
from ._events import EntriesLost as EntriesLost
from ._events import GroupRecreated as GroupRecreated
from ._events import StreamCapped as StreamCapped
from ._events import register_durable_events as register_durable_events
from ._exceptions import DeliveriesExhaustedError as DeliveriesExhaustedError
from ._exceptions import NoTransactionError as NoTransactionError
from ._keys import StreamKeys as StreamKeys
from ._listener import DurableListener as DurableListener
from ._options import DurableOptions as DurableOptions
from ._stats import DurableStatistics as DurableStatistics
from ._stats import GroupStatistics as GroupStatistics
from ._stats import JanitorStatistics as JanitorStatistics
from ._stats import RelayStatistics as RelayStatistics
from ._status import DeadLetter as DeadLetter
from ._status import GroupStatus as GroupStatus
from ._status import PendingEntry as PendingEntry
from ._status import StreamStatus as StreamStatus
from ._streams import RedisStreams as RedisStreams
from ._tables import create_durable_tables as create_durable_tables
from ._tables import inbox_table as inbox_table
from ._tables import metadata as metadata
from ._tables import outbox_table as outbox_table

__all__ = [
    "BacklogHigh",
    "BacklogNormal",
    "DURABLE_EVENTS",
    "DeadInfo",
    "DeadLetter",
    "DeadLettered",
    "DeliveriesExhaustedError",
    "Delivery",
    "DurableListener",
    "DurableOptions",
    "DurableStarted",
    "DurableStatistics",
    "DurableStopped",
    "EntriesLost",
    "Envelope",
    "EnvelopeError",
    "GroupRecreated",
    "GroupStatistics",
    "GroupStatus",
    "JanitorStatistics",
    "NoTransactionError",
    "PendingEntry",
    "RedisStreams",
    "RelayStatistics",
    "StreamCapped",
    "StreamKeys",
    "StreamStatus",
    "create_durable_tables",
    "current_delivery",
    "inbox_table",
    "metadata",
    "outbox_table",
    "register_durable_events",
]

show_as_module(__name__, *(globals()[name] for name in __all__))
