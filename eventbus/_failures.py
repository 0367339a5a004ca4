"""The failure record: what the bus writes when a listener call did not succeed.

Records are built only on the failure path, so that capturing costs nothing per emit: the
event id, timestamps, traceback text and JSON payload are all made here, after the fact.
"""

from __future__ import annotations

import dataclasses
import enum
import traceback
import uuid
from datetime import UTC, datetime

from ._codec import encode_payload
from ._events import Event

__all__ = ["FailureRecord", "FailureStatus", "new_event_id"]


class FailureStatus(enum.StrEnum):
    PENDING = "pending"  # waiting for a retry or an operator
    RESOLVED = "resolved"  # a retry succeeded
    DEAD = "dead"  # retried up to the maximum; kept for inspection


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FailureRecord:
    """One failed listener call for one emission.

    ``payload`` is JSON text; ``payload_ok`` is false when the payload could not be encoded
    and ``payload`` holds its ``repr`` instead (kept, never lost, but not retryable).
    """

    id: str
    event_id: str
    event_name: str
    payload: str
    payload_ok: bool
    listener: str
    error_type: str
    message: str
    traceback: str
    attempts: int = 1
    status: FailureStatus = FailureStatus.PENDING
    first_failed_at: datetime
    last_failed_at: datetime
    resolved_at: datetime | None = None
    note: str | None = None

    @classmethod
    def from_exception(
        cls,
        *,
        event: Event,
        event_id: str,
        listener: str,
        exc: BaseException,
        attempts: int = 1,
    ) -> FailureRecord:
        now = datetime.now(UTC)
        payload, ok = encode_payload(event)
        return cls(
            id=uuid.uuid4().hex,
            event_id=event_id,
            event_name=event.__event_name__,
            payload=payload,
            payload_ok=ok,
            listener=listener,
            error_type=_qualified_type(exc),
            message=str(exc),
            traceback="".join(traceback.format_exception(exc)),
            attempts=attempts,
            first_failed_at=now,
            last_failed_at=now,
        )

    def replace(self, **changes: object) -> FailureRecord:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def new_event_id() -> str:
    return uuid.uuid4().hex


def _qualified_type(exc: BaseException) -> str:
    t = type(exc)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
