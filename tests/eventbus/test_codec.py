"""The payload codec: type-directed JSON that rebuilds the declared event type."""

from __future__ import annotations

import dataclasses
import enum
import json
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any, Literal
from zoneinfo import ZoneInfo

import pytest

from eventbus import Event, EventRegistry, PayloadError, UnknownEventError
from eventbus._codec import decode_payload, encode_payload
from eventbus.testing import unchecked_events

reg = EventRegistry()


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Line:
    sku: str
    qty: int
    price: Decimal


@dataclasses.dataclass(frozen=True)
class Address:
    city: str
    lines: tuple[Line, ...]
    since: date | None = None


class Scalars(Event, name="codec.scalars", registry=reg):
    i: int
    f: float
    s: str
    b: bool
    n: None
    d: Decimal
    dt: datetime
    day: date
    at: time
    u: uuid.UUID
    colour: Colour
    level: Level
    raw: bytes


class Containers(Event, name="codec.containers", registry=reg):
    ints: list[int]
    pair: tuple[int, str]
    many: tuple[Decimal, ...]
    by_id: dict[uuid.UUID, datetime]
    by_num: dict[int, list[Colour]]
    tags: frozenset[str]
    maybe: Decimal | None
    either: int | str
    lit: Literal["a", "b"]
    anything: Any


class Nested(Event, name="codec.nested", registry=reg):
    address: Address
    history: list[Address]
    extra: int = 0


class Opaque(Event, name="codec.opaque", registry=reg):
    thing: object


def _roundtrip(event: Event) -> Event:
    text, ok = encode_payload(event)
    assert ok, text
    json.loads(text)  # plain JSON
    return decode_payload(reg, event.__event_name__, text)


SCALARS = Scalars(
    i=-3,
    f=2.5,
    s="héllo",
    b=True,
    n=None,
    d=Decimal("9.90"),
    dt=datetime(2024, 3, 31, 1, 30, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    day=date(2024, 2, 29),
    at=time(12, 0, 1, 5),
    u=uuid.UUID(int=42),
    colour=Colour.BLUE,
    level=Level.HIGH,
    raw=b"\x00\xff",
)


def test_scalars_round_trip_with_exact_types() -> None:
    back = _roundtrip(SCALARS)
    assert back == SCALARS
    assert isinstance(back, Scalars)
    assert type(back.d) is Decimal and str(back.d) == "9.90"  # exact, trailing zero kept
    assert back.dt.utcoffset() == timedelta(hours=5, minutes=30)  # the offset is kept
    assert type(back.day) is date
    assert back.colour is Colour.BLUE and back.level is Level.HIGH


def test_json_is_plain_and_readable() -> None:
    text, ok = encode_payload(SCALARS)
    data = json.loads(text)
    assert ok
    assert data["d"] == "9.90"
    assert data["dt"] == "2024-03-31T01:30:00+05:30"
    assert data["u"] == "00000000-0000-0000-0000-00000000002a"
    assert data["colour"] == "blue" and data["level"] == 2


def test_zoneinfo_datetime_round_trips_to_the_same_instant() -> None:
    dt = datetime(2024, 7, 1, 12, 30, tzinfo=ZoneInfo("Europe/London"))
    event = SCALARS.__class__(**{**_fields(SCALARS), "dt": dt})
    back = _roundtrip(event)
    assert isinstance(back, Scalars)
    assert back.dt == dt and back.dt.utcoffset() == timedelta(hours=1)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(float("nan"), "nan", id="nan"),
        pytest.param(float("inf"), "inf", id="inf"),
        pytest.param(float("-inf"), "-inf", id="-inf"),
        pytest.param(3, "3.0", id="int-accepted-as-float"),
    ],
)
def test_special_floats_round_trip(value: float, expected: str) -> None:
    event = Scalars(**{**_fields(SCALARS), "f": value})
    back = _roundtrip(event)
    assert isinstance(back, Scalars)
    assert repr(back.f) == expected


