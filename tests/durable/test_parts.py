"""The small parts of durable events, without servers: keys, envelopes, options, the client
factory's configuration, and what ``import eventbus`` loads."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from datetime import timedelta

import pytest

from eventbus import FailureRecord
from eventbus.durable import DeadInfo, DurableOptions, Envelope, EnvelopeError, StreamKeys
from eventbus.durable._keys import group_name
from eventbus.durable._link import DurableLink, failure_id, link_of, parse_note


def test_every_key_of_an_event_shares_its_hash_tag() -> None:
    keys = StreamKeys("app")
    made = [
        keys.stream("order.paid"),
        keys.dead("order.paid"),
        keys.redeliver("order.paid", "billing:grant"),
        keys.published("order.paid", "e1"),
        keys.janitor("order.paid"),
    ]
    assert made == [
        "app:evt:{order.paid}",
        "app:evt:{order.paid}:dlq",
        "app:evt:{order.paid}:re:billing:grant",
        "app:evt:{order.paid}:pub:e1",
        "app:evt:{order.paid}:janitor",
    ]
    assert {k[k.index("{") : k.index("}") + 1] for k in made} == {"{order.paid}"}
    assert [keys.parse(k) for k in made[:3]] == [
        ("order.paid", "stream"),
        ("order.paid", "dlq"),
        ("order.paid", "re:billing:grant"),
    ]
    assert keys.parse(made[3]) is None and keys.parse("other:evt:{x}") is None


@pytest.mark.parametrize(
    ("kind", "value", "message"),
    [
        pytest.param("prefix", "a{b}", "prefix 'a{b}' contains '{'", id="brace"),
        pytest.param("service", "my service", "service 'my service' contains ' '", id="space"),
        pytest.param("service", "", "service '' must be a non-empty str", id="empty"),
    ],
)
def test_key_parts_are_checked(kind: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        if kind == "prefix":
            StreamKeys(value)
        else:
            group_name(value, "listener")


def test_an_envelope_round_trips_and_names_what_is_wrong() -> None:
    env = Envelope(
        event_id="e1", name="order.paid", payload="{}", seq=3, occurred_at="t", headers='{"a": "b"}'
    )
    assert Envelope.from_fields("1-0", env.fields()) == env
    assert "aggregate_key" not in env.fields()
    with pytest.raises(EnvelopeError, match=r"'1-0' is not an event envelope: version None"):
        Envelope.from_fields("1-0", {"payload": "{}"})
    with pytest.raises(EnvelopeError, match="field 'seq' is missing"):
        Envelope.from_fields("1-0", {k: v for k, v in env.fields().items() if k != "seq"})
    info = DeadInfo(group="g", entry_id="1-0", deliveries=5, error="E: x", failure_id="f")
    assert DeadInfo.from_fields({**env.fields(), **info.fields()}) == info
    assert DeadInfo.from_fields(env.fields()) is None


def test_dead_failures_are_identified_by_group_and_entry() -> None:
    assert failure_id("g", "s", "1-0") == failure_id("g", "s", "1-0")
    assert failure_id("g", "s", "1-0") != failure_id("h", "s", "1-0")
    assert parse_note("durable group=g:l stream=s entry=1-0 deliveries=5 seq=7") == {
        "group": "g:l",
        "stream": "s",
        "entry": "1-0",
        "deliveries": "5",
        "seq": "7",
    }
    assert parse_note("retry: listener gone") is None and parse_note(None) is None


def test_a_failure_row_links_to_its_group_by_its_columns_or_an_old_rows_note() -> None:
    rec = FailureRecord.minimal(
        event_name="order.paid", event_id="e1", listener="l", exc=ValueError("x"), attempts=5
    )
    assert link_of(rec) is None and rec.durable_group is None  # an in-process failure
    link = DurableLink("g:l", "s", "1-0", 5, 7, "2026-01-01T00:00:00+00:00")
    assert link.note() == (
        "durable group=g:l stream=s entry=1-0 deliveries=5 seq=7 "
        "occurred_at=2026-01-01T00:00:00+00:00"
    )
    assert link_of(rec.replace(note=link.note(), **link.columns())) == link
    assert link_of(rec.replace(**link.columns(), note="an operator's words")) == replace(
        link, occurred_at=None
    )
    assert link_of(rec.replace(note=link.note())) == link  # written before the columns


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"retry_backoff": 5.0, "visibility": 2.0}, "at most visibility=2.0", id="r"),
        pytest.param({"publish_key_ttl": 50.0, "lease": 30.0}, "exceed twice lease=30.0", id="t"),
        pytest.param({"maxlen": 10}, r"maxlen=10 must be None or >= 100", id="maxlen"),
        pytest.param({"max_deliveries": 0}, "max_deliveries", id="deliveries"),
        pytest.param({"retention": timedelta(0)}, "retention > 0", id="retention"),
        pytest.param({"db_timeout": 0.0}, "db_timeout must be > 0", id="db_timeout"),
        pytest.param({"backlog_high": 0}, r"backlog_high=0 must be None or >= 1", id="backlog"),
    ],
)
def test_options_that_break_a_guarantee_are_refused(
    options: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        DurableOptions(**options)  # type: ignore[arg-type]


def test_retry_delays_double_up_to_the_visibility_time() -> None:
    opts = DurableOptions(retry_backoff=1.0, visibility=5.0)
    assert [opts.retry_delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert opts.settle == 2 * opts.lease


def test_importing_eventbus_loads_neither_redis_nor_sqlalchemy() -> None:
    code = (
        "import sys, eventbus, eventbus.cli\n"
        "class Paid(eventbus.Event, name='x.paid', durable=True):\n"
        "    n: int\n"
        "bus = eventbus.EventBus()\n"
        "print(sorted(m for m in ('redis', 'sqlalchemy', 'eventbus.durable') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
