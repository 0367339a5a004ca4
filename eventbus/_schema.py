"""The declared events as data: JSON Schema of each field (as the codec writes it), and the
snapshot ``eventbus schema dump`` writes for ``schema check`` to compare against.

The schema follows the codec's JSON, not Python's types: a ``Decimal`` is a string, a
``datetime`` an ISO 8601 string, bytes base64 text, a tuple an array (see :mod:`eventbus._codec`).
The snapshot is sorted (events by name, fields by name), so that its diffs show changes only.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import json
import types
import typing
import uuid
from typing import Any

from ._codec import encode_value
from ._events import Event, EventRegistry

__all__ = ["SNAPSHOT_FORMAT", "event_schema", "field_schema", "snapshot", "snapshot_text"]

#: the version of the snapshot's own format (its ``format`` key)
SNAPSHOT_FORMAT = 1

_SCALARS: dict[type, dict[str, Any]] = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    decimal.Decimal: {"type": "string", "format": "decimal"},
    _dt.datetime: {"type": "string", "format": "date-time"},
    _dt.date: {"type": "string", "format": "date"},
    _dt.time: {"type": "string", "format": "time"},
    uuid.UUID: {"type": "string", "format": "uuid"},
    bytes: {"type": "string", "contentEncoding": "base64"},
}


def field_schema(hint: Any) -> dict[str, Any]:
    """The JSON Schema of a value of annotation *hint* as the codec stores it (``{}``: any)."""
    if hint is Any or hint is object:
        return {}
    if hint is None or hint is type(None):
        return {"type": "null"}
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        return {"anyOf": [field_schema(a) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, set, frozenset) or hint in (list, set, frozenset):
        return {"type": "array", "items": field_schema(args[0] if args else Any)}
    if origin is tuple or hint is tuple:
        if not args or args[-1:] == (Ellipsis,):
            return {"type": "array", "items": field_schema(args[0] if args else Any)}
        return {
            "type": "array",
            "prefixItems": [field_schema(a) for a in args],
            "minItems": len(args),
            "maxItems": len(args),
        }
    if origin is dict or hint is dict:
        value = args[1] if args else Any
        return {"type": "object", "additionalProperties": field_schema(value)}
    if isinstance(hint, type):
        if issubclass(hint, enum.Enum):
            return {"enum": [m.value for m in hint], "title": hint.__name__}
        if dataclasses.is_dataclass(hint):
            return _object_schema(hint, typing.get_type_hints(hint))
        for base, schema in _SCALARS.items():  # bool before int, datetime before date
            if issubclass(hint, base):
                return dict(schema)
    return {"description": f"not described: {getattr(hint, '__name__', hint)!s}"}


def _object_schema(cls: type, hints: dict[str, Any]) -> dict[str, Any]:
    fields = dataclasses.fields(cls)
    return {
        "type": "object",
        "properties": {f.name: field_schema(hints.get(f.name, Any)) for f in fields},
        "required": sorted(f.name for f in fields if _required(f)),
    }


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def event_schema(cls: type[Event]) -> dict[str, Any]:
    """The JSON Schema of *cls*'s stored payload (an object of its fields)."""
    schema = _object_schema(cls, cls.__registry__.type_hints(cls))
    schema["title"] = cls.__event_name__
    return schema


def _default(f: dataclasses.Field[Any], hint: Any) -> dict[str, Any]:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return {}
    text, ok = _encode_value(value, hint)
    return {"default": json.loads(text)} if ok else {"default_repr": repr(value)}


def _encode_value(value: Any, hint: Any) -> tuple[str, bool]:
    """A default as the codec would store it (its repr when the codec cannot)."""
    try:
        return json.dumps(encode_value(value, hint)), True
    except Exception:
        return "", False


def snapshot(registry: EventRegistry) -> dict[str, Any]:
    """Every event declared in *registry*: name, version, durable, how unknown fields are
    read, the versions its upcasters start from, and its fields (JSON Schema, required,
    default)."""
    events: dict[str, Any] = {}
    for name in registry.names():
        cls = registry.get(name)
        hints = registry.type_hints(cls)
        fields = {}
        for f in sorted(dataclasses.fields(cls), key=lambda f: f.name):
            hint = hints.get(f.name, Any)
            fields[f.name] = {
                "schema": field_schema(hint),
                "required": _required(f),
                **_default(f, hint),
            }
        events[name] = {
            "version": cls.__event_version__,
            "durable": cls.__durable__,
            "unknown_fields": cls.__unknown_fields__,
            "upcasters_from": sorted(registry.upcasters(name)),
            "fields": fields,
        }
    return {"format": SNAPSHOT_FORMAT, "events": events}


def snapshot_text(registry: EventRegistry) -> str:
    """:func:`snapshot` as stable JSON text (sorted keys, two-space indent, a final newline)."""
    return json.dumps(snapshot(registry), indent=2, sort_keys=True) + "\n"
