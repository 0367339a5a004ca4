"""What a job returned, as the JSON its run record keeps: through the bus's codec.

The codec (``eventbus.encode_payload``) is type-directed: the job function's return
annotation tells it how to write the value (``-> Decimal`` stores ``"9.90"``, a dataclass an
object). Without a usable annotation, or when the value does not fit it, plain JSON values
are stored as they are; anything else is stored as its ``repr()``, flagged as such.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import types
import typing
from typing import Any

from eventbus import Event, EventRegistry, encode_payload

__all__ = ["encode_result"]

#: wrapper events of the return annotations seen so far; never emitted anywhere
_registry = EventRegistry()
_names = itertools.count(1)


def encode_result(fn: object, value: Any) -> tuple[Any, bool]:
    """``(json_value, True)`` for ``value`` returned by the job function ``fn``, or
    ``(repr(value), False)`` when JSON cannot hold it."""
    if value is None:
        return None, True
    for wrapper in (_typed(_return_hint(fn)), _wrapper(Any)):
        text, ok = encode_payload(wrapper(value=value))  # type: ignore[call-arg]
        if ok:
            return json.loads(text)["value"], True
    try:
        return repr(value), False
    except Exception:
        return f"<{type(value).__qualname__} with an unprintable repr>", False


def _return_hint(fn: object) -> Any:
    """The return annotation of ``fn`` (or of its ``__call__``), resolved; ``Any`` if none."""
    target = inspect.unwrap(fn) if callable(fn) else fn
    if not inspect.isroutine(target):
        target = type(target).__call__
    try:
        hint = typing.get_type_hints(target).get("return", Any)
    except Exception:  # a name only imported under TYPE_CHECKING, a bad string
        return Any
    return Any if hint is None or hint is type(None) else hint


def _typed(hint: Any) -> type[Event]:
    try:
        return _wrapper(hint)
    except Exception:  # unhashable, or not a type a dataclass field can have
        return _wrapper(Any)


@functools.lru_cache(maxsize=256)
def _wrapper(hint: Any) -> type[Event]:
    """An event with one field, ``value: hint``, for the codec to walk."""
    namespace = {"__annotations__": {"value": hint}, "__module__": __name__}
    return types.new_class(
        "Result",
        (Event,),
        {"name": f"scheduler.result.r{next(_names)}", "registry": _registry},
        lambda ns: ns.update(namespace),
    )
