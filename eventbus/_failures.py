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

__all__ = ["FailureRecord", "FailureStatus", "new_event_id", "safe_str"]


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
            message=safe_str(exc),
            traceback=_format_traceback(exc),
            attempts=attempts,
            first_failed_at=now,
            last_failed_at=now,
        )

    def replace(self, **changes: object) -> FailureRecord:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def minimal(
        cls, *, event_name: str, event_id: str, listener: str, exc: BaseException, attempts: int
    ) -> FailureRecord:
        """A record with no payload or traceback, for when :meth:`from_exception` itself failed."""
        now = datetime.now(UTC)
        return cls(
            id=uuid.uuid4().hex,
            event_id=event_id,
            event_name=event_name,
            payload="null",
            payload_ok=False,
            listener=listener,
            error_type=_qualified_type(exc),
            message=safe_str(exc),
            traceback="",
            attempts=attempts,
            first_failed_at=now,
            last_failed_at=now,
        )


def new_event_id() -> str:
    return uuid.uuid4().hex


def safe_str(obj: object) -> str:
    """``str(obj)``, or ``repr``, or ``<unprintable TypeName>``: a failure is never lost to it."""
    for fmt in (str, repr):
        try:
            return fmt(obj)
        except Exception:
            continue
    return f"<unprintable {type(obj).__qualname__}>"


def _format_traceback(exc: BaseException) -> str:
    if exc.__traceback__ is None and exc.__cause__ is None and exc.__context__ is None:
        # A bus-made error (dropped, shutdown) has no frames: skip the traceback machinery.
        return f"{_qualified_type(exc)}: {safe_str(exc)}\n"
    try:
        return "".join(traceback.format_exception(exc))
    except Exception:
        return f"{_qualified_type(exc)}: {safe_str(exc)}\n(traceback could not be formatted)\n"


def _qualified_type(exc: BaseException) -> str:
    t = type(exc)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"
