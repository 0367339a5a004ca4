"""Why the bus generates source for dispatch: four ways to call 10 listeners, one ``try`` each.

Question: issue 12 asked to build one function per event type that calls its listeners in order
with a ``try`` per listener, as generated source (as ``dataclasses`` and ``attrs`` generate
``__init__``) or as nested closures, and to keep the faster. This times the function
``eventbus`` generates (listeners read from its own globals) against the same source reading
closure cells, a closure looping over a tuple, and a chain of nested closures (one per
listener), each called directly (no ``emit()`` around it), against a plain loop calling the
listeners. Every sample checks the listener call count.

Run: ``.venv/bin/python benchmarks/dispatch_styles.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from _events import Ping, registry
from _harness import (
    Row,
    SyncLoop,
    Table,
    Work,
    counted,
    environment,
    finish,
    parse_options,
    print_environment,
    run_sync_cases,
)

from eventbus import EventBus
from eventbus._core._compiler import compile_plan

LISTENERS = 10
Listener = Callable[[object], object]


def _failed(exc: Exception) -> None:
    raise AssertionError("no listener fails here") from exc


def generated(fns: Sequence[Listener]) -> Callable[[object], object]:
    """What the bus runs: its compiler's output for a plan of these listeners."""
    bus = EventBus(registry=registry)
    for i, fn in enumerate(fns):
        bus.on(Ping, fn, name=f"listener{i}")
    plan = bus._table.plan(Ping)  # private: the plan the bus would compile
    call, _ = compile_plan(plan, "capture", bus._compiled.runtime)
    return call


def generated_closure(fns: Sequence[Listener]) -> Callable[[object], object]:
    """The same straight-line source, reading listeners from closure cells instead of globals."""
    steps = "".join(
        f"        try:\n"
        f"            if (value := l{i}(event)) is not None and isawaitable(value):\n"
        f"                raise TypeError(value)\n"
        f"        except Exception as exc:\n"
        f"            failed(exc)\n"
        for i in range(len(fns))
    )
    params = ", ".join(["isawaitable", "failed"] + [f"l{i}" for i in range(len(fns))])
    source = f"def make({params}):\n    def dispatch(event):\n{steps}    return dispatch\n"
    namespace: dict[str, Any] = {}
    exec(source, {}, namespace)
    values = {f"l{i}": fn for i, fn in enumerate(fns)}
    fn: Callable[[object], object] = namespace["make"](inspect.isawaitable, _failed, **values)
    return fn


def looping_closure(fns: Sequence[Listener]) -> Callable[[object], object]:
    """One closure over a tuple of listeners (what the bus did before, for plain listeners)."""
    listeners = tuple(fns)
    isawaitable = inspect.isawaitable

    def dispatch(event: object) -> None:
        for fn in listeners:
            try:
                if (value := fn(event)) is not None and isawaitable(value):
                    raise TypeError(value)
            except Exception as exc:
                _failed(exc)

    return dispatch


def nested_closures(fns: Sequence[Listener]) -> Callable[[object], object]:
    """A chain of closures, each calling one listener in a ``try``, then the next link."""
    isawaitable = inspect.isawaitable

    def link(fn: Listener, rest: Callable[[object], object] | None) -> Callable[[object], object]:
        def dispatch(event: object) -> None:
            try:
                if (value := fn(event)) is not None and isawaitable(value):
                    raise TypeError(value)
            except Exception as exc:
                _failed(exc)
            if rest is not None:
                rest(event)

        return dispatch

    chain: Callable[[object], object] | None = None
    for fn in reversed(fns):
        chain = link(fn, chain)
    assert chain is not None
    return chain


def _calling(dispatch: Callable[[object], object]) -> SyncLoop:
    def loop(n: int) -> None:
        fn, ev = dispatch, Ping(n=1)
        for _ in range(n):
            fn(ev)

    return loop


def main() -> None:
    options = parse_options(__doc__)
    env = environment()
    print_environment(env)
    fns, calls = counted(LISTENERS)
    listeners = tuple(fns)
    ev = Ping(n=1)

    def direct(n: int) -> None:
        for _ in range(n):
            for fn in listeners:
                fn(ev)

    base = f"direct loop, {LISTENERS} listeners (baseline)"
    cases: dict[str, SyncLoop] = {
        base: direct,
        "generated source, listeners in its globals (the bus)": _calling(generated(fns)),
        "generated source, listeners in closure cells": _calling(generated_closure(fns)),
        "closure looping over a tuple": _calling(looping_closure(fns)),
        "nested closures, one per listener": _calling(nested_closures(fns)),
    }
    stats = run_sync_cases(cases, options, work=dict.fromkeys(cases, Work(calls, LISTENERS)))
    table = Table(f"One dispatch function, {LISTENERS} listeners", ratio_header="x loop")
    for label, s in stats.items():
        table.add(Row(label, s, None if label == base else base))
    print(table.render(), end="\n\n", flush=True)
    finish("dispatch_styles", [table], options, env)


if __name__ == "__main__":
    main()
