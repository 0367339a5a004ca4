"""Exceptions of durable events (subclasses of :class:`eventbus.EventBusError`)."""

from __future__ import annotations

from .._exceptions import EventBusError

__all__ = ["DeliveriesExhaustedError", "DurableNotRunningError", "NoTransactionError"]


class NoTransactionError(EventBusError, RuntimeError):
    """A durable publish outside an open transaction: the event would be sent whether or not
    the caller's writes commit, so it is refused instead."""

    def __init__(self, name: str, why: str, action: str = "publish") -> None:
        self.name = name
        super().__init__(
            f"{action}({name!r}) needs the connection of an open transaction, but it {why}; "
            "publish inside 'async with engine.begin() as conn:' (or conn.begin()), so that "
            "the outbox changes if and only if the transaction commits"
        )


class DurableNotRunningError(EventBusError, RuntimeError):
    """An operation that needs the running transport (its Redis client and tasks)."""

    def __init__(self, what: str) -> None:
        super().__init__(f"{what} needs the durable transport running; enter it first")


class DeliveriesExhaustedError(EventBusError, RuntimeError):
    """What a dead letter records for an entry called ``max_deliveries`` times without an
    outcome: the process running it ended (crashed, was killed) or stalled past its visibility
    time while it ran, and each time it came back."""

    def __init__(
        self, group: str, deliveries: int, max_deliveries: int, *, crashes: int, failures: int = 0
    ) -> None:
        self.group = group
        self.deliveries = deliveries
        self.crashes = crashes
        self.failures = failures
        raised = f"; it raised {failures} times" if failures else ""
        super().__init__(
            f"called {crashes + failures} times in group {group!r} (max_deliveries="
            f"{max_deliveries}) without finishing: the process ended (crashed, was killed) or "
            f"stalled past its visibility time while it ran, {crashes} times{raised}"
        )
