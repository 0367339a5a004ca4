"""The envelope: how one event travels in a stream entry.

Fields (all text): ``v`` (envelope version, ``1``), ``event_id``, ``name``, ``seq`` (the
outbox row's id: listeners that must apply events in order compare it), ``occurred_at`` (ISO
8601, UTC: the publishing transaction's time), ``payload`` (the codec's JSON), and, when set,
``aggregate_key``, ``causation_id``, ``correlation_id`` and ``headers`` (a JSON object).

Dead letters and redeliveries carry the same fields plus ``dead_*`` ones (:class:`DeadInfo`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from .._exceptions import EventBusError

__all__ = ["DeadInfo", "Envelope", "EnvelopeError", "raw_value", "shorten", "text_fields"]

VERSION = "1"
_OPTIONAL = ("aggregate_key", "causation_id", "correlation_id", "headers")
#: The most fields an entry may carry: the envelope has at most 10, a redelivery adds 5
#: ``dead_*`` ones; the rest is room for fields a later version adds. An entry with thousands
#: is refused before anything copies them (a Lua ``unpack`` fails past about 8,000 values).
MAX_FIELDS = 64
#: The longest event, causation and correlation ids: the failure table's and the inbox's
#: ``VARCHAR(64)`` columns (PostgreSQL refuses a longer value, and any NUL character).
MAX_ID_LENGTH = 64
_IDS = ("event_id", "causation_id", "correlation_id")
_INT64 = range(-(2**63), 2**63)


class EnvelopeError(EventBusError, ValueError):
    """A stream entry that is not an event envelope (written by something else, or damaged)."""

    def __init__(self, entry_id: str, problem: str) -> None:
        self.entry_id = entry_id
        super().__init__(f"stream entry {entry_id!r} is not an event envelope: {problem}")


def _text(value: Any) -> str:
    if not isinstance(value, bytes):
        return str(value)
    try:
        return value.decode()
    except UnicodeDecodeError:  # kept byte for byte: Envelope.from_fields names the field
        return value.decode("utf-8", "surrogateescape")


def text_fields(raw: Mapping[Any, Any]) -> dict[str, str]:
    """A stream entry's fields as text (the client returns bytes). Never raises: bytes that
    are not UTF-8 are kept as lone surrogates (``surrogateescape``), which
    :meth:`Envelope.from_fields` refuses and :func:`raw_value` turns back into the bytes."""
    try:  # the common case, inline: this runs for every entry read
        return {
            (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()
        }
    except UnicodeDecodeError:
        return {_text(k): _text(v) for k, v in raw.items()}


def raw_value(text: str) -> str | bytes:
    """*text* as Redis should store it again: the original bytes of a field that was not
    UTF-8 (see :func:`text_fields`), else the text itself."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")
    return text


def _not_text(fields: Mapping[str, str]) -> str | None:
    """What is wrong with the first field whose name or value was not UTF-8 (see
    :func:`text_fields`) or holds a NUL character (no SQL text column takes one)."""
    text = "".join([*fields, *fields.values()])
    try:  # one join, one encode, one scan per entry: this runs for every delivery
        text.encode()
    except UnicodeEncodeError:
        for key, value in fields.items():
            if isinstance(raw_value(key), bytes) or isinstance(raw_value(value), bytes):
                return f"field {key!r} is not UTF-8"
    if "\x00" in text:
        for key, value in fields.items():
            if "\x00" in key or "\x00" in value:
                return f"field {key!r} holds a NUL character"
    return None


