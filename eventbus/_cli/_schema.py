"""``python -m eventbus schema dump|check`` and ``python -m eventbus asyncapi``: the declared
events as a snapshot for a CI compatibility gate, and as an AsyncAPI 3.0 document.

``schema dump --app mod:bus`` prints the snapshot (redirect it to ``events.schema.json`` and
commit it); ``schema check --app mod:bus events.schema.json [--mode backward|forward|full]``
compares the code with it and exits 1 when a change breaks the mode (``full`` by default),
listing every change with the rule it breaks. ``asyncapi --app mod:bus [--format json|yaml]``
prints the AsyncAPI document. Nothing here touches a database or Redis.

Exit codes: 0 compatible (or written), 1 a breaking change, 2 bad usage or bad input (an
``--app`` that names no bus, a snapshot file missing or not a snapshot).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio

from .._compat import check_snapshot, compare
from .._core._bus import EventBus
from .._schema import snapshot, snapshot_text
from ..cli import AppLoadError, InputError, load_app

__all__ = ["add_schema_parsers"]

EXIT_OK, EXIT_BREAKING = 0, 1
APP_HELP = "the application's bus, as 'package.module:attribute' (a factory is called)"


def add_schema_parsers(commands: Any) -> None:
    """Add ``schema`` (``dump``, ``check``) and ``asyncapi`` to the CLI's subcommands."""
    schema = commands.add_parser(
        "schema",
        help="dump the declared events, or check the code against a dump (a CI gate)",
        description="Write the declared events as a snapshot, or check the code against one.",
    )
    sub = schema.add_subparsers(dest="action", required=True, metavar="ACTION")
    p = sub.add_parser("dump", help="print every declared event as stable JSON")
    p.add_argument("--app", required=True, metavar="MODULE:ATTR", help=APP_HELP)
    p.set_defaults(handler=_dump)
    p = sub.add_parser("check", help="exit 1 if the code breaks compatibility with a dump")
    p.add_argument("--app", required=True, metavar="MODULE:ATTR", help=APP_HELP)
    p.add_argument("snapshot", metavar="FILE", help="a file 'schema dump' wrote")
    p.add_argument(
        "--mode",
        choices=("backward", "forward", "full"),
        default="full",
        help="backward: new code reads stored events; forward: old code reads new events; "
        "full: both (default)",
    )
    p.add_argument("--json", action="store_true", help="print the changes as JSON")
    p.set_defaults(handler=_check)
    p = commands.add_parser(
        "asyncapi",
        help="print the AsyncAPI 3.0 document of the declared events",
        description="Print the AsyncAPI 3.0 document of the application's events.",
    )
    p.add_argument("--app", required=True, metavar="MODULE:ATTR", help=APP_HELP)
    p.add_argument("--format", choices=("json", "yaml"), default="json")
    p.set_defaults(handler=_asyncapi)


def _app(spec: str) -> EventBus:
    try:
        return load_app(spec, EventBus)
    except AppLoadError as exc:
        raise InputError(str(exc)) from None


async def _dump(args: argparse.Namespace) -> int:
    bus = _app(args.app)
    sys.stdout.write(snapshot_text(bus.registry))
    return EXIT_OK


async def _check(args: argparse.Namespace) -> int:
    bus = _app(args.app)
    path = anyio.Path(args.snapshot)
    try:
        old = check_snapshot(json.loads(await path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise InputError(f"snapshot {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    except ValueError as exc:  # JSON's errors are ValueErrors too
        raise InputError(f"snapshot {str(path)!r} cannot be used: {exc}") from None
    report = compare(old, snapshot(bus.registry)["events"], args.mode)
    if args.json:
        changes = [
            {"event": c.event, "change": c.what, "rule": c.rule, "breaks": c.breaks(args.mode)}
            for c in report.changes
        ]
        sys.stdout.write(json.dumps({"mode": args.mode, "changes": changes}, indent=2) + "\n")
    else:
        sys.stdout.write(report.text())
    return EXIT_BREAKING if report.breaking else EXIT_OK


async def _asyncapi(args: argparse.Namespace) -> int:
    from .._asyncapi import asyncapi_document, dump_yaml

    bus = _app(args.app)
    doc = asyncapi_document(bus)
    if args.format == "yaml":
        try:
            sys.stdout.write(dump_yaml(doc))
        except ImportError:
            raise InputError("--format yaml needs PyYAML: pip install 'eventbus[yaml]'") from None
        return EXIT_OK
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    return EXIT_OK
