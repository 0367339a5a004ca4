"""The failure record: what the bus writes when a listener call did not succeed.

Records are built only on the failure path, so that capturing costs nothing per emit. Even
there, the publisher pays only for what must be taken at once: ids, a timestamp, the JSON
payload, and the traceback as a :class:`~eventbus._tracebacks.CapturedTraceback` (no frames or
locals kept alive, no source read). The traceback *text* is rendered from it when the record's
``traceback`` is first read, which a store does when it writes the record (the SQL store, from
its background writer) and a reader when it looks; the text is what
:func:`traceback.format_exception` gives.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from datetime import UTC, datetime
from typing import Any

from ._codec import encode_payload
from ._events import Event
from ._tracebacks import CapturedTraceback

__all__ = [
    "FailureRecord",
    "FailureStatus",
    "check_failure_ids",
    "check_offset",
    "describe_error",
    "new_event_id",
    "qualified_type",
    "safe_str",
]


class FailureStatus(enum.StrEnum):
    PENDING = "pending"  # waiting for a retry or an operator
    RESOLVED = "resolved"  # a retry succeeded
    DEAD = "dead"  # retried up to the maximum; kept for inspection


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class FailureRecord:
    """One failed listener call for one emission.

    ``payload`` is JSON text; ``payload_ok`` is false when the payload could not be encoded
    and ``payload`` holds its ``repr`` instead (kept, never lost, but not retryable).
    ``traceback`` is always text when read; a record made by the bus renders it on first read.
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
    #: the event id of the emission whose listener emitted this record's event (None: nothing)
    causation_id: str | None = None
    #: the event id of the first emission of the chain (this record's own for a first one)
    correlation_id: str | None = None
    #: a durable listener's delivery (``None`` for in-process failures): its consumer group
    #: (``service:listener``), the stream and entry it was read from, Redis' delivery count
    #: when it died, and the outbox sequence of the event; what ``failures retry`` and
    #: ``streams redrive`` hand the event back with (the ``note`` says it in words)
    durable_group: str | None = None
    durable_stream: str | None = None
    durable_entry: str | None = None
    durable_deliveries: int | None = None
    durable_seq: int | None = None

    @classmethod
    def from_exception(
        cls,
        *,
        event: Event,
        event_id: str,
        listener: str,
        exc: BaseException,
        attempts: int = 1,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> FailureRecord:
        now = datetime.now(UTC)
        payload, ok = encode_payload(event)
        rec = _new_record(
            event_id,
            event.__event_name__,
            payload,
            ok,
            listener,
            exc,
            _capture_traceback(exc),
            attempts,
            now,
        )
        _set_causation(rec, causation_id)
        _set_correlation(rec, correlation_id)
        return rec

    def replace(self, **changes: object) -> FailureRecord:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    @classmethod
    def minimal(
        cls,
        *,
        event_name: str,
        event_id: str,
        listener: str,
        exc: BaseException,
        attempts: int,
        causation_id: str | None = None,
        correlation_id: str | None = None,
    ) -> FailureRecord:
        """A record with no payload or traceback, for when :meth:`from_exception` itself failed."""
        now = datetime.now(UTC)
        rec = _new_record(event_id, event_name, "null", False, listener, exc, "", attempts, now)
        _set_causation(rec, causation_id)
        _set_correlation(rec, correlation_id)
        return rec


def _capture_traceback(exc: BaseException) -> str | CapturedTraceback:
    if exc.__traceback__ is None and exc.__cause__ is None and exc.__context__ is None:
        # A bus-made error (dropped, shutdown) has no frames: skip the traceback machinery.
        return f"{qualified_type(exc)}: {safe_str(exc)}\n"
    try:
        return CapturedTraceback(exc)
    except Exception:
        return f"{qualified_type(exc)}: {safe_str(exc)}\n(traceback could not be formatted)\n"


_slot: Any = FailureRecord.__dict__["traceback"]


class _RenderedOnRead:
    """The ``traceback`` field: text, or a capture that becomes text on its first read."""

    __slots__ = ()

    def __get__(self, rec: FailureRecord | None, owner: type | None = None) -> Any:
        if rec is None:
            return self
        value = _slot.__get__(rec, owner)
        if value.__class__ is CapturedTraceback:
            try:
                value = value.render()
            except Exception:
                value = f"{rec.error_type}: {rec.message}\n(traceback could not be formatted)\n"
            _slot.__set__(rec, value)
        return value

    def __set__(self, rec: FailureRecord, value: object) -> None:
        _slot.__set__(rec, value)


# Replaces the slot's own descriptor (kept in _slot); the dataclass machinery (init, replace,
# asdict, eq, pickling) goes through attribute access, so it always sees text.
setattr(FailureRecord, "traceback", _RenderedOnRead())  # noqa: B010

# The slots' own setters: a frozen dataclass's __init__ calls object.__setattr__ per field,
# which looks each name up again; a captured failure is on the publisher's path.
_setters: dict[str, Any] = {
    f.name: FailureRecord.__dict__[f.name].__set__
    for f in dataclasses.fields(FailureRecord)
    if f.name != "traceback"
}
_set_id = _setters["id"]
_set_event_id = _setters["event_id"]
_set_event_name = _setters["event_name"]
_set_payload = _setters["payload"]
_set_payload_ok = _setters["payload_ok"]
_set_listener = _setters["listener"]
_set_error_type = _setters["error_type"]
_set_message = _setters["message"]
_set_attempts = _setters["attempts"]
_set_status = _setters["status"]
_set_first = _setters["first_failed_at"]
_set_last = _setters["last_failed_at"]
_set_resolved = _setters["resolved_at"]
_set_note = _setters["note"]
_set_causation = _setters["causation_id"]
_set_correlation = _setters["correlation_id"]
_set_traceback = _slot.__set__
_set_durable = tuple(v for k, v in _setters.items() if k.startswith("durable_"))


def _new_record(
    event_id: str,
    event_name: str,
    payload: str,
    payload_ok: bool,
    listener: str,
    exc: BaseException,
    tb: str | CapturedTraceback,
    attempts: int,
    now: datetime,
) -> FailureRecord:
    rec = object.__new__(FailureRecord)
    _set_id(rec, new_event_id())
    _set_event_id(rec, event_id)
    _set_event_name(rec, event_name)
    _set_payload(rec, payload)
    _set_payload_ok(rec, payload_ok)
    _set_listener(rec, listener)
    _set_error_type(rec, qualified_type(exc))
    _set_message(rec, safe_str(exc))
    _set_traceback(rec, tb)
    _set_attempts(rec, attempts)
    _set_status(rec, FailureStatus.PENDING)
    _set_first(rec, now)
    _set_last(rec, now)
    _set_resolved(rec, None)
    _set_note(rec, None)
    _set_causation(rec, None)
    _set_correlation(rec, None)
    for set_durable in _set_durable:
        set_durable(rec, None)
    return rec


_urandom = os.urandom


def new_event_id() -> str:
    """A random (version 4) UUID as 32 hex digits, at a third of ``uuid.uuid4().hex``'s cost."""
    b = bytearray(_urandom(16))
    b[6] = b[6] & 0x0F | 0x40
    b[8] = b[8] & 0x3F | 0x80
    return b.hex()


def safe_str(obj: object) -> str:
    """``str(obj)``, or ``repr``, or ``<unprintable TypeName>``: a failure is never lost to it."""
    for fmt in (str, repr):
        try:
            return fmt(obj)
        except Exception:
            continue
    return f"<unprintable {type(obj).__qualname__}>"


def describe_error(exc: BaseException) -> str:
    """``Type: first line of the message``, for an ``error:`` line or a log line.

    For a SQLAlchemy error, the driver's own error (``.orig``): SQLAlchemy's text would add
    the statement and every parameter of the batch.
    """
    orig = getattr(exc, "orig", None)
    shown = orig if isinstance(orig, BaseException) else exc
    lines = str(shown).strip().splitlines()
    return f"{type(shown).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def qualified_type(exc: BaseException) -> str:
    """The exception's type as recorded: ``ValueError``, ``mypkg.errors.Declined``."""
    t = type(exc)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def check_failure_ids(ids: object, *, call: str) -> list[str]:
    """The failure ids *call* was given, as a list.

    :raises TypeError: naming ``ids``, for a string (a common slip: its characters would be
        taken for ids) or anything but an iterable of strings
    """
    if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
        raise TypeError(f"{call}(ids={ids!r}): give a list of failure ids, not one string")
    out = list(ids)
    for fid in out:
        if not isinstance(fid, str):
            raise TypeError(f"{call}(ids=...): every id must be a string, not {fid!r}")
    return out


def check_offset(offset: object) -> int:
    """:raises ValueError: naming ``offset``, unless it is an int >= 0"""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"offset={offset!r} must be an int >= 0 (rows to skip, newest first)")
    return offset