def test_containers_round_trip() -> None:
    event = Containers(
        ints=[1, 2, 3],
        pair=(7, "x"),
        many=(Decimal("1.10"), Decimal("-0")),
        by_id={uuid.UUID(int=1): datetime(2024, 1, 1, tzinfo=UTC)},
        by_num={1: [Colour.RED], 20: []},
        tags=frozenset({"a", "b"}),
        maybe=None,
        either="seven",
        lit="b",
        anything={"k": [1, "two", None, 2.5]},
    )
    back = _roundtrip(event)
    assert back == event
    assert isinstance(back, Containers)
    assert type(back.pair) is tuple and type(back.many) is tuple
    assert type(back.tags) is frozenset
    assert list(back.by_num) == [1, 20]


@pytest.mark.parametrize(
    ("maybe", "either"),
    [
        pytest.param(Decimal("0.1"), 7, id="decimal-and-int"),
        pytest.param(None, "7", id="none-and-numeric-string"),
    ],
)
def test_unions_pick_the_option_that_fits(maybe: Decimal | None, either: int | str) -> None:
    event = Containers(
        ints=[],
        pair=(0, ""),
        many=(),
        by_id={},
        by_num={},
        tags=frozenset(),
        maybe=maybe,
        either=either,
        lit="a",
        anything=None,
    )
    back = _roundtrip(event)
    assert isinstance(back, Containers)
    assert (back.maybe, back.either) == (maybe, either)
    assert type(back.either) is type(either)


def test_nested_dataclasses_round_trip() -> None:
    home = Address(city="Lyon", lines=(Line(sku="A-1", qty=2, price=Decimal("3.50")),))
    event = Nested(
        address=home, history=[home, Address(city="Oslo", lines=(), since=date(2020, 1, 1))]
    )
    back = _roundtrip(event)
    assert back == event
    assert isinstance(back, Nested)
    assert type(back.address.lines[0].price) is Decimal


def test_a_value_that_does_not_fit_its_annotation_is_kept_as_repr() -> None:
    event = Opaque(thing={1, 2})  # a set under ``object``: no JSON form the decoder could rebuild
    text, ok = encode_payload(event)
    assert not ok
    assert text == repr(event)


def test_a_wrongly_typed_value_is_flagged_not_lost() -> None:
    with unchecked_events():  # built in production, where fields are not checked
        event = Scalars(**{**_fields(SCALARS), "i": "not an int"})
    text, ok = encode_payload(event)
    assert (ok, text) == (False, repr(event))


def test_encode_never_raises_even_when_repr_does() -> None:
    class Evil:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    event = Opaque(thing=Evil())
    text, ok = encode_payload(event)
    assert not ok
    assert "Opaque" in text


@pytest.mark.parametrize(
    ("text", "match"),
    [
        pytest.param("{not json", r"'codec\.nested'.*not JSON", id="not-json"),
        pytest.param("[1]", r"JSON list, not an object", id="not-object"),
        pytest.param('{"history": []}', r"field 'address': is required", id="missing"),
        pytest.param(
            '{"address": {"city": "x", "lines": []}, "history": [], "gone": 1}',
            r"field 'gone': is stored but Nested has no such field",
            id="unknown-field",
        ),
        pytest.param(
            '{"address": {"city": "x", "lines": [{"sku": "a", "qty": 1, "price": 2.5}]},'
            ' "history": []}',
            r"field 'address\.lines\[0\]\.price': cannot rebuild Decimal from 2\.5",
            id="nested-path",
        ),
        pytest.param(
            '{"address": {"city": "x", "lines": []}, "history": [], "extra": true}',
            r"field 'extra': cannot rebuild int from True",
            id="bool-is-not-int",
        ),
    ],
)
def test_decode_errors_name_the_event_and_the_field(text: str, match: str) -> None:
    with pytest.raises(PayloadError, match=match):
        decode_payload(reg, "codec.nested", text)


def test_decode_of_an_undeclared_event_raises_unknown_event() -> None:
    with pytest.raises(UnknownEventError, match="'codec.gone'"):
        decode_payload(reg, "codec.gone", "{}")


def test_defaults_fill_fields_missing_from_old_payloads() -> None:
    back = decode_payload(
        reg, "codec.nested", '{"address": {"city": "x", "lines": []}, "history": []}'
    )
    assert isinstance(back, Nested)
    assert back.extra == 0 and back.address.since is None


def _fields(event: Event) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
