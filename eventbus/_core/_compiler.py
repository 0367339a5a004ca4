"""Compiled dispatch: one function per event type that calls its listeners in order.

A :class:`~eventbus._core._table.Plan` says which listeners an event type reaches.
:func:`compile_plan` turns it into the function ``emit()`` calls: straight-line Python source
with one ``try`` per listener, generated and compiled as ``dataclasses`` generates ``__init__``,
so that ten listeners cost ten calls and little else. What a listener needs beyond a plain call
(``once`` or ``times=``, ``retries``, the ``propagate`` policy, being async and queued) is
written out for that listener alone, so the common case carries none of it. A plan of exactly
one plain sync listener compiles to the listener itself: ``emit()`` calls it inside its own
``try`` (one call fewer), and records its failure.

The source is registered with :mod:`linecache` under a name such as
``<eventbus: emit('order.paid') 3f2a9c1e>``, so tracebacks through it show its lines, for as
long as its code lives (see :func:`~eventbus._tracebacks.register_source`). Print it with
``bus._dispatch_source(OrderPaid)``. Measured against the alternatives (a closure looping over
a tuple, a chain of nested closures), generated source is the fastest by far, and reads best in
a traceback.

A subscription per request (``wait_for()``, ``subscribed()``) changes the plan of one event
type twice per request: the :class:`DispatchCache` keeps the functions of the last few plans
of each event type, so the plan of before the request gets its function back, and the code
of a source compiled recently is reused across buses. A kept function is let go of as soon as
one of its listeners is unsubscribed (its plan cannot come back), so that it keeps no
listener alive, nor what the listener holds.

A call limit (``times=``, ``once``) is a step written only for the listeners that have one,
and so is a call count (``c0.calls += 1``): only while the bus counts calls (see
:mod:`eventbus._core._counting`), which also turns the one-listener shortcut off. Causality costs no
line: the emit in progress is the bus's :class:`~eventbus._core._nesting.Nesting`
state, which ``emit()`` sets around the call. Instrumentation wraps the listener functions a
plan holds (see :mod:`eventbus.interop.opentelemetry`), so a bus without it runs exactly the
code it ran before. Call order is the table's business: plans arrive ordered.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import inspect
from collections.abc import Callable
from types import CodeType
from typing import Any, Protocol

from .._events import Event
from .._exceptions import BusNotRunningError, ListenerErrors
from .._patterns import is_pattern, matches
from .._tracebacks import register_source
from ._calls import add_note_once, call_sync
from ._counting import CallCounts
from ._emission import Emission
from ._listeners import ErrorPolicy, Listener
from ._nesting import Nesting
from ._observe import Observer
from ._sink import FailureSink, awaitable_error
from ._table import ListenerTable, Plan

__all__ = ["Compiled", "DispatchCache", "Dispatcher", "Runtime", "compile_plan"]

Dispatcher = Callable[[Any], object]  # called with an Event only; Any keeps emit() free of casts
_Entry = tuple[Dispatcher, "Compiled"]

#: Compiled code of the most recent dispatch sources, by source text: a plan compiled again
#: (the same listeners subscribed again, as a subscription per request does) reuses it.
CACHED_CODES = 256
#: Functions a bus keeps per event type for plans that may come back (see :class:`DispatchCache`)
RECENT_PLANS = 8
_codes: collections.OrderedDict[str, CodeType] = collections.OrderedDict()


@dataclasses.dataclass(frozen=True, slots=True)
class Compiled:
    """What ``emit()`` needs beside the callable of one event type.

    ``single`` is the listener whose function *is* the callable (``emit()`` records its
    failures); otherwise the callable is generated and records its own.
    """

    plan: Plan
    single: Listener | None
    source: str | None

    def returned(self, value: object) -> None:
        """What the callable returned: a lone listener's awaitable is its error (never awaited).

        :raises TypeError: naming the listener, after closing the awaitable
        """
        if self.single is not None and inspect.isawaitable(value):
            raise awaitable_error(self.single.name, value)

    def record(self, sink: FailureSink, nesting: Nesting, exc: Exception) -> None:
        """Record what the lone listener raised (``emit()`` called it directly, in *nesting*)."""
        assert self.single is not None
        sink.capture(nesting.emission(), self.single, exc, 1)


class _Queue(Protocol):
    backoff: float

    @property
    def accepting(self) -> bool: ...

    @property
    def closing(self) -> bool: ...

    def submit(self, sub: Listener, emission: Emission) -> None: ...


class Runtime:
    """The parts of one bus that its emit paths use besides listeners (no reference to the bus)."""

    def __init__(
        self, nesting: Nesting, sink: FailureSink, queue: _Queue, table: ListenerTable
    ) -> None:
        self.nesting = nesting
        self.sink = sink
        self.queue = queue
        self.table = table

    def emission(self) -> Emission:
        """The emission in progress (a generated function runs inside its emit)."""
        return self.nesting.emission()

    def failed(self, sub: Listener, exc: Exception) -> None:
        """Record *sub*'s failure in the emission in progress (its failures share its ids)."""
        self.sink.capture(self.nesting.emission(), sub, exc, 1)

    def retrying(self, emission: Emission, sub: Listener) -> Exception | None:
        return call_sync(sub, emission, self.sink)[0]

    def submit(self, emission: Emission, sub: Listener) -> None:
        self.queue.submit(sub, emission)

    def require_running(self, event: Event, n_async: int) -> None:
        # While the bus is closing, each queued call is recorded as dropped instead.
        if not self.queue.accepting and not self.queue.closing:
            raise BusNotRunningError(event.__event_name__, n_async)


