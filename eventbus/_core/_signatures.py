"""Listener signatures, checked once at subscription so that a wrong one fails at ``on()``.

A listener is called as ``fn(event)`` (a durable one may take ``tx`` as well). A function that
cannot be called that way would fail on every emit, far from the line that subscribed it; a
generator function is worse: calling it only makes a generator, so its body never runs and
nothing says so. Both are refused here, with one line naming the listener and the reason, as
the scheduler refuses a sync job. The emit path itself checks nothing.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["check_listener_signature"]

_EVENT = object()
_TX = object()


def check_listener_signature(
    fn: Callable[..., Any], shown: str, *, durable: bool = False, tx_positional: bool = False
) -> None:
    """Refuse *fn* (shown as *shown*) unless ``fn(event)`` is a call it accepts and runs.

    :param durable: a durable listener, which may take ``tx`` (passed as ``tx=``, or second
        if *tx_positional*)
    :raises TypeError: one line naming the listener and what is wrong
    """
    kind = "durable listener" if durable else "listener"
    target = _call_target(fn)
    if inspect.isasyncgenfunction(target) or inspect.isgeneratorfunction(target):
        what = "an async generator" if inspect.isasyncgenfunction(target) else "a generator"
        raise TypeError(
            f"{kind} {shown!r} is {what} function: calling it only makes {what}, so its body "
            "would never run; use 'return' (or nothing) instead of 'yield'"
        )
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    params = signature.parameters
    tx = params.get("tx")
    if tx is not None and not durable and _required(tx):
        raise TypeError(
            f"{kind} {shown!r} takes 'tx', which only durable listeners get "
            "(on(E, fn, durable=True)); an in-process listener is called with the event alone"
        )
    takes_tx = durable and tx is not None
    args: tuple[object, ...] = (_EVENT, _TX) if takes_tx and tx_positional else (_EVENT,)
    kwargs: dict[str, object] = {"tx": _TX} if takes_tx and not tx_positional else {}
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        raise TypeError(
            f"{kind} {shown!r} cannot be called with the event: {_why(params, takes_tx)}"
        ) from None


def _call_target(fn: Callable[..., Any]) -> object:
    """The function a call of *fn* runs first: through partials, and an instance's ``__call__``.

    ``__wrapped__`` is not followed: a decorator may well consume a generator it wraps.
    """
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.isroutine(fn) or isinstance(fn, type) or not callable(fn):
        return fn
    return type(fn).__call__


def _required(param: inspect.Parameter) -> bool:
    return param.default is inspect.Parameter.empty and param.kind not in (
        inspect.Parameter.VAR_POSITIONAL,
        inspect.Parameter.VAR_KEYWORD,
    )


def _why(params: Any, takes_tx: bool) -> str:
    """What about *params* makes ``fn(event)`` fail, in a few words."""
    positional = [
        p
        for p in params.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "tx"
    ]
    if not positional and not any(p.kind is p.VAR_POSITIONAL for p in params.values()):
        return "it takes no parameter; give it one for the event (def fn(event): ...)"
    required = [p.name for p in positional if _required(p)]
    if len(required) > 1:
        names = ", ".join(repr(n) for n in required[1:])
        return f"it requires {names} after the event; give them defaults or remove them"
    keyword = [
        p.name
        for p in params.values()
        if p.kind is p.KEYWORD_ONLY and _required(p) and not (takes_tx and p.name == "tx")
    ]
    if keyword:
        names = ", ".join(repr(n) for n in keyword)
        return f"it requires the keyword-only {names}; give them defaults or remove them"
    return "its parameters do not accept a single positional argument"
