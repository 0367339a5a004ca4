"""Events shared by the benchmark scripts, declared in their own registry."""

from __future__ import annotations

import types

from eventbus import Event, EventRegistry

__all__ = ["Ping", "declare_others", "registry"]

registry = EventRegistry()


class Ping(Event, name="bench.ping", registry=registry):
    n: int


def declare_others(count: int) -> list[type[Event]]:
    """``other{i}.done`` events, to register many names beside the one emitted.

    Declaring an event runs dataclass code generation (~1 ms each): call this once per process.
    """
    return [
        types.new_class(f"Other{i}", (Event,), {"name": f"other{i}.done", "registry": registry})
        for i in range(count)
    ]
