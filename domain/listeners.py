"""Example listeners on the catalog: what subscribers of ``order.*`` and ``user.*`` look like.

* ``order.paid`` grants reward points (async), named ``rewards:grant_points``;
* ``order.*`` writes an audit row (sync, inline, before ``emit`` returns), ``audit:order``;
* ``user.registered`` sends a welcome message (async), ``mail:welcome``; addresses at
  ``bounce.invalid`` fail on purpose, so the demo shows a failure landing in the failure table.

They keep their results in memory (the demo prints them); a real application writes rows.
"""

from __future__ import annotations

from decimal import Decimal

from anyio.lowlevel import checkpoint

from eventbus import Event, EventBus, encode_payload

from ._public import shown_as_domain
from .events import OrderPaid, UserRegistered
from .exceptions import MailDeliveryError

__all__ = ["BOUNCING_DOMAIN", "ExampleListeners", "MAX_AMOUNT"]

BOUNCING_DOMAIN = "bounce.invalid"
MAX_AMOUNT = Decimal(10) ** 12  # amounts are below this; int() of 1e9999999 would take hours


class ExampleListeners:
    """Reward points, an audit trail and welcome mails, kept in memory."""

    def __init__(self) -> None:
        self.points: dict[int, int] = {}
        self.audit: list[tuple[str, str]] = []
        self.welcomed: list[str] = []

    def __repr__(self) -> str:
        return f"ExampleListeners(points={len(self.points)}, audit={len(self.audit)})"

    def attach(self, bus: EventBus) -> None:
        bus.on(OrderPaid, self.grant_points, name="rewards:grant_points")
        bus.on("order.*", self.audit_row, name="audit:order")
        bus.on(UserRegistered, self.send_welcome, name="mail:welcome")

    async def grant_points(self, event: OrderPaid) -> None:
        """One point per whole unit paid.

        :raises ValueError: for an amount that is not finite, not positive, or not below
            :data:`MAX_AMOUNT` (checked before ``int()``, which is slow on huge exponents)
        """
        await checkpoint()
        amount = event.amount
        if not (amount.is_finite() and 0 < amount < MAX_AMOUNT):
            raise ValueError(
                f"order {event.order_id!r} has amount {amount!r}; expected a positive amount "
                f"below {MAX_AMOUNT:,}"
            )
        self.points[event.user_id] = self.points.get(event.user_id, 0) + int(event.amount)

    def audit_row(self, event: Event) -> None:
        """An audit row: the event name and its JSON payload."""
        payload, _ = encode_payload(event)
        self.audit.append((event.event_name, payload))

    async def send_welcome(self, event: UserRegistered) -> None:
        await checkpoint()
        if event.email.endswith("@" + BOUNCING_DOMAIN):
            raise MailDeliveryError(event.email)
        self.welcomed.append(event.email)


shown_as_domain(ExampleListeners)
