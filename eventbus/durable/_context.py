"""What a durable listener can learn about the delivery it is handling, without taking a
parameter for it: ``current_delivery()`` (a context variable, so worker threads see it too)."""

from __future__ import annotations

import contextvars
import dataclasses

from ._envelope import Envelope

__all__ = ["Delivery", "current_delivery", "delivery_var"]


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery of one event to one group: pass ``event_id`` as the idempotency key of
    side effects outside the listener's transaction (a payment, an e-mail)."""

    event_id: str
    name: str
    seq: int  #: the outbox row's id: compare it to apply events of one aggregate in order
    occurred_at: str
    group: str
    entry_id: str
    deliveries: int  #: Redis' delivery count: 1 on the first try
    aggregate_key: str | None
    causation_id: str | None
    correlation_id: str | None
    headers: dict[str, str]

    @classmethod
    def of(cls, env: Envelope, *, group: str, entry_id: str, deliveries: int) -> Delivery:
        return cls(
            event_id=env.event_id,
            name=env.name,
            seq=env.seq,
            occurred_at=env.occurred_at,
            group=group,
            entry_id=entry_id,
            deliveries=deliveries,
            aggregate_key=env.aggregate_key,
            causation_id=env.causation_id,
            correlation_id=env.correlation_id,
            headers=env.header_map(),
        )


delivery_var: contextvars.ContextVar[Delivery] = contextvars.ContextVar("eventbus_delivery")


def current_delivery() -> Delivery:
    """The delivery the calling durable listener is handling.

    :raises LookupError: outside a durable listener call
    """
    try:
        return delivery_var.get()
    except LookupError:
        raise LookupError(
            "current_delivery() is only available inside a durable listener call"
        ) from None