class DispatchCache:
    """The compiled dispatch of each event type, rebuilt after any change of what it used.

    ``entries`` maps an event type to ``(callable, Compiled)``; ``emit()`` reads it directly.
    It is cleared when the subscriptions change (the table watches it), the bus's default
    error policy does, or call counting is turned on or off.
    """

    def __init__(self, runtime: Runtime, policy: ErrorPolicy) -> None:
        self.runtime = runtime
        self._policy = policy
        self.entries: dict[type, tuple[Dispatcher, Compiled]] = {}
        runtime.table.watch(self.entries)
        runtime.table.on_forget(self.forget)
        #: per event name, the entries of the last plans compiled, by plan (listeners by
        #: identity, with their calls): a plan that comes back gets its function back
        self._recent: dict[str, collections.OrderedDict[tuple[Any, ...], _Entry]] = {}
        self._observer: Observer | None = None  # wraps each entry as it is compiled
        #: the call counters, kept while counting is off
        self.counts = CallCounts()
        self._counting = False
        #: ``emit_async()`` must take its observed or counted path (one test per call)
        self.hooked = False

    @property
    def observer(self) -> Observer | None:
        return self._observer

    @observer.setter
    def observer(self, observer: Observer | None) -> None:
        self._observer = observer
        self.hooked = observer is not None or self._counting
        self._recent.clear()

    @property
    def counting(self) -> bool:
        """Whether calls are counted: the dispatch functions are recompiled when it changes."""
        return self._counting

    @counting.setter
    def counting(self, on: bool) -> None:
        if on is not self._counting:
            self._counting = on
            self.hooked = self._observer is not None or on
            self.runtime.sink.counts = self.counts if on else None
            self.clear()

    @property
    def policy(self) -> ErrorPolicy:
        return self._policy

    @policy.setter
    def policy(self, policy: ErrorPolicy) -> None:
        self._policy = policy
        self.clear()

    def clear(self) -> None:
        """Forget every function: what they were compiled with changed."""
        self.entries.clear()
        self._recent.clear()

    def get(self, cls: type[Event]) -> tuple[Dispatcher, Compiled]:
        """The entry of *cls*, compiled on first use.

        :raises UnknownEventError: if *cls* is not declared in the bus's registry
        """
        entry = self.entries.get(cls)
        if entry is None:
            plan = self.runtime.table.plan(cls)
            key = (cls, plan.listeners, tuple(sub.call for sub in plan.listeners))
            recent = self._recent.get(cls.__event_name__)
            if recent is None:
                recent = self._recent[cls.__event_name__] = collections.OrderedDict()
            entry = recent.get(key)
            if entry is None:
                entry = self._compile(plan)
                recent[key] = entry
                while len(recent) > RECENT_PLANS:
                    recent.popitem(last=False)
            else:
                recent.move_to_end(key)
            self.entries[cls] = entry
        return entry

    def forget(self, sub: Listener) -> None:
        """*sub* was unsubscribed: no plan with it can come back (a listener subscribed again
        is another object), so the functions of those plans go, with their hold on it."""
        if is_pattern(sub.pattern):
            names = [n for n in list(self._recent) if matches(sub.pattern, n)]
        else:
            names = [sub.pattern]
        for name in names:
            recent = self._recent.get(name)
            if recent is not None:
                for key in [key for key in list(recent) if sub in key[1]]:
                    recent.pop(key, None)

    def _compile(self, plan: Plan) -> tuple[Dispatcher, Compiled]:
        counts = self.counts if self._counting else None
        entry = compile_plan(plan, self._policy, self.runtime, counts)
        if self._observer is not None:
            call, compiled = entry
            entry = (self._observer.dispatch(plan, call, compiled.single is not None), compiled)
        return entry


def _noted(exc: Exception, sub: Listener) -> Exception:
    add_note_once(exc, sub.name)
    return exc


