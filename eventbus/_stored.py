"""Reading a *stored* payload: one written by another process or another version of the code
(a durable delivery, a failure row retried, an outbox row replayed).

Two rules make a rolling deploy safe in either order:

* an older payload is brought up to the declared version by the event's upcasters
  (:func:`upcaster`), one version at a time; a version with no upcaster is read as it is
  (an added field with a default needs none);
* the tolerant reader: a field the class does not declare is ignored when the class says
  ``unknown_fields="ignore"`` (the default of durable events), and a missing field takes
  its default. A newer version is read the same way; a class that rejects unknown fields
  refuses it with :class:`UnreadableVersionError`, which the durable consumer answers by
  leaving the entry pending for a process that declares the newer version.

``emit()`` keeps its strictness: it never comes here.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ._codec import decode_object, load_object
from ._events import Event, EventRegistry, Upcaster, default_registry
from ._exceptions import EventBusError, PayloadError, UnreadableVersionError
from ._failures import FailureRecord

__all__ = ["StoredEvent", "decode_stored", "read_now", "readable", "upcast", "upcaster"]

logger = logging.getLogger("eventbus")

F = TypeVar("F", bound=Callable[[dict[str, Any]], dict[str, Any]])

_logged: set[tuple[str, str]] = set()
_logged_lock = threading.Lock()


def upcaster(
    name: str, *, from_version: int, registry: EventRegistry | None = None
) -> Callable[[F], F]:
    """Declare the decorated function as what turns a stored version-*from_version* payload
    of event *name* (a dict of JSON values) into a payload of the next version::

        @upcaster("order.paid", from_version=1)
        def _amount_in_cents(old: dict[str, Any]) -> dict[str, Any]:
            return {**old, "cents": round(old.pop("amount") * 100)}

    :raises UpcasterError: at once, for an event not declared (yet) in *registry*, a version
        the event does not have, or a second upcaster for one version
    """
    reg = registry if registry is not None else default_registry

    def declare(fn: F) -> F:
        reg.add_upcaster(name, from_version, fn)
        return fn

    return declare


@dataclasses.dataclass(frozen=True, slots=True)
class StoredEvent:
    """A stored payload, read: the event, and the fields the tolerant reader ignored."""

    event: Event
    ignored: tuple[str, ...] = ()


def readable(registry: EventRegistry, name: str, version: int) -> bool:
    """Whether this process can read a stored payload of event *name* at *version*:
    ``False`` only for a newer version than declared of a type that rejects unknown fields
    (an undeclared name is for :func:`decode_stored` to report)."""
    if name not in registry:
        return True
    cls = registry.get(name)
    return version <= cls.__event_version__ or cls.__unknown_fields__ == "ignore"


def upcast(
    registry: EventRegistry, name: str, data: dict[str, Any], version: int
) -> dict[str, Any]:
    """*data*, a stored payload of *version*, brought up to the declared version through the
    event's upcasters (a version with none is passed on as it is).

    :raises PayloadError: naming the upcaster that failed or returned something else than a dict
    """
    cls = registry.get(name)
    chain: dict[int, Upcaster] = registry.upcasters(name)
    for step in range(max(version, 1), cls.__event_version__):
        fn = chain.get(step)
        if fn is None:
            continue
        try:
            data = fn(dict(data))
        except Exception as exc:
            raise PayloadError(
                name,
                f"upcaster {getattr(fn, '__qualname__', fn)!r} from version {step} failed: "
                f"{type(exc).__name__}: {exc}",
            ) from exc
        if not isinstance(data, dict):
            raise PayloadError(
                name,
                f"upcaster {getattr(fn, '__qualname__', fn)!r} from version {step} returned a "
                f"{type(data).__name__}, not a dict",
            )
    return data


def decode_stored(
    registry: EventRegistry, name: str, text: str, version: int | None = None
) -> StoredEvent:
    """Rebuild the event declared as *name* from a stored payload of *version* (``None``:
    the declared one; stores written before versions existed hold version 1).

    :raises UnknownEventError: if *name* is not declared in *registry*
    :raises UnreadableVersionError: for a newer version of a type that rejects unknown fields
    :raises PayloadError: for text that is not a JSON object, a field missing without a
        default, or a value that cannot be rebuilt (the message names the field)
    """
    cls = registry.get(name)
    current = cls.__event_version__
    stored = current if version is None else version
    tolerant = cls.__unknown_fields__ == "ignore"
    if stored > current and not tolerant:
        raise UnreadableVersionError(name, stored, current)
    data = load_object(name, text)
    if stored < current:
        data = upcast(registry, name, data, stored)
    if not tolerant:
        return StoredEvent(decode_object(cls, data))
    ignored: list[str] = []
    event = decode_object(cls, data, ignored)
    if not ignored:
        return StoredEvent(event)
    _log_first(name, stored, current, ignored)
    return StoredEvent(event, tuple(ignored))


_NOTE_VERSION = re.compile(r"^durable .*\bversion=(\d+)")


def read_now(registry: EventRegistry, rec: FailureRecord) -> tuple[int | None, str]:
    """A failure row's payload as this process reads it (upcast, tolerantly), for the views
    of a row: ``(stored version, the event's repr or why it cannot be read)``. The version is
    the one a durable row's note names (``None``: not recorded, read as the declared one)."""
    found = _NOTE_VERSION.search(rec.note or "")
    version = int(found[1]) if found else None
    if not rec.payload_ok:
        return version, "not readable: the payload was not JSON-encodable"
    try:
        return version, repr(decode_stored(registry, rec.event_name, rec.payload, version).event)
    except EventBusError as exc:
        return version, f"not readable by this process: {exc}"


def _log_first(name: str, stored: int, current: int, ignored: list[str]) -> None:
    """One INFO line per (event, field) and process: a deploy's worth of events, one line."""
    with _logged_lock:
        new = [f for f in ignored if (name, f) not in _logged]
        _logged.update((name, f) for f in new)
    for field in new:
        logger.info(
            "event %r: stored field %r is not declared by this process's class (stored at "
            "version %d, declared version %d); ignored (logged once per process; counted in "
            "the durable transport's statistics)",
            name,
            field,
            stored,
            current,
        )
