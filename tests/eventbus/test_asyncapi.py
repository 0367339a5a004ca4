"""The AsyncAPI document, validated against the official AsyncAPI 3.0.0 JSON Schema (vendored
in ``tests/asyncapi_spec`` from the npm package ``@asyncapi/specs`` 6.11.1, Apache-2.0), for
the demo's bus and for every docs example that declares durable events."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from eventbus import Event, EventBus, EventRegistry, asyncapi_document
from eventbus._cli import main

ROOT = Path(__file__).resolve().parents[2]
SPEC = json.loads((ROOT / "tests" / "asyncapi_spec" / "asyncapi-3.0.0.json").read_text())
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def validate(doc: dict[str, Any]) -> None:
    jsonschema.Draft7Validator(SPEC).validate(doc)


def assert_complete(
    doc: dict[str, Any], durable: set[str], groups: frozenset[str] | set[str] = frozenset()
) -> None:
    """Every durable event has its channel, its message and its send operation; every
    consumer group its receive operation."""
    channels = {c["title"] for c in doc["channels"].values()}
    sends = {o["channel"]["$ref"] for o in doc["operations"].values() if o["action"] == "send"}
    receives = {o["title"] for o in doc["operations"].values() if o["action"] == "receive"}
    missing = durable - channels
    assert not missing, f"durable events missing from the AsyncAPI document: {sorted(missing)}"
    assert len(sends) == len(durable)
    assert groups <= receives
    assert durable <= {m["name"] for m in doc["components"]["messages"].values()}


def test_the_schema_catches_a_broken_document() -> None:  # the validator is not a no-op
    bus = EventBus(EventRegistry())
    doc = asyncapi_document(bus)
    validate(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate({**doc, "operations": {"x": {"action": "publish", "channel": {"$ref": "#/a"}}}})
    with pytest.raises(jsonschema.ValidationError):
        validate({**doc, "asyncapi": "2.6.0"})


def test_the_demo_document_is_valid_and_complete(tmp_path: Path) -> None:
    from domain.durable_demo import _REG, make_bus

    bus = make_bus("billing", "redis://127.0.0.1:1/0", str(tmp_path / "demo.db"))

    async def grant(e: Event) -> None:
        pass

    bus.on(_REG.get("order.paid"), grant, durable=True, name="rewards.grant")
    doc = asyncapi_document(bus)
    validate(doc)
    durable = {n for n in _REG.names() if _REG.get(n).__durable__}
    assert durable == {"order.paid"}
    assert_complete(doc, durable, {"billing:rewards.grant"})
    [channel] = [c for c in doc["channels"].values() if c["title"] == "order.paid"]
    assert channel["address"] == "eventbus:evt:{order.paid}"
    in_process = [m for m in doc["components"]["messages"].values() if m["name"] != "order.paid"]
    assert all(m["tags"] == [{"name": "in-process"}] for m in in_process)


def test_a_missing_durable_event_fails_the_check() -> None:
    reg = EventRegistry()

    class Paid(Event, name="order.paid", registry=reg, durable=True):
        order_id: int

    doc = asyncapi_document(EventBus(reg))
    doc["channels"].clear()
    with pytest.raises(
        AssertionError, match=r"missing from the AsyncAPI document: \['order.paid'\]"
    ):
        assert_complete(doc, {"order.paid"})


def durable_examples() -> list[tuple[str, str]]:
    """(page:line, the block's imports, registries and event classes) of every Python
    block of the docs that declares a durable event."""
    found = []
    for page in PAGES:
        lines = page.read_text().splitlines()
        start = None
        for i, line in enumerate(lines):
            if line.strip().startswith("```python"):
                start = i + 1
            elif line.strip() == "```" and start is not None:
                code = "\n".join(lines[start:i])
                start = None
                if "durable=True" not in code:
                    continue
                try:
                    tree = ast.parse(code)
                except SyntaxError:
                    continue
                kept: list[ast.stmt] = [
                    n for n in tree.body
                    if isinstance(n, ast.Import | ast.ImportFrom | ast.ClassDef)
                    or (isinstance(n, ast.Assign) and "EventRegistry" in ast.unparse(n.value))
                ]  # fmt: skip
                found.append(
                    (
                        f"{page.relative_to(ROOT)}:{start}",
                        ast.unparse(ast.Module(body=kept, type_ignores=[])),
                    )
                )
    return found


PROBE = """
import json, sys
from eventbus import EventBus, EventRegistry, asyncapi_document, default_registry
ns = {}
exec(compile(sys.stdin.read(), "example", "exec"), ns)
regs = [default_registry] + [v for v in ns.values() if isinstance(v, EventRegistry)]
out = []
for reg in regs:
    durable = [n for n in reg.names() if reg.get(n).__durable__]
    if durable:
        out.append({"durable": durable, "doc": asyncapi_document(EventBus(reg))})
print(json.dumps(out))
"""


@pytest.mark.parametrize(("where", "code"), durable_examples(), ids=lambda v: str(v)[:40])
def test_each_docs_example_document_is_valid_and_complete(where: str, code: str) -> None:
    run = subprocess.run(
        [sys.executable, "-c", PROBE], input=code, capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 0, f"{where}: {run.stderr}"
    results = json.loads(run.stdout)
    assert results, f"{where}: no durable event found"
    for result in results:
        validate(result["doc"])
        assert_complete(result["doc"], set(result["durable"]))


def test_the_docs_have_durable_examples() -> None:
    pages = {where.split(":")[0] for where, _ in durable_examples()}
    assert {"docs/durable.md", "docs/evolving-events.md"} <= pages


def test_the_cli_prints_json_and_yaml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "asyncapi_app.py").write_text(
        "from eventbus import Event, EventBus, EventRegistry\nreg = EventRegistry()\n"
        "class Paid(Event, name='order.paid', registry=reg, durable=True):\n"
        "    order_id: int\nbus = EventBus(reg)\n"
    )
    assert main(["asyncapi", "--app", "asyncapi_app:bus"]) == 0
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert_complete(doc, {"order.paid"})
    yaml = pytest.importorskip("yaml")
    assert main(["asyncapi", "--app", "asyncapi_app:bus", "--format", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == doc
