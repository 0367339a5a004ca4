"""Typed events and the registry that maps names to them.

An event is declared once as a frozen, slotted dataclass with keyword construction::

    class OrderPaid(Event, name="order.paid"):
        order_id: int

The metaclass applies ``dataclass(frozen=True, slots=True, kw_only=True)`` at class creation,
because ``slots=True`` returns a *new* class and so cannot be added from ``__init_subclass__``.
A class without ``name=`` is an abstract base for other events and is not registered.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import decimal
import enum
import sys
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, Literal, dataclass_transform

from ._exceptions import DuplicateEventError, PayloadError, UnknownEventError, UpcasterError
from ._patterns import validate_name

__all__ = [
    "Event",
    "EventRegistry",
    "UnknownFields",
    "Upcaster",
    "coerce_event",
    "default_registry",
]

#: what decoding a *stored* payload does with a field the type does not declare
UnknownFields = Literal["ignore", "reject"]
#: turns a stored payload (a dict of JSON values) of one version into one of the next
Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


class EventRegistry:
    """Maps event names to event types, both ways.

    One default registry serves most applications; build more for isolation (tests, several
    applications in one process). A registry never forgets a name: a redeclaration is an error.
    """

    def __init__(self) -> None:
        self._by_name: dict[str, type[Event]] = {}
        self._hints: dict[type[Event], dict[str, Any]] = {}
        self._upcasters: dict[str, dict[int, Upcaster]] = {}

    def __repr__(self) -> str:
        return f"EventRegistry(<{len(self._by_name)} events>)"

    def register(self, cls: type[Event], name: str) -> None:
        validate_name(name)
        existing = self._by_name.get(name)
        if existing is not None and existing is not cls:
            raise DuplicateEventError(name, existing, cls)
        self._by_name[name] = cls

    def declare(self, classes: Iterable[type[Event]]) -> list[type[Event]]:
        """Register each of *classes* under its own name unless it is there already; safe to
        repeat. For a library's own events (the scheduler's, the durable transport's) in a
        registry the application owns: a name the application took is left to it.

        :return: the classes left out because their name is declared as another class
        """
        clashes = []
        for cls in classes:
            name = cls.__event_name__
            if name not in self._by_name:
                self.register(cls, name)
            elif self._by_name[name] is not cls:
                clashes.append(cls)
        return clashes

    def get(self, name: str) -> type[Event]:
        """:raises UnknownEventError: if no event of that name was declared here."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnknownEventError(name) from None

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self._by_name
        return (
            isinstance(item, type)
            and self._by_name.get(getattr(item, "__event_name__", "")) is item
        )

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._by_name))

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def add_upcaster(self, name: str, from_version: int, fn: Upcaster) -> None:
        """Declare *fn* as what turns a stored version-*from_version* payload of event *name*
        into one of the next version (see :func:`eventbus.upcaster`).

        :raises UpcasterError: for an event not declared here, a version the event does not
            have (below 1, or not below its current version), or a second upcaster for one
            version
        """
        cls = self._by_name.get(name)
        if cls is None:
            raise UpcasterError(
                name, from_version, "no event of that name is declared (declare the class first)"
            )
        current = cls.__event_version__
        if not isinstance(from_version, int) or isinstance(from_version, bool):
            raise UpcasterError(name, from_version, "from_version must be an int")
        if from_version < 1 or from_version >= current:
            raise UpcasterError(
                name,
                from_version,
                f"the event is at version {current}, so an upcaster can start from "
                + (f"versions 1 to {current - 1}" if current > 1 else "no version"),
            )
        chain = self._upcasters.setdefault(name, {})
        if from_version in chain:
            raise UpcasterError(name, from_version, "an upcaster for this version is declared")
        chain[from_version] = fn

    def upcasters(self, name: str) -> dict[int, Upcaster]:
        """The upcasters of event *name*, by the version each starts from."""
        return dict(self._upcasters.get(name, {}))

    def build(self, name: str, payload: Mapping[str, Any]) -> Event:
        """Build the event declared as *name* from a mapping, checking fields and simple types.

        :raises UnknownEventError: if *name* is not declared
        :raises PayloadError: on a missing or unknown field, or a value of the wrong simple type
        """
        cls = self.get(name)
        if not isinstance(payload, Mapping):
            raise PayloadError(
                name, f"expected a mapping of field values, got {type(payload).__name__}"
            )
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(payload) - set(fields))
        if unknown:
            raise PayloadError(
                name,
                f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
                f"; declared fields are {', '.join(map(repr, fields)) or 'none'}",
            )
        missing = [
            n
            for n, f in fields.items()
            if n not in payload
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise PayloadError(
                name,
                f"missing field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}",
            )
        hints = self.type_hints(cls)
        for key, value in payload.items():
            problem = check_simple_type(value, hints.get(key, Any))
            if problem is not None:
                raise PayloadError(name, f"field {key!r} {problem}")
        return cls(**payload)

    def type_hints(self, cls: type[Event]) -> dict[str, Any]:
        """Resolved field annotations, cached (postponed annotations are strings).

        Each class's annotations are evaluated in its own module, skipping :class:`Event`
        itself: ``typing.get_type_hints`` would evaluate Event's ``ClassVar`` annotations in
        the ``eventbus`` package namespace (its public ``__module__``) and fail. An annotation
        that cannot be resolved (a type local to a function) is not checked.
        """
        hints = self._hints.get(cls)
        if hints is None:
            hints = {}
            for klass in reversed(cls.__mro__):
                if klass is Event or klass is object:
                    continue
                module = sys.modules.get(klass.__module__)
                globalns = dict(vars(module)) if module is not None else {}
                for key, value in klass.__dict__.get("__annotations__", {}).items():
                    hints[key] = _resolve(value, globalns, dict(vars(klass)))
            self._hints[cls] = hints
        return hints


default_registry = EventRegistry()

_SIMPLE: tuple[type, ...] = (
    int,
    float,
    str,
    bytes,
    bool,
    decimal.Decimal,
    _dt.datetime,
    _dt.date,
    _dt.time,
    uuid.UUID,
)


def check_simple_type(value: object, hint: Any) -> str | None:
    """Describe why *value* does not fit *hint*, for simple types; ``None`` when it fits.

    Containers and other generics are checked only at their outer type: deep checks would cost
    more than they catch, and the type checker covers the typed path.
    """
    if hint is Any or hint is object:
        return None
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        options = typing.get_args(hint)
        if all(check_simple_type(value, opt) is not None for opt in options):
            return f"must be {_describe(hint)}, got {type(value).__name__} {value!r}"
        return None
    if hint is type(None):
        return None if value is None else f"must be None, got {type(value).__name__}"
    if origin is typing.Literal:
        allowed = typing.get_args(hint)
        return None if value in allowed else f"must be one of {allowed!r}, got {value!r}"
    check = origin if isinstance(origin, type) else hint
    if not isinstance(check, type):
        return None
    if check is float and isinstance(value, int) and not isinstance(value, bool):
        return None  # the numeric tower: an int is an acceptable float
    if check is int and isinstance(value, bool):
        return f"must be int, got bool {value!r}"
    if check is _dt.date and isinstance(value, _dt.datetime):
        return f"must be date, got datetime {value!r}"
    if isinstance(value, check):
        return None
    if check in _SIMPLE or issubclass(check, enum.Enum) or origin is not None:
        return f"must be {_describe(hint)}, got {type(value).__name__} {value!r}"
    if dataclasses.is_dataclass(check):
        return f"must be {check.__name__}, got {type(value).__name__}"
    return None


def _resolve(annotation: object, globalns: dict[str, Any], localns: dict[str, Any]) -> Any:
    if not isinstance(annotation, str):
        return annotation
    try:
        return eval(annotation, globalns, localns)
    except Exception:
        return Any


def _describe(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _check_version(cls_name: str, version: object, unknown_fields: object) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TypeError(
            f"{cls_name} is declared with version={version!r}; a version is an int >= 1"
        )
    if unknown_fields not in (None, "ignore", "reject"):
        raise TypeError(
            f"{cls_name} is declared with unknown_fields={unknown_fields!r}; "
            "it is 'ignore' or 'reject'"
        )


@dataclass_transform(kw_only_default=True, frozen_default=True)
class _EventMeta(type):
    def __new__(
        mcls,
        cls_name: str,
        bases: tuple[type, ...],
        namespace: dict[str, Any],
        *,
        name: str | None = None,
        registry: EventRegistry | None = None,
        durable: bool = False,
        version: int = 1,
        unknown_fields: UnknownFields | None = None,
        **kwargs: Any,
    ) -> _EventMeta:
        if "__dataclass_fields__" in namespace and "__slots__" in namespace:
            # dataclass(slots=True) re-creating the class: pass straight through.
            return super().__new__(mcls, cls_name, bases, namespace, **kwargs)
        if name is not None:
            validate_name(name)  # before anything is built, so a bad name registers nothing
        if durable and name is None:
            raise TypeError(
                f"{cls_name} is declared durable=True without a name=; a durable event is "
                "published under its name, so give it one"
            )
        _check_version(cls_name, version, unknown_fields)
        cls = super().__new__(mcls, cls_name, bases, namespace, **kwargs)
        if not bases:  # Event itself
            return cls
        dc: Any = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)
        dc.__durable__ = bool(durable)
        dc.__event_version__ = version
        dc.__unknown_fields__ = unknown_fields or ("ignore" if durable else "reject")
        if name is not None:
            reg = registry if registry is not None else default_registry
            dc.__event_name__ = name
            dc.__registry__ = reg
            reg.register(dc, name)
        else:
            dc.__event_name__ = ""
        result: _EventMeta = dc
        return result

    def __init__(cls, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("name", None)
        kwargs.pop("registry", None)
        kwargs.pop("durable", None)
        kwargs.pop("version", None)
        kwargs.pop("unknown_fields", None)
        super().__init__(*args, **kwargs)


class Event(metaclass=_EventMeta):
    """Base class of every event: a past-tense fact with a typed, immutable payload.

    Declared with class keywords, ``class OrderPaid(Event, name="order.paid")``:

    * ``name``: the dotted name the event is emitted and subscribed under
    * ``registry``: where to declare it (default: the module-level ``default_registry``)
    * ``durable``: it may be published across processes (``await bus.publish(e, conn)``,
      see :mod:`eventbus.durable`); it can still be emitted in-process as any event
    * ``version``: the version of its fields (default 1); stored payloads of older versions
      are brought up to it by upcasters (:func:`eventbus.upcaster`)
    * ``unknown_fields``: what decoding a *stored* payload (a durable delivery, a failure
      row, a replayed outbox row) does with a field this class does not declare:
      ``"ignore"`` (the default for durable events: a newer publisher's addition) or
      ``"reject"`` (the default for the others); ``emit`` always rejects one
    """

    __slots__ = ()
    __event_name__: ClassVar[str] = ""
    __registry__: ClassVar[EventRegistry] = default_registry
    __durable__: ClassVar[bool] = False
    __event_version__: ClassVar[int] = 1
    __unknown_fields__: ClassVar[UnknownFields] = "reject"

    def __init_subclass__(
        cls,
        *,
        name: str | None = None,
        registry: EventRegistry | None = None,
        durable: bool = False,
        version: int = 1,
        unknown_fields: UnknownFields | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)

    @property
    def event_name(self) -> str:
        return self.__event_name__


def coerce_event(
    registry: EventRegistry, event: Event | str, payload: Mapping[str, Any] | None
) -> Event:
    """What ``emit(event, payload)`` was given, as an event: built from a name, or checked.

    :raises TypeError: if both an instance and a payload are given
    :raises PayloadError: if *event* is neither an event nor a declared name (or its payload
        does not fit)
    """
    if isinstance(event, str):
        return registry.build(event, {} if payload is None else payload)
    if payload is not None:
        raise TypeError("pass either an event instance or a name and a payload, not both")
    if not isinstance(event, Event):
        raise PayloadError(
            getattr(event, "__event_name__", type(event).__name__),
            f"emit() takes an Event instance or a declared name, got {type(event).__name__}",
        )
    return event
