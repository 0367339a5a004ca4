"""JSON encoding of event payloads for the failure table, and rehydration through the registry.

The codec is *type-directed*: it walks the event's resolved field annotations, so the JSON
stays plain (a ``Decimal`` is the string ``"9.90"``, a ``datetime`` its ISO text, a tuple a
list, a nested dataclass an object) and the annotation tells the decoder what to rebuild.

=====================  ================================  =====================================
annotation             JSON                              decoded as
=====================  ================================  =====================================
int, str, bool, None   itself                            itself
float                  number (``"nan"``, ``"inf"``)     float
Decimal                string ``"9.90"``                 Decimal (exact)
datetime, date, time   ISO 8601 string, offset kept      the same type, same offset
UUID                   string                            UUID
bytes                  base64 string                     bytes
Enum subclass          the member's value                the member
list, tuple, set       array                             the annotated container
dict[K, V]             object (non-string keys as JSON)  dict with K keys
dataclass              object of its fields              the dataclass
X | Y, Optional        the first option the value fits   the first option that decodes
Literal, Any, object   JSON as is                        the JSON value
=====================  ================================  =====================================

A value that does not fit its annotation, or a type not listed, makes :func:`encode_payload`
return ``(repr(event), False)``: the failure is still recorded, readable but not retryable.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import json
import math
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from ._events import Event, EventRegistry
from ._exceptions import PayloadError

__all__ = ["decode_object", "decode_payload", "encode_payload", "encode_value", "load_object"]


class _CodecError(Exception):
    """A value that does not fit its annotation; ``path`` names the field, e.g. ``items[2].sku``."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"field {path!r}: {problem}")


def encode_payload(event: Event) -> tuple[str, bool]:
    """Return ``(json_text, ok)``; when the payload cannot be encoded, ``(repr(event), False)``.

    Never raises: a failure must be recorded even if its payload is exotic.
    """
    try:
        data = _encode_fields(event, _hints(type(event)), "")
        return _JSON.encode(data), True
    except Exception:
        try:
            return repr(event), False
        except Exception:
            return f"<{type(event).__qualname__} with an unprintable payload>", False


def decode_payload(registry: EventRegistry, name: str, text: str) -> Event:
    """Rebuild the event declared as *name* from the JSON text :func:`encode_payload` wrote.

    :raises UnknownEventError: if *name* is no longer declared in *registry*
    :raises PayloadError: if the text is not JSON, or a field is missing, unknown or of a
        shape its annotation cannot be rebuilt from (the message names the field)
    """
    cls = registry.get(name)
    data = load_object(name, text)
    try:
        kwargs = _decode_fields(cls, data, "")
        return cls(**kwargs)
    except _CodecError as exc:
        raise PayloadError(name, str(exc)) from None


def load_object(name: str, text: str) -> dict[str, Any]:
    """The JSON object a stored payload of event *name* holds: what every reader of a stored
    payload (strict or tolerant) starts from, with one wording for what it cannot use.

    :raises PayloadError: if the text is not JSON, or is JSON but not an object
    """
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PayloadError(
            name, f"stored payload is not JSON ({exc}); it cannot be retried"
        ) from None
    if not isinstance(data, dict):
        raise PayloadError(name, f"stored payload is a JSON {type(data).__name__}, not an object")
    return data


def encode_value(value: Any, hint: Any) -> Any:
    """One value of annotation *hint* as JSON data (a field's default, for the schema).

    :raises ValueError: if the value does not fit its annotation
    """
    try:
        return _encode(value, hint, "value")
    except _CodecError as exc:
        raise ValueError(str(exc)) from None


# -- encoding ------------------------------------------------------------------------------------


# What json.dumps(data, sort_keys=True, allow_nan=False) uses, made once: dumps() builds a new
# encoder per call when given options, and a failure record is written on the publisher's path.
_JSON = json.JSONEncoder(sort_keys=True, allow_nan=False)


