"""Failure records: the traceback taken cheaply when a listener fails, and the text it becomes.

The bus keeps a listener's traceback without formatting it and renders the text when the
record's ``traceback`` is first read. These tests pin that the text is exactly what
:func:`traceback.format_exception` gives, whatever the exception looks like, and that no frame
(with its locals) outlives the failure.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import pickle
import sys
import traceback
import weakref
from collections.abc import Callable, Iterator

import anyio
import pytest

from eventbus import Event, EventBus, FailureRecord, ListenerErrors, MemoryFailureStore
from eventbus._core import _compiler
from eventbus._failures import safe_str
from tests.eventbus.helpers import OrderPaid, OrderShipped, Recorder, reg

PAID = OrderPaid(order_id=1, user_id=7)
SHIPPED = OrderShipped(order_id=1)


def record_of(exc: BaseException) -> FailureRecord:
    return FailureRecord.from_exception(event=PAID, event_id="e1", listener="l", exc=exc)


def caught(fn: Callable[[], object]) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("did not raise")


def plain() -> None:
    raise ValueError("boom")


def with_cause() -> None:
    try:
        plain()
    except ValueError as exc:
        raise RuntimeError("wrapped") from exc


def with_context() -> None:
    try:
        plain()
    except ValueError:
        raise KeyError("while handling")  # noqa: B904 - the implicit context is the point


def suppressed_context() -> None:
    try:
        plain()
    except ValueError:
        raise KeyError("no context") from None


def group() -> None:
    errors = [e for e in (caught(plain), caught(with_cause)) if isinstance(e, Exception)]
    raise ExceptionGroup("several", [*errors, ExceptionGroup("inner", [TypeError("t")])])


def noted() -> None:
    exc = ValueError("with notes")
    exc.add_note("first note")
    raise exc


def syntax() -> None:
    compile("x = (1,\n", "<snippet>", "exec")


def deep(n: int = 30) -> None:
    if n:
        deep(n - 1)
    plain()


def caret_expression() -> None:
    values: dict[str, int] = {}
    print(values["a"] + values["b"])  # noqa: T201 - never prints: the first lookup fails


@pytest.mark.parametrize(
    "raiser",
    [
        pytest.param(plain, id="plain"),
        pytest.param(with_cause, id="cause"),
        pytest.param(with_context, id="context"),
        pytest.param(suppressed_context, id="suppressed-context"),
        pytest.param(group, id="exception-group"),
        pytest.param(noted, id="notes"),
        pytest.param(syntax, id="syntax-error"),
        pytest.param(deep, id="deep-stack"),
        pytest.param(caret_expression, id="carets"),
    ],
)
def test_traceback_text_is_what_format_exception_gives(raiser: Callable[[], None]) -> None:
    exc = caught(raiser)
    rec = record_of(exc)
    assert rec.traceback == "".join(traceback.format_exception(exc))


def test_a_bus_made_error_without_frames_is_one_line() -> None:
    rec = record_of(ValueError("no frames"))
    assert rec.traceback == "ValueError: no frames\n"


def test_sys_tracebacklimit_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    exc = caught(deep)
    monkeypatch.setattr(sys, "tracebacklimit", 3, raising=False)
    expected = "".join(traceback.format_exception(exc))
    assert record_of(exc).traceback == expected
    assert expected.count('File "') == 3


def test_a_note_added_after_recording_is_not_in_the_text() -> None:
    """Under "propagate" the bus adds ``listener: name`` after the record was made."""
    exc = caught(plain)
    expected = "".join(traceback.format_exception(exc))
    rec = record_of(exc)
    exc.add_note("listener: late")
    assert rec.traceback == expected


def test_text_survives_replace_asdict_equality_and_pickling() -> None:
    rec = record_of(caught(with_cause))
    text = "".join(traceback.format_exception(caught(with_cause)))
    assert dataclasses.asdict(rec)["traceback"].splitlines()[-1] == text.splitlines()[-1]
    copy = rec.replace(note="x")
    assert isinstance(copy.traceback, str) and copy.traceback == rec.traceback
    assert pickle.loads(pickle.dumps(rec)) == rec
    assert rec == dataclasses.replace(rec)


@pytest.fixture
def quiet_eventbus_log() -> Iterator[None]:
    """No log records: a record holds the exception, and pytest keeps records (all loggers)."""
    log = logging.getLogger("eventbus")
    disabled, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = disabled


@pytest.mark.usefixtures("quiet_eventbus_log")
@pytest.mark.parametrize("listeners", [1, 2], ids=["lone-listener", "generated-dispatch"])
async def test_a_recorded_failure_keeps_no_frame_alive(listeners: int) -> None:
    store = MemoryFailureStore()
    bus = EventBus(reg, store)
    refs: list[weakref.ref[object]] = []

    class Payload:
        pass

    def holds_a_local(e: OrderPaid) -> None:
        local = Payload()
        refs.append(weakref.ref(local))
        raise ValueError("boom")

    for i in range(listeners):
        bus.on(OrderPaid, holds_a_local, name=f"holder{i}")
    bus.emit(PAID)
    gc.collect()
    assert len(refs) == listeners
    assert all(ref() is None for ref in refs)  # the frames (and their locals) are gone
    records = await store.query()
    assert all("in holds_a_local" in r.traceback for r in records)


async def test_a_traceback_through_generated_dispatch_shows_its_source(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    def boom(e: OrderPaid) -> None:
        raise ValueError("boom")

    bus.on(OrderPaid, boom, name="first")
    bus.on(OrderPaid, boom, name="second", errors="propagate")
    with pytest.raises(ListenerErrors):
        bus.emit(PAID)
    first, second = sorted(await store.query(), key=lambda r: r.listener)
    assert "in emit_order_paid" in first.traceback
    assert "if (value := l0(event)) is not None" in first.traceback
    assert "if (value := l1(event)) is not None" in second.traceback
    assert "listener: second" not in second.traceback


class FormatsAtOnce(logging.Handler):
    """Keeps the traceback text of each logged failure as it reads at that moment."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        assert record.exc_info is not None
        self.texts.append(logging.Formatter().formatException(record.exc_info) + "\n")


