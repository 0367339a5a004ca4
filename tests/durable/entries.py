"""Stream entries written by hand (``XADD``), as something other than the relay writes them:
a well-formed envelope of ``order.paid`` to damage or forge from, and ``dead_*`` fields naming
a failure row, as a redelivery carries them."""

from __future__ import annotations

from typing import Any

from eventbus import FailureRecord

#: a well-formed envelope of ``OrderPaid(order_id=2)`` that no relay wrote
GOOD: dict[Any, Any] = {
    "v": "1",
    "event_id": "foreign-1",
    "name": "order.paid",
    "seq": "99",
    "occurred_at": "2026-01-01T00:00:00+00:00",
    "payload": '{"order_id": 2}',
}


def forged(row: FailureRecord, group: str = "svc:grant") -> dict[Any, Any]:
    """``dead_*`` fields naming *row*, as a redelivery carries them."""
    return {
        "dead_group": group,
        "dead_entry": "1-1",
        "dead_deliveries": "3",
        "dead_error": "ValueError: forged",
        "dead_failure_id": row.id,
    }


def text(entry_id: bytes | str) -> str:
    """An entry id as text (the client returns bytes)."""
    return entry_id.decode() if isinstance(entry_id, bytes) else entry_id
