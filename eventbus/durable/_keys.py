"""Redis key names, consumer group names and consumer names of durable events.

Every key of one event name shares the hash tag ``{<name>}``, so that on Redis Cluster the
stream, its dead-letter stream, its redelivery streams and its publish keys live in one slot
and a script may touch several of them.

==========================================  ===================================================
key                                         holds
==========================================  ===================================================
``<prefix>:evt:{<name>}``                   the stream: one entry per published event
``<prefix>:evt:{<name>}:dlq``               dead letters of every group (no consumer group)
``<prefix>:evt:{<name>}:re:<group>``        entries handed back to one group (replay, retry)
``<prefix>:evt:{<name>}:pub:<event_id>``    set with NX by the relay: the event was added
``<prefix>:evt:{<name>}:janitor``           the janitor's turn (``SET NX PX``)
``<prefix>:evt:{<name>}:runs:<group>``     attempt records of one group's entries that
                                            failed or ran alone (a hash: see ``_attempts``)
``<prefix>:evt:{<name>}:paused``            the processes whose kill switch paused a group
                                            (a hash: ``group/consumer`` → when; see
                                            ``_pauses``)
``<prefix>:evt:{<name>}:groups``            every group registered for the stream (a hash:
                                            group → registration time, ms); the janitor keeps
                                            entries for the absent ones (see ``_janitor``)
==========================================  ===================================================
"""

from __future__ import annotations

import os
import re
import socket
import uuid

__all__ = ["StreamKeys", "consumer_name", "group_name", "validate_part"]

_PART = re.compile(r"[A-Za-z0-9_.:@-]+")


def validate_part(kind: str, value: object) -> str:
    """Return *value* if it may be part of a key or group name, else raise naming it.

    :raises ValueError: for an empty value, or one with characters outside
        ``[A-Za-z0-9_.:@-]`` (braces would break the hash tag, spaces the CLI's output)
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"{kind} {value!r} must be a non-empty str")
    if _PART.fullmatch(value) is None:
        bad = next(c for c in value if _PART.fullmatch(c) is None)
        raise ValueError(
            f"{kind} {value!r} contains {bad!r}; use letters, digits and '_', '.', ':', '@', '-'"
        )
    return value


def group_name(service: str, listener: str) -> str:
    """The consumer group of one durable listener of one service: ``service:listener``.

    One group per listener (not per service): two listeners sharing a group would split the
    events between them instead of each getting every event.
    """
    return f"{validate_part('service', service)}:{validate_part('listener name', listener)}"


def consumer_name() -> str:
    """A consumer name for this process: ``host-pid-random``, never reused by a restart."""
    host = re.sub(r"[^A-Za-z0-9_.-]", "_", socket.gethostname())[:64] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class StreamKeys:
    """Builds the keys of the module docstring under one prefix."""

    __slots__ = ("_base", "prefix")

    def __init__(self, prefix: str = "eventbus") -> None:
        self.prefix = validate_part("prefix", prefix)
        self._base = f"{prefix}:evt:"

    def __repr__(self) -> str:
        return f"StreamKeys(prefix={self.prefix!r})"

    def stream(self, name: str) -> str:
        return f"{self._base}{{{name}}}"

    def dead(self, name: str) -> str:
        return f"{self._base}{{{name}}}:dlq"

    def redeliver(self, name: str, group: str) -> str:
        return f"{self._base}{{{name}}}:re:{group}"

    def runs(self, name: str, group: str) -> str:
        return f"{self._base}{{{name}}}:runs:{group}"

    def paused(self, name: str) -> str:
        return f"{self._base}{{{name}}}:paused"

    def published(self, name: str, event_id: str) -> str:
        return f"{self._base}{{{name}}}:pub:{event_id}"

    def janitor(self, name: str) -> str:
        return f"{self._base}{{{name}}}:janitor"

    def groups(self, name: str) -> str:
        return f"{self._base}{{{name}}}:groups"

    def scan_pattern(self) -> str:
        """A ``SCAN MATCH`` pattern for every key of this prefix (filter by ``TYPE stream``)."""
        return f"{self._base}*"

    def parse(self, key: str | bytes) -> tuple[str, str] | None:
        """``(event name, kind)`` of one of our stream keys; kind is ``stream``, ``dlq`` or
        ``re:<group>``. ``None`` for any other key."""
        text = key.decode() if isinstance(key, bytes) else key
        if not text.startswith(self._base + "{"):
            return None
        name, sep, rest = text[len(self._base) + 1 :].partition("}")
        if not sep:
            return None
        if not rest:
            return name, "stream"
        if rest == ":dlq":
            return name, "dlq"
        if rest.startswith(":re:"):
            return name, rest[1:]
        return None
