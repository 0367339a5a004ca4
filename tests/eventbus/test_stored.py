"""Reading stored payloads: the tolerant reader, versions and upcasters, and their errors at
declaration."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from eventbus import (
    Event,
    EventBus,
    EventRegistry,
    PayloadError,
    UnreadableVersionError,
    UpcasterError,
    decode_stored,
    upcaster,
)
from eventbus.durable._envelope import Envelope, EnvelopeError


def v1_v2() -> tuple[EventRegistry, EventRegistry]:
    old, new = EventRegistry(), EventRegistry()

    class PaidV1(Event, name="order.paid", registry=old, durable=True):
        order_id: int

    class PaidV2(Event, name="order.paid", registry=new, durable=True, version=2):
        order_id: int
        currency: str = "EUR"

    return old, new


def test_an_old_reader_ignores_a_new_field_and_logs_it_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import eventbus._stored

    # once per process: an earlier test of the session may have logged this field already
    monkeypatch.setattr(eventbus._stored, "_logged", set())
    old, _ = v1_v2()
    text = json.dumps({"order_id": 7, "currency": "USD"})
    with caplog.at_level(logging.INFO, logger="eventbus"):
        first = decode_stored(old, "order.paid", text, 2)
        again = decode_stored(old, "order.paid", text, 2)
    assert first.event == old.get("order.paid")(order_id=7)  # type: ignore[call-arg]
    assert first.ignored == again.ignored == ("currency",)
    lines = [r for r in caplog.records if "'currency'" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO


def test_a_new_reader_fills_a_missing_field_from_its_default() -> None:
    _, new = v1_v2()
    stored = decode_stored(new, "order.paid", '{"order_id": 7}', 1)
    assert stored.event == new.get("order.paid")(order_id=7, currency="EUR")  # type: ignore[call-arg]
    assert stored.ignored == ()


def test_errors_still_name_the_field() -> None:
    _, new = v1_v2()
    with pytest.raises(PayloadError, match="'order_id': is required but missing"):
        decode_stored(new, "order.paid", '{"currency": "USD"}', 2)
    with pytest.raises(PayloadError, match="'order_id'.*expected int"):
        decode_stored(new, "order.paid", '{"order_id": "seven"}', 2)


def test_a_type_that_rejects_unknown_fields_refuses_them_and_newer_versions() -> None:
    reg = EventRegistry()

    class Strict(Event, name="strict.thing", registry=reg, durable=True, unknown_fields="reject"):
        n: int

    with pytest.raises(PayloadError, match="'extra': is stored but .*Strict has no such field"):
        decode_stored(reg, "strict.thing", '{"n": 1, "extra": 2}', 1)
    with pytest.raises(UnreadableVersionError, match="deploy the code that declares version 2"):
        decode_stored(reg, "strict.thing", '{"n": 1}', 2)


def test_in_process_events_stay_strict() -> None:
    reg = EventRegistry()

    class Local(Event, name="local.thing", registry=reg):
        n: int

    assert Local.__unknown_fields__ == "reject"
    bus = EventBus(reg)
    with pytest.raises(PayloadError, match="unknown field 'extra'"):
        bus.emit("local.thing", {"n": 1, "extra": 2})
    with pytest.raises(PayloadError, match="no such field"):
        decode_stored(reg, "local.thing", '{"n": 1, "extra": 2}')


def test_upcasters_chain_from_the_stored_version_to_the_declared_one() -> None:
    reg = EventRegistry()

    class Paid(Event, name="order.paid", registry=reg, durable=True, version=3):
        order_id: int
        cents: int
        currency: str

    @upcaster("order.paid", from_version=1, registry=reg)
    def to_v2(old: dict[str, Any]) -> dict[str, Any]:
        return {"order_id": old["order_id"], "cents": round(old["amount"] * 100)}

    @upcaster("order.paid", from_version=2, registry=reg)
    def to_v3(old: dict[str, Any]) -> dict[str, Any]:
        return {**old, "currency": "EUR"}

    v1 = decode_stored(reg, "order.paid", '{"order_id": 1, "amount": 9.9}', 1).event
    v2 = decode_stored(reg, "order.paid", '{"order_id": 1, "cents": 990}', 2).event
    assert v1 == v2 == Paid(order_id=1, cents=990, currency="EUR")


def test_an_upcaster_that_fails_is_named() -> None:
    reg = EventRegistry()

    class Paid(Event, name="order.paid", registry=reg, durable=True, version=2):
        order_id: int

    @upcaster("order.paid", from_version=1, registry=reg)
    def broken(old: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("amount")

    with pytest.raises(PayloadError, match="upcaster .*broken' from version 1 failed: KeyError"):
        decode_stored(reg, "order.paid", '{"order_id": 1}', 1)


def test_bad_declarations_are_refused_at_once() -> None:
    reg = EventRegistry()

    class Paid(Event, name="order.paid", registry=reg, durable=True, version=3):
        order_id: int

    def noop(d: dict[str, Any]) -> dict[str, Any]:
        return d

    with pytest.raises(UpcasterError, match="'order.nope'.*no event of that name is declared"):
        upcaster("order.nope", from_version=1, registry=reg)(noop)
    with pytest.raises(UpcasterError, match="version 3: the event is at version 3"):
        upcaster("order.paid", from_version=3, registry=reg)(noop)
    with pytest.raises(UpcasterError, match="version 0: the event is at version 3"):
        upcaster("order.paid", from_version=0, registry=reg)(noop)
    upcaster("order.paid", from_version=1, registry=reg)(noop)
    with pytest.raises(UpcasterError, match="version 1: an upcaster for this version is declared"):
        upcaster("order.paid", from_version=1, registry=reg)(noop)
    assert list(reg.upcasters("order.paid")) == [1]  # the first is kept
    with pytest.raises(TypeError, match="version=0; a version is an int >= 1"):

        class Zero(Event, name="order.zero", registry=reg, version=0):
            pass

    with pytest.raises(TypeError, match="unknown_fields='drop'; it is 'ignore' or 'reject'"):

        class Drop(Event, name="order.drop", registry=reg, unknown_fields="drop"):
            pass

    assert "order.zero" not in reg and "order.drop" not in reg


def test_the_envelope_carries_the_version_and_reads_old_entries_as_version_1() -> None:
    env = Envelope(event_id="e", name="order.paid", payload="{}", seq=1, occurred_at="t", version=3)
    assert Envelope.from_fields("1-0", env.fields()).version == 3
    old = {k: v for k, v in env.fields().items() if k != "event_version"}  # written before
    assert Envelope.from_fields("1-0", old).version == 1
    with pytest.raises(EnvelopeError, match="event_version 'x' is not an int from 1 to 10"):
        Envelope.from_fields("1-0", {**env.fields(), "event_version": "x"})
    with pytest.raises(EnvelopeError, match="version '2', expected '1'"):  # the envelope's own
        Envelope.from_fields("1-0", {**env.fields(), "v": "2"})


def test_a_durable_failure_row_keeps_the_version_of_its_payload() -> None:
    from datetime import UTC, datetime

    from eventbus import FailureRecord
    from eventbus.durable._link import DurableLink, link_of

    link = DurableLink(group="svc:grant", stream="s", entry="1-0", deliveries=3, seq=9, version=2)
    now = datetime.now(UTC)
    rec = FailureRecord(
        id="f", event_id="e", event_name="order.paid", payload="{}", payload_ok=True,
        listener="grant", error_type="E", message="m", traceback="", first_failed_at=now,
        last_failed_at=now, note=link.note(),
    )  # fmt: skip
    assert link_of(rec) == link  # from the note: the row written before the columns
    assert link_of(rec.replace(**link.columns())) == link  # from the columns, the note's rest
    old = rec.replace(note=link.note().replace(" version=2", ""))  # before versions: unknown
    assert link_of(old) == DurableLink("svc:grant", "s", "1-0", 3, 9, None, None)


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", "5", "null"])
def test_the_strict_and_the_tolerant_reader_load_a_payload_through_one_helper(text: str) -> None:
    from eventbus import decode_payload
    from eventbus._codec import load_object

    _, new = v1_v2()
    errors = []
    for read in (
        lambda: load_object("order.paid", text),
        lambda: decode_payload(new, "order.paid", text),
        lambda: decode_stored(new, "order.paid", text, 1),
    ):
        with pytest.raises(PayloadError) as caught:
            read()
        errors.append(str(caught.value))
    assert errors[0] == errors[1] == errors[2]
    assert "stored payload is" in errors[0] and errors[0].count("\n") == 0