def shorten(text: str, limit: int = 24) -> str:
    """*text* as an error message shows it: its repr, cut to about *limit* characters."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def _limits(entry_id: str, env: Envelope) -> Envelope:
    """*env*, if its ids fit their columns and its ``seq`` fits 64 bits.

    :raises EnvelopeError: naming the field, shortened
    """
    for key in _IDS:
        value = getattr(env, key)
        if value is not None and len(value) > MAX_ID_LENGTH:
            raise EnvelopeError(
                entry_id, f"{key} {shorten(value)} is longer than {MAX_ID_LENGTH} characters"
            )
    if env.seq not in _INT64:
        raise EnvelopeError(entry_id, f"seq {shorten(str(env.seq))} does not fit 64 bits")
    return env


@dataclasses.dataclass(frozen=True, slots=True)
class Envelope:
    """One event as it is written to, and read from, a stream."""

    event_id: str
    name: str
    payload: str
    seq: int
    occurred_at: str
    aggregate_key: str | None = None
    causation_id: str | None = None
    correlation_id: str | None = None
    headers: str | None = None

    def header_map(self) -> dict[str, str]:
        """The headers as a dict (:meth:`from_fields` checked that they are one)."""
        return dict(json.loads(self.headers)) if self.headers else {}

    def fields(self) -> dict[str, str]:
        out = {
            "v": VERSION,
            "event_id": self.event_id,
            "name": self.name,
            "seq": str(self.seq),
            "occurred_at": self.occurred_at,
            "payload": self.payload,
        }
        for key in _OPTIONAL:
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    def script_args(self) -> list[str]:
        """This envelope as the ``PUBLISH`` script takes it (the script adds the field names,
        the name and the version, in the order of :meth:`fields`)."""
        extra = [
            item for key in _OPTIONAL if (value := getattr(self, key)) is not None
            for item in (key, value)
        ]  # fmt: skip
        return [str(len(extra) // 2), self.event_id, str(self.seq), self.occurred_at,
                self.payload, *extra]  # fmt: skip

    @classmethod
    def from_fields(cls, entry_id: str, fields: Mapping[str, str]) -> Envelope:
        """:raises EnvelopeError: naming the entry and the problem: more than
        :data:`MAX_FIELDS` fields, another version, a field missing, not UTF-8 or holding a
        NUL, a ``seq`` that is not a 64-bit int, an id longer than :data:`MAX_ID_LENGTH`,
        headers that are not a JSON object of strings"""
        if len(fields) > MAX_FIELDS:
            raise EnvelopeError(
                entry_id, f"it has {len(fields)} fields, more than the {MAX_FIELDS} allowed"
            )
        bad = _not_text(fields)
        if bad is not None:
            raise EnvelopeError(entry_id, bad)
        version = fields.get("v")
        if version != VERSION:
            shown = "None" if version is None else shorten(version)
            raise EnvelopeError(entry_id, f"version {shown}, expected {VERSION!r}")
        headers = fields.get("headers")
        if headers is not None and not _is_header_object(headers):
            shown = headers[:80]
            raise EnvelopeError(entry_id, f"headers are not a JSON object of strings: {shown!r}")
        try:
            env = cls(
                event_id=fields["event_id"],
                name=fields["name"],
                payload=fields["payload"],
                seq=int(fields["seq"]),
                occurred_at=fields["occurred_at"],
                **{k: fields.get(k) for k in _OPTIONAL},
            )
        except KeyError as exc:
            raise EnvelopeError(entry_id, f"field {exc.args[0]!r} is missing") from None
        except ValueError:
            shown = shorten(fields.get("seq", ""))
            raise EnvelopeError(entry_id, f"seq {shown} is not an int") from None
        return _limits(entry_id, env)


def _is_header_object(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


@dataclasses.dataclass(frozen=True, slots=True)
class DeadInfo:
    """Why and where an entry was dead-lettered (the ``dead_*`` fields of a dead letter).

    A redelivery carries it too, so that the consumer can resolve the failure row when the
    event finally succeeds.
    """

    group: str
    entry_id: str  #: the id in the stream the group read it from
    deliveries: int
    error: str
    failure_id: str

    def fields(self) -> dict[str, str]:
        return {
            "dead_group": self.group,
            "dead_entry": self.entry_id,
            "dead_deliveries": str(self.deliveries),
            "dead_error": self.error,
            "dead_failure_id": self.failure_id,
        }

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> DeadInfo | None:
        if "dead_group" not in fields:
            return None
        try:
            deliveries = int(fields.get("dead_deliveries", "0"))
        except ValueError:
            deliveries = 0
        return cls(
            group=fields["dead_group"],
            entry_id=fields.get("dead_entry", ""),
            deliveries=deliveries,
            error=fields.get("dead_error", ""),
            failure_id=fields.get("dead_failure_id", ""),
        )