def _encode_fields(obj: Any, hints: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    return {
        name: _encode(getattr(obj, name), hints.get(name, Any), prefix + name)
        for name in _field_names(type(obj))
    }


_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return names


def _encode(value: Any, hint: Any, path: str) -> Any:
    if hint is type(value) and hint in _PLAIN:  # the commonest case: no annotation to take apart
        return value
    if hint is Any or hint is object:
        return _encode_untyped(value, path)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        for option in args:
            try:
                return _encode(value, option, path)
            except _CodecError:
                continue
        raise _CodecError(path, f"{_tname(value)} {value!r} fits none of {_describe(hint)}")
    if origin is typing.Literal:
        if value in args:
            return _encode_untyped(value, path)
        raise _CodecError(path, f"{value!r} is not one of {args!r}")
    if hint is None or hint is type(None):
        if value is None:
            return None
        raise _CodecError(path, f"expected None, got {_tname(value)}")
    if origin is not None or hint in _BARE_CONTAINERS:
        return _encode_generic(value, origin or hint, args, path)
    if not isinstance(hint, type):
        raise _CodecError(path, f"annotation {hint!r} is not supported by the codec")
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        raise _CodecError(path, f"expected {hint.__name__}, got {_tname(value)} {value!r}")
    if hint is _dt.date and isinstance(value, _dt.datetime):
        raise _CodecError(path, f"expected date, got datetime {value!r}")
    if isinstance(value, enum.Enum):
        return _encode_untyped(value.value, path)
    if dataclasses.is_dataclass(hint):
        return _encode_fields(value, _hints(hint), path + ".")
    encoder = _ENCODERS.get(hint)
    if encoder is None:
        for base, enc in _ENCODERS.items():
            if issubclass(hint, base):
                encoder = enc
                break
        else:
            raise _CodecError(path, f"type {hint.__qualname__} is not supported by the codec")
    return encoder(value)


def _encode_generic(value: Any, origin: Any, args: tuple[Any, ...], path: str) -> Any:
    if origin in (list, set, frozenset) or (origin is tuple and args[-1:] in ((), (Ellipsis,))):
        if not isinstance(value, origin):
            raise _CodecError(path, f"expected {origin.__name__}, got {_tname(value)}")
        item = args[0] if args else Any
        return [_encode(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, tuple) or len(value) != len(args):
            raise _CodecError(path, f"expected a tuple of {len(args)}, got {value!r}")
        return [
            _encode(v, h, f"{path}[{i}]") for i, (v, h) in enumerate(zip(value, args, strict=True))
        ]
    if origin is dict:
        if not isinstance(value, dict):
            raise _CodecError(path, f"expected dict, got {_tname(value)}")
        kh, vh = args if args else (Any, Any)
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = _encode(k, kh, f"{path}<key>")
            out[key if isinstance(key, str) else json.dumps(key)] = _encode(v, vh, f"{path}[{k!r}]")
        return out
    raise _CodecError(path, f"annotation {origin!r} is not supported by the codec")


def _encode_untyped(value: Any, path: str) -> Any:
    """JSON-native values only: without an annotation the decoder could not rebuild more."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return _encode_float(value)
    if isinstance(value, list | tuple):
        return [_encode_untyped(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _encode_untyped(v, f"{path}[{k!r}]") for k, v in value.items()}
    raise _CodecError(path, f"{_tname(value)} is not JSON and the annotation does not say more")


def _encode_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


_BARE_CONTAINERS = (list, tuple, set, frozenset, dict)
_PLAIN = frozenset({int, str, bool})  # encoded as themselves (exact types only: not bool for int)

_ENCODERS: dict[type, Callable[[Any], Any]] = {
    bool: lambda v: v,
    int: lambda v: int(v),
    str: lambda v: str(v),
    float: _encode_float,
    decimal.Decimal: str,
    _dt.datetime: lambda v: v.isoformat(),
    _dt.date: lambda v: v.isoformat(),
    _dt.time: lambda v: v.isoformat(),
    uuid.UUID: str,
    bytes: lambda v: base64.b64encode(v).decode("ascii"),
}


# -- decoding ------------------------------------------------------------------------------------


_FIELD_MAPS: dict[type, dict[str, dataclasses.Field[Any]]] = {}


def decode_object(
    cls: type[Event], data: Mapping[str, Any], ignored: list[str] | None = None
) -> Event:
    """Build *cls* from a decoded JSON object; with *ignored* a list, fields *cls* does not
    declare are appended to it instead of refused (the tolerant reader of stored payloads).

    :raises PayloadError: naming the field that is missing, unknown or cannot be rebuilt
    """
    try:
        return cls(**_decode_fields(cls, data, "", ignored))
    except _CodecError as exc:
        raise PayloadError(cls.__event_name__, str(exc)) from None


def _decode_fields(
    cls: type[Any], data: Mapping[str, Any], prefix: str, ignored: list[str] | None = None
) -> dict[str, Any]:
    hints = _hints(cls)
    fields = _FIELD_MAPS.get(cls)
    if fields is None:
        fields = _FIELD_MAPS[cls] = {f.name: f for f in dataclasses.fields(cls)}
    if not data.keys() <= fields.keys():
        unknown = sorted(set(data) - set(fields))
        if ignored is None:
            raise _CodecError(
                prefix + unknown[0], f"is stored but {cls.__qualname__} has no such field"
            )
        ignored += unknown
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise _CodecError(prefix + name, "is required but missing from the stored payload")
            continue
        kwargs[name] = _decode(data[name], hints.get(name, Any), prefix + name)
    return kwargs


def _decode(raw: Any, hint: Any, path: str) -> Any:
    if hint is type(raw) and hint in _PLAIN:  # the commonest case: what the decoder returns
        return raw
    if hint is Any or hint is object:
        return raw
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        for option in args:
            try:
                return _decode(raw, option, path)
            except _CodecError:
                continue
        raise _CodecError(path, f"stored {raw!r} fits none of {_describe(hint)}")
    if origin is typing.Literal:
        if raw in args:
            return raw
        raise _CodecError(path, f"stored {raw!r} is not one of {args!r}")
    if hint is None or hint is type(None):
        if raw is None:
            return None
        raise _CodecError(path, f"expected null, stored {raw!r}")
    if origin is not None or hint in _BARE_CONTAINERS:
        return _decode_generic(raw, origin or hint, args, path)
    if not isinstance(hint, type):
        raise _CodecError(path, f"annotation {hint!r} is not supported by the codec")
    try:
        if issubclass(hint, enum.Enum):
            return hint(raw)
        if dataclasses.is_dataclass(hint):
            if not isinstance(raw, dict):
                raise _CodecError(path, f"expected an object for {hint.__qualname__}, got {raw!r}")
            return hint(**_decode_fields(hint, raw, path + "."))
        for base, decoder in _DECODERS:
            if issubclass(hint, base):
                return decoder(hint, raw)
    except _CodecError:
        raise
    except (ValueError, TypeError, ArithmeticError) as exc:
        raise _CodecError(
            path, f"cannot rebuild {hint.__qualname__} from {raw!r} ({exc})"
        ) from None
    raise _CodecError(path, f"type {hint.__qualname__} is not supported by the codec")


def _decode_generic(raw: Any, origin: Any, args: tuple[Any, ...], path: str) -> Any:
    if origin in (list, set, frozenset, tuple):
        if not isinstance(raw, list):
            raise _CodecError(path, f"expected an array, stored {raw!r}")
        if origin is tuple and args and args[-1:] != (Ellipsis,):
            if len(raw) != len(args):
                raise _CodecError(path, f"expected {len(args)} items, stored {len(raw)}")
            return tuple(
                _decode(v, h, f"{path}[{i}]")
                for i, (v, h) in enumerate(zip(raw, args, strict=True))
            )
        item = args[0] if args else Any
        return origin(_decode(v, item, f"{path}[{i}]") for i, v in enumerate(raw))
    if origin is dict:
        if not isinstance(raw, dict):
            raise _CodecError(path, f"expected an object, stored {raw!r}")
        kh, vh = args if args else (Any, Any)
        return {_decode_key(k, kh, path): _decode(v, vh, f"{path}[{k!r}]") for k, v in raw.items()}
    raise _CodecError(path, f"annotation {origin!r} is not supported by the codec")


def _decode_key(key: str, hint: Any, path: str) -> Any:
    # Keys that encode to a string were stored as is; any other key was stored as its JSON text.
    try:
        return _decode(key, hint, f"{path}<key>")
    except _CodecError:
        try:
            raw = json.loads(key)
        except ValueError:
            raise _CodecError(f"{path}<key>", f"cannot rebuild a key from {key!r}") from None
        return _decode(raw, hint, f"{path}<key>")


def _strict(kind: type, *accepted: type) -> Callable[[type, Any], Any]:
    def check(hint: type, raw: Any) -> Any:
        if not isinstance(raw, accepted) or (bool not in accepted and isinstance(raw, bool)):
            raise TypeError(f"stored {type(raw).__name__}, expected {kind.__name__}")
        return hint(raw)

    return check


def _decode_float(hint: type, raw: Any) -> Any:
    if isinstance(raw, str) and raw in ("nan", "inf", "-inf"):
        return hint(raw)
    return _strict(float, int, float)(hint, raw)


def _from_iso(hint: type, raw: Any) -> Any:
    if not isinstance(raw, str):
        raise TypeError(f"stored {type(raw).__name__}, expected an ISO 8601 string")
    return hint.fromisoformat(raw)  # type: ignore[attr-defined]


def _decode_date(hint: type, raw: Any) -> Any:
    if isinstance(raw, str) and len(raw) != 10:
        raise ValueError("a date is stored as YYYY-MM-DD")
    return _from_iso(hint, raw)


def _decode_bytes(hint: type, raw: Any) -> Any:
    if not isinstance(raw, str):
        raise TypeError(f"stored {type(raw).__name__}, expected base64 text")
    return hint(base64.b64decode(raw, validate=True))


# Order matters: bool before int, datetime before date (subclasses first).
_DECODERS: tuple[tuple[type, Callable[[type, Any], Any]], ...] = (
    (bool, _strict(bool, bool)),
    (int, _strict(int, int)),
    (float, _decode_float),
    (str, _strict(str, str)),
    (decimal.Decimal, _strict(decimal.Decimal, str)),
    (_dt.datetime, _from_iso),
    (_dt.date, _decode_date),
    (_dt.time, _from_iso),
    (uuid.UUID, _strict(uuid.UUID, str)),
    (bytes, _decode_bytes),
)


# -- helpers -------------------------------------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """Resolved annotations of an event or a nested dataclass, cached per class."""
    if issubclass(cls, Event):
        return cls.__registry__.type_hints(cls)  # cached by the registry
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _tname(value: object) -> str:
    return type(value).__name__


def _describe(hint: Any) -> str:
    return str(hint).replace("typing.", "")