async def test_the_stored_text_does_not_depend_on_when_it_is_read(
    store: MemoryFailureStore,
) -> None:
    """Regression test: the source of a generated dispatch function was dropped from
    linecache after 1,000 newer ones, so a traceback read later lost that frame's line."""
    import linecache

    bus = EventBus(reg, store)
    log = logging.getLogger("eventbus")
    at_once = FormatsAtOnce()
    log.addHandler(at_once)
    propagate, log.propagate = log.propagate, False
    try:
        bus.on(OrderPaid, Recorder().sync("first"), once=True)  # two: a generated function
        bus.on(OrderPaid, lambda e: 1 / 0, name="fails", once=True)
        bus.emit(PAID)
    finally:
        log.removeHandler(at_once)
        log.propagate = propagate
    assert len(at_once.texts) == 1
    for k in range(1_100):  # new dispatch sources, as subscriptions per request make them
        bus.on(OrderShipped, lambda e: None, name=f"tmp{k}")
        bus.on(OrderShipped, lambda e: None, name=f"tmp{k}b")
        bus.emit(SHIPPED)
        bus.off(OrderShipped, f"tmp{k}")
        bus.off(OrderShipped, f"tmp{k}b")
    gc.collect()
    [rec] = await store.query()
    assert "in emit_order_paid" in rec.traceback
    assert rec.traceback == at_once.texts[0]
    # and the sources of dispatch functions nothing refers to any more are let go: those
    # left are the compiled code kept for reuse, and the dispatch functions in use
    generated = [k for k in linecache.cache if str(k).startswith("<eventbus: emit(")]
    assert len(generated) <= _compiler.CACHED_CODES + 2


# -- failures that cannot be printed ------------------------------------------------------


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str")


class Unrepresentable(Unprintable):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def raises_unprintable(e: Event) -> None:
    raise Unprintable


async def async_raises_unprintable(e: Event) -> None:
    raise Unprintable


async def test_exception_with_failing_str_is_recorded_and_the_bus_survives(
    bus: EventBus, store: MemoryFailureStore, rec: Recorder
) -> None:
    """Regression test: building the record raised, to the publisher or into the task group."""
    bus.on(OrderShipped, raises_unprintable)
    bus.on(OrderShipped, rec.sync("after"))
    bus.emit(SHIPPED)
    assert rec.tags == ["after"]
    bus.on(OrderPaid, async_raises_unprintable)
    with anyio.fail_after(3):
        async with bus:
            bus.emit(PAID)
    recs = await store.query()
    assert [(r.error_type.rsplit(".", 1)[-1], r.message) for r in recs] == [
        ("Unprintable", "Unprintable()")
    ] * 2


def test_safe_str_falls_back_to_the_type_name() -> None:
    """Regression test: str() and repr() both raising must still give a message."""
    assert safe_str(Unrepresentable()) == "<unprintable Unrepresentable>"
