"""``eventbus schema dump`` and ``schema check``: a table of changes to durable events, each
dumped from one module, checked against another, and classified (exit code and rule)."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from eventbus._cli import main

HEAD = """\
from typing import Any
from eventbus import Event, EventBus, EventRegistry, upcaster
reg = EventRegistry()
"""
TAIL = "bus = EventBus(reg)\n"

V1 = """
class Paid(Event, name="order.paid", registry=reg, durable=True):
    order_id: int
    note: str = ""
"""


def paid(
    body: str, *, version: int = 1, durable: bool = True, extra: str = "", strict: bool = False
) -> str:
    unknown = ', unknown_fields="reject"' if strict else ""
    return (
        f'\nclass Paid(Event, name="order.paid", registry=reg, durable={durable}, '
        f"version={version}{unknown}):\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "\n"
        + extra
    )


def caster(from_version: int) -> str:
    return (
        f'\n@upcaster("order.paid", from_version={from_version}, registry=reg)\n'
        f"def up{from_version}(d: dict[str, Any]) -> dict[str, Any]:\n    return d\n"
    )


# (id, old module body, new module body, mode, exit code, what the report says)
CASES = [
    ("new optional field", V1, paid("order_id: int\nnote: str = ''\ncurrency: str = 'EUR'"),
     "full", 0, "compatible  order.paid: optional field 'currency' added"),
    ("removed optional field", V1, paid("order_id: int"),
     "full", 0, "compatible  order.paid: optional field 'note' removed"),
    ("changed default", V1, paid("order_id: int\nnote: str = 'n/a'"),
     "full", 0, "compatible  order.paid: field 'note' default '' -> 'n/a'"),
    ("reordered fields", V1, paid("note: str = ''\norder_id: int"),
     "full", 0, "no changes"),
    ("new event", V1, V1 + '\nclass Shipped(Event, name="order.shipped", registry=reg, '
     "durable=True):\n    order_id: int\n",
     "full", 0, "compatible  order.shipped: new event"),
    ("new upcaster", paid("order_id: int", version=2), paid("order_id: int", version=2)
     + caster(1), "full", 0, "compatible  order.paid: new upcaster from version 1"),
    ("version raised with an upcaster", V1,
     paid("order_id: int\nnote: str = ''\ncents: int", version=2) + caster(1),
     "full", 0, "field 'cents' added, filled by an upcaster"),
    ("removed field without default", V1, paid("note: str = ''"),
     "full", 1, ("BREAKING    order.paid: field 'order_id' removed [a removed field that has "
     "no default; breaks forward]")),
    ("renamed field", V1, paid("order_ref: int\nnote: str = ''"),
     "full", 1, "field 'order_id' renamed 'order_ref' [a renamed field without an upcaster"),
    ("new field without default", V1, paid("order_id: int\nnote: str = ''\ncents: int"),
     "full", 1, "field 'cents' added without a default [a new field without a default"),
    ("field made required", V1, paid("order_id: int\nnote: str"),
     "full", 1, "field 'note' made required [a field made required"),
    ("changed type", V1, paid("order_id: str\nnote: str = ''"),
     "full", 1, "field 'order_id': integer -> string [a changed type"),
    ("durable event removed", V1, "",
     "full", 1, "order.paid: removed [a durable event removed"),
    ("made in-process", V1, paid("order_id: int\nnote: str = ''", durable=False),
     "full", 1, "order.paid: no longer durable [a durable event made in-process"),
    ("version lowered", paid("order_id: int", version=2), paid("order_id: int"),
     "full", 1, "version 2 -> 1 [a version lowered"),
    ("version raised without upcaster", V1, paid("order_id: int\nnote: str = ''", version=2),
     "full", 1, ("version 1 -> 2 with no upcaster from version 1 [a version raised without an "
     "upcaster from the previous one")),
    ("removed field, backward only", V1, paid("note: str = ''"),
     "backward", 0, ("compatible  order.paid: field 'order_id' removed [a removed field that "
     "has no default; breaks forward] (breaks forward only)")),
    ("new required field, forward only", V1, paid("order_id: int\nnote: str = ''\ncents: int"),
     "forward", 0, "(breaks backward only)"),
    ("new required field, backward", V1, paid("order_id: int\nnote: str = ''\ncents: int"),
     "backward", 1, "BREAKING"),
    # an upcaster removed: stored payloads of its version are no longer brought up to date
    ("removed upcaster", paid("order_id: int", version=3) + caster(1) + caster(2),
     paid("order_id: int", version=3) + caster(2),
     "full", 1, ("BREAKING    order.paid: upcaster from version 1 removed [an upcaster removed; "
     "breaks backward]")),
    ("removed upcaster, backward", paid("order_id: int", version=3) + caster(1) + caster(2),
     paid("order_id: int", version=3) + caster(2), "backward", 1, "BREAKING"),
    ("removed upcaster, forward only", paid("order_id: int", version=3) + caster(1) + caster(2),
     paid("order_id: int", version=3) + caster(2), "forward", 0, "(breaks backward only)"),
    # a changed type an upcaster converts: new code reads old values, old code cannot
    ("converted type", V1, paid("order_id: str\nnote: str = ''", version=2) + caster(1),
     "full", 1, ("BREAKING    order.paid: field 'order_id': integer -> string (an upcaster "
     "converts) [a changed type an upcaster converts; breaks forward]")),
    ("converted type, backward only", V1,
     paid("order_id: str\nnote: str = ''", version=2) + caster(1),
     "backward", 0, "(breaks forward only)"),
    ("changed type, backward", V1, paid("order_id: str\nnote: str = ''"),
     "backward", 1, "BREAKING"),
    ("made required with an upcaster", V1, paid("order_id: int\nnote: str", version=2)
     + caster(1), "full", 0, "compatible  order.paid: field 'note' made required, filled by"),
    # a durable event removed or made in-process: new code stores none for old code to read
    ("durable event removed, forward", V1, "",
     "forward", 0, "(breaks backward only)"),
    ("made in-process, forward", V1, paid("order_id: int\nnote: str = ''", durable=False),
     "forward", 0, "(breaks backward only)"),
    # unknown_fields="reject": old code refuses what new code adds, new code what old code stored
    ("strict: optional field added", paid("order_id: int", strict=True),
     paid("order_id: int\nx: int = 0", strict=True),
     "full", 1, ("BREAKING    order.paid: field 'x' added; old code rejects it [a field added "
     "where old code rejects unknown fields; breaks forward]")),
    ("strict: optional field removed", paid("order_id: int\nnote: str = ''", strict=True),
     paid("order_id: int", strict=True),
     "full", 1, ("BREAKING    order.paid: field 'note' removed; new code rejects it in stored "
     "events [a field removed where new code rejects unknown fields; breaks backward]")),
    ("strict: optional field removed, forward", paid("order_id: int\nnote: str = ''",
     strict=True), paid("order_id: int", strict=True), "forward", 0, "(breaks backward only)"),
    ("strict: optional field removed by an upcaster", paid("order_id: int\nnote: str = ''",
     strict=True), paid("order_id: int", strict=True, version=2) + caster(1),
     "backward", 0, "optional field 'note' removed"),
    ("strict: required field removed, forward", paid("order_id: int\nnote: str", strict=True),
     paid("order_id: int", strict=True), "forward", 1, "[a removed field that has no default"),
    ("strict: required field added, backward", paid("order_id: int", strict=True),
     paid("order_id: int\ncents: int", strict=True), "backward", 1,
     "[a new field without a default"),
    ("strict: version raised", paid("order_id: int", strict=True),
     paid("order_id: int", strict=True, version=2) + caster(1),
     "full", 1, ("BREAKING    order.paid: version 1 -> 2; old code cannot read version 2 [a "
     "version raised where old code rejects unknown fields; breaks forward]")),
    ("strict: version raised, backward", paid("order_id: int", strict=True),
     paid("order_id: int", strict=True, version=2) + caster(1), "backward", 0, "compatible"),
]  # fmt: skip

_modules = itertools.count()


def write_module(where: Path, body: str) -> str:
    name = f"schema_case_{next(_modules)}"
    (where / f"{name}.py").write_text(HEAD + body + TAIL)
    return name


@pytest.mark.parametrize(
    ("old", "new", "mode", "code", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_each_change_is_classified(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    old: str,
    new: str,
    mode: str,
    code: int,
    says: str,
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    before, after = write_module(tmp_path, old), write_module(tmp_path, new)
    assert main(["schema", "dump", "--app", f"{before}:bus"]) == 0
    snap = tmp_path / "events.schema.json"
    snap.write_text(capsys.readouterr().out)
    got = main(["schema", "check", "--app", f"{after}:bus", str(snap), "--mode", mode])
    out = capsys.readouterr().out
    assert (got, says in out) == (code, True), out


def test_the_table_covers_every_rule() -> None:
    from eventbus._compat import RULES

    said = " ".join(f"{c[5]};" for c in CASES)  # a rule's text ends where the case's does
    covered = [key for key, (text, _) in RULES.items() if f"[{text};" in said]
    assert len(CASES) >= 12
    assert set(RULES) - set(covered) == set()


def test_a_field_added_where_old_code_rejects_unknown_fields_breaks_forward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    strict = V1.replace("durable=True", 'durable=True, unknown_fields="reject"')
    before = write_module(tmp_path, strict)
    after = write_module(
        tmp_path, strict.replace('note: str = ""', 'note: str = ""\n    x: int = 0')
    )
    main(["schema", "dump", "--app", f"{before}:bus"])
    snap = tmp_path / "s.json"
    snap.write_text(capsys.readouterr().out)
    exits = {}
    for mode in ("full", "forward", "backward"):
        exits[mode] = main(["schema", "check", "--app", f"{after}:bus", str(snap), "--mode", mode])
        assert "field 'x' added; old code rejects it" in capsys.readouterr().out
    assert exits == {"full": 1, "forward": 1, "backward": 0}


SNAPSHOT_BEFORE_REMOVED_UPCASTER: dict[
    str, Any
] = {  # as 'schema dump' wrote it before that rule existed
    "format": 1,
    "events": {
        "order.paid": {
            "version": 3,
            "durable": True,
            "unknown_fields": "ignore",
            "upcasters_from": [1, 2],
            "fields": {"order_id": {"schema": {"type": "integer"}, "required": True}},
        }
    },
}


def test_a_snapshot_records_upcasters_and_an_older_one_still_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    both = write_module(tmp_path, paid("order_id: int", version=3) + caster(1) + caster(2))
    one = write_module(tmp_path, paid("order_id: int", version=3) + caster(2))
    main(["schema", "dump", "--app", f"{both}:bus"])
    assert json.loads(capsys.readouterr().out) == SNAPSHOT_BEFORE_REMOVED_UPCASTER
    snap = tmp_path / "before.json"
    snap.write_text(json.dumps(SNAPSHOT_BEFORE_REMOVED_UPCASTER))
    assert main(["schema", "check", "--app", f"{one}:bus", str(snap)]) == 1
    assert "upcaster from version 1 removed" in capsys.readouterr().out
    # a snapshot without upcasters_from (hand-written, say) loads; nothing is taken as removed
    bare = json.loads(json.dumps(SNAPSHOT_BEFORE_REMOVED_UPCASTER))
    del bare["events"]["order.paid"]["upcasters_from"]
    snap.write_text(json.dumps(bare))
    assert main(["schema", "check", "--app", f"{one}:bus", str(snap)]) == 0
    assert "compatible  order.paid: new upcaster from version 2" in capsys.readouterr().out


def test_the_docs_table_gives_each_rule_its_directions() -> None:
    from eventbus._compat import RULES

    page = Path(__file__).parents[3] / "docs" / "evolving-events.md"
    rows = {}
    for line in page.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[3] and cells[1] in "✓✗" and cells[2] in "✓✗":
            rows[cells[3]] = {
                d for d, c in zip(("backward", "forward"), cells[1:3], strict=True) if c == "✗"
            }
    assert rows == {text: set(directions) for text, directions in RULES.values()}


def test_the_dump_is_stable_and_describes_each_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = write_module(tmp_path, paid("order_id: int\nwhen: 'datetime.datetime | None' = None",
                                      version=2) + caster(1))  # fmt: skip
    (tmp_path / f"{mod}.py").write_text("import datetime\n" + (tmp_path / f"{mod}.py").read_text())
    main(["schema", "dump", "--app", f"{mod}:bus"])
    first = capsys.readouterr().out
    main(["schema", "dump", "--app", f"{mod}:bus"])
    assert capsys.readouterr().out == first
    event = json.loads(first)["events"]["order.paid"]
    assert event == {
        "version": 2,
        "durable": True,
        "unknown_fields": "ignore",
        "upcasters_from": [1],
        "fields": {
            "order_id": {"schema": {"type": "integer"}, "required": True},
            "when": {
                "schema": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]},
                "required": False,
                "default": None,
            },
        },
    }


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = write_module(tmp_path, V1)
    assert main(["schema", "check", "--app", f"{mod}:bus", str(tmp_path / "none.json")]) == 2
    assert "error: snapshot" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"events": []}')
    assert main(["schema", "check", "--app", f"{mod}:bus", str(tmp_path / "bad.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "it is not an events snapshot" in err
    assert main(["schema", "dump", "--app", "no_such_module_here:bus"]) == 2
    assert "error: --app 'no_such_module_here:bus' cannot be loaded" in capsys.readouterr().err


def test_failures_show_with_app_reads_the_payload_as_that_code_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from datetime import UTC, datetime

    import anyio

    from eventbus import FailureRecord
    from eventbus.backends.sql import SqlFailureStore

    monkeypatch.syspath_prepend(str(tmp_path))
    mod = write_module(
        tmp_path,
        paid("order_id: int\nnote: str = ''\ncurrency: str", version=2)
        + '\n@upcaster("order.paid", from_version=1, registry=reg)\n'
        "def up(d: dict[str, Any]) -> dict[str, Any]:\n    return {**d, 'currency': 'EUR'}\n",
    )
    now = datetime.now(UTC)
    row = FailureRecord(
        id="a" * 32, event_id="e1", event_name="order.paid", payload='{"order_id": 5}',
        payload_ok=True, listener="grant", error_type="RuntimeError", message="down",
        traceback="", first_failed_at=now, last_failed_at=now,
        note="durable group=svc:grant stream=s entry=1-0 deliveries=3 version=1",
    )  # fmt: skip
    url = f"sqlite+aiosqlite:///{tmp_path / 'f.db'}"

    async def write() -> None:
        async with SqlFailureStore(url) as store:
            store.record(row)

    anyio.run(write, backend="asyncio")
    assert main(["failures", "show", "--db", url, "aaaa", "--app", f"{mod}:bus"]) == 0
    out = capsys.readouterr().out
    assert "as --app reads it (stored at version 1, declared version 2):" in out
    assert "Paid(order_id=5, note='', currency='EUR')" in out
    assert main(["failures", "show", "--db", url, "aaaa", "--app", f"{mod}:bus", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["read_now"] == "Paid(order_id=5, note='', currency='EUR')"