def compile_plan(
    plan: Plan, policy: ErrorPolicy, runtime: Runtime, counts: CallCounts | None = None
) -> tuple[Dispatcher, Compiled]:
    """The callable ``emit()`` runs for *plan* under the bus's default *policy*, counting
    each listener's calls in *counts* if given."""
    subs = plan.listeners
    if counts is None and len(subs) == 1 and _plain(subs[0], policy):
        return subs[0].call, Compiled(plan, subs[0], None)
    source = _source(plan, policy, counted=counts is not None)
    # Its own globals: a global load is the cheapest load of a name that is not a local, and a
    # closure would copy every cell into each call's frame.
    namespace: dict[str, Any] = {
        "__builtins__": __builtins__,
        "rt": runtime,
        "isawaitable": inspect.isawaitable,
        "awaitable_error": awaitable_error,
        "noted": _noted,
        "ListenerErrors": ListenerErrors,
        "remove": runtime.table.spend,
    }
    for i, sub in enumerate(subs):
        namespace[f"l{i}"] = sub.call
        namespace[f"s{i}"] = sub
        if counts is not None:
            namespace[f"c{i}"] = counts.cell(plan.event_type.__event_name__, sub.name)
    exec(_code(plan, source), namespace)
    fn: Dispatcher = namespace[_function_name(plan)]
    return fn, Compiled(plan, None, source)


def _code(plan: Plan, source: str) -> CodeType:
    """The module code defining *plan*'s function: compiled once per source text."""
    code = _codes.get(source)
    if code is not None:
        _codes.move_to_end(source)
        return code
    digest = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()[:8]
    filename = f"<eventbus: emit({plan.event_type.__event_name__!r}) {digest}>"
    code = compile(source, filename, "exec")
    # The source stays in linecache while its function's code lives (a traceback captured
    # through it holds that code): the text of such a traceback does not depend on when it
    # is rendered.
    register_source(filename, source, next(c for c in code.co_consts if type(c) is CodeType))
    _codes[source] = code
    while len(_codes) > CACHED_CODES:
        _codes.popitem(last=False)
    return code


def _function_name(plan: Plan) -> str:
    return "emit_" + plan.event_type.__event_name__.replace(".", "_").replace("-", "_")


def _plain(sub: Listener, policy: ErrorPolicy) -> bool:
    """A listener needing nothing but a call in a ``try``: sync, captured, no once or retries."""
    return (
        not sub.is_async
        and sub.times is None
        and sub.retries == 0
        and (sub.errors or policy) == "capture"
    )


def _source(plan: Plan, policy: ErrorPolicy, *, counted: bool) -> str:
    ename = plan.event_type.__event_name__
    subs = plan.listeners
    propagate = any((s.errors or policy) == "propagate" for s in subs)
    eager = any(s.is_async or s.retries for s in subs)
    n_async = sum(1 for s in subs if s.is_async)
    count = f"{len(subs)} listener{'s' if len(subs) != 1 else ''}"
    body = [f'"""emit({ename!r}): {count}, in order (generated by eventbus._core._compiler)."""']
    if n_async:
        body.append(f"rt.require_running(event, {n_async})")
    if eager:
        body.append("emission = rt.emission()")
    if propagate:
        body.append("raised = []")
    for i, sub in enumerate(subs):
        body += _step(i, sub, (sub.errors or policy) == "propagate", counted)
    if propagate:
        body += ["if raised:", f"    raise ListenerErrors.for_event({ename!r}, raised)"]
    lines = [f"def {_function_name(plan)}(event):"] + [
        f"    {line}" if line else "" for line in body
    ]
    return "\n".join(lines) + "\n"


def _step(i: int, sub: Listener, propagate: bool, counted: bool) -> list[str]:
    """The lines that call listener *i* and deal with its outcome (and count the call)."""
    traits = ["async: queued for the workers" if sub.is_async else "sync"]
    if sub.times is not None:
        traits.append("once" if sub.once else f"times={sub.times}")
    if sub.retries:
        traits.append(f"retries={sub.retries}")
    if propagate:
        traits.append("propagate")
    lines = [f"# {i + 1}. {sub.name!r} ({', '.join(traits)})"]
    if sub.is_async:
        call = [f"rt.submit(emission, s{i})"]
    elif sub.retries:
        call = [f"exc = rt.retrying(emission, s{i})"]
        if propagate:
            call += ["if exc is not None:", f"    raised.append(noted(exc, s{i}))"]
    else:
        call = [
            "try:",
            f"    if (value := l{i}(event)) is not None and isawaitable(value):",
            f"        raise awaitable_error(s{i}.name, value)",
            "except Exception as exc:",
            f"    rt.failed(s{i}, exc)",
        ]
        if propagate:
            call.append(f"    raised.append(noted(exc, s{i}))")
    if counted:
        call.insert(0, f"c{i}.calls += 1")
    if sub.times is not None:
        # A nested emit may have taken its last call already; then it is not this emit's.
        call = [f"if s{i}.claim():", f"    if not s{i}.left:", f"        remove(s{i})"] + [
            f"    {line}" for line in call
        ]
    return lines + call
