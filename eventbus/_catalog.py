"""The catalog of a bus's events: what each is (version, fields, durable or not) and who
listens to it (in-process listeners, durable listeners with their consumer groups, its
stream). The console's Events page and the AsyncAPI document are drawn from it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ._schema import event_schema, snapshot

if TYPE_CHECKING:
    from ._core._bus import EventBus

__all__ = ["DurableListenerInfo", "EventInfo", "FieldInfo", "catalog"]


@dataclasses.dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    type: str  #: the annotation as written (``str | None``)
    required: bool
    default: str | None  #: the default as JSON text (``None``: required)


@dataclasses.dataclass(frozen=True, slots=True)
class DurableListenerInfo:
    name: str
    group: str  #: the consumer group, ``service:listener``


@dataclasses.dataclass(frozen=True, slots=True)
class EventInfo:
    name: str
    version: int
    durable: bool
    unknown_fields: str
    upcasters_from: tuple[int, ...]
    fields: tuple[FieldInfo, ...]
    listeners: tuple[str, ...]  #: in-process listeners, in call order
    durable_listeners: tuple[DurableListenerInfo, ...]
    stream: str | None  #: its stream key (durable events of a bus with a transport)
    schema: dict[str, Any]  #: the JSON Schema of its payload
    doc: str  #: the first paragraph of the class docstring


def catalog(bus: EventBus) -> list[EventInfo]:
    """Every event declared in the bus's registry, by name."""
    registry = bus.registry
    snap = snapshot(registry)["events"]
    transport: Any = bus.durable
    durable_by_event: dict[str, list[DurableListenerInfo]] = {}
    listed = getattr(transport, "listeners", None)
    for lst in listed() if callable(listed) else ():
        durable_by_event.setdefault(lst.event_name, []).append(
            DurableListenerInfo(lst.name, lst.group)
        )
    keys = getattr(transport, "keys", None)
    out = []
    for name in registry.names():
        cls = registry.get(name)
        hints = registry.type_hints(cls)
        fields = []
        for fname, f in snap[name]["fields"].items():
            default = f.get("default", f.get("default_repr"))
            fields.append(
                FieldInfo(
                    fname,
                    _type_text(hints.get(fname, Any)),
                    f["required"],
                    None if f["required"] else _json_text(default),
                )
            )
        out.append(
            EventInfo(
                name=name,
                version=cls.__event_version__,
                durable=cls.__durable__,
                unknown_fields=cls.__unknown_fields__,
                upcasters_from=tuple(sorted(registry.upcasters(name))),
                fields=tuple(fields),
                listeners=tuple(sub.name for sub in bus.listeners(name)),
                durable_listeners=tuple(durable_by_event.get(name, ())),
                stream=keys.stream(name) if keys is not None and cls.__durable__ else None,
                schema=event_schema(cls),
                doc=(cls.__doc__ or "").strip().split("\n\n")[0] if _own_doc(cls) else "",
            )
        )
    return out


def _own_doc(cls: type) -> bool:
    """A docstring of the class itself, not the one ``dataclass`` makes up from the fields."""
    doc = cls.__doc__ or ""
    return bool(doc) and not doc.startswith(cls.__name__ + "(")


def _type_text(hint: Any) -> str:
    if isinstance(hint, type):
        return hint.__qualname__
    return str(hint).replace("typing.", "")


def _json_text(value: Any) -> str:
    import json

    return json.dumps(value)
