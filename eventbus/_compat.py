"""The compatibility gate: compare the declared events with a snapshot of them
(:func:`eventbus._schema.snapshot`) and name each change that breaks a rule.

Directions follow Confluent's vocabulary, under the tolerant reader: *backward* means new code
reads the events old code stored; *forward* means old code (a replica not yet upgraded, a
consumer rolled back) reads the events new code stores; *full* is both, and the default.
Field rules apply to durable events, whose payloads are stored and read by other processes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from ._schema import SNAPSHOT_FORMAT

__all__ = ["RULES", "Change", "CompatReport", "Mode", "check_snapshot", "compare"]

Mode = Literal["backward", "forward", "full"]
Direction = Literal["backward", "forward"]

#: rule key: (the rule in words, the directions it breaks)
RULES: dict[str, tuple[str, frozenset[Direction]]] = {
    "removed-field": ("a removed field that has no default", frozenset({"forward"})),
    "renamed-field": ("a renamed field without an upcaster", frozenset({"backward", "forward"})),
    "new-required-field": ("a new field without a default", frozenset({"backward"})),
    "made-required": ("a field made required", frozenset({"backward"})),
    "changed-type": ("a changed type", frozenset({"backward", "forward"})),
    "converted-type": ("a changed type an upcaster converts", frozenset({"forward"})),
    "removed-event": ("a durable event removed", frozenset({"backward"})),
    "made-in-process": ("a durable event made in-process", frozenset({"backward"})),
    "version-lowered": ("a version lowered", frozenset({"backward", "forward"})),
    "version-without-upcaster": (
        "a version raised without an upcaster from the previous one",
        frozenset({"backward"}),
    ),
    "removed-upcaster": ("an upcaster removed", frozenset({"backward"})),
    "rejected-new-field": (
        "a field added where old code rejects unknown fields",
        frozenset({"forward"}),
    ),
    "rejected-stored-field": (
        "a field removed where new code rejects unknown fields",
        frozenset({"backward"}),
    ),
    "rejected-new-version": (
        "a version raised where old code rejects unknown fields",
        frozenset({"forward"}),
    ),
}


@dataclasses.dataclass(frozen=True, slots=True)
class Change:
    """One difference between the snapshot and the code; ``rule`` is ``None`` when it is
    compatible in every direction."""

    event: str
    what: str
    rule: str | None = None
    directions: frozenset[Direction] = frozenset()  #: the directions the change breaks

    def breaks(self, mode: Mode) -> bool:
        return bool(self.directions) if mode == "full" else mode in self.directions

    def line(self, mode: Mode) -> str:
        if self.rule is None or not self.directions:
            return f"  compatible  {self.event}: {self.what}"
        text, _ = RULES[self.rule]
        where = " and ".join(sorted(self.directions))
        status = "BREAKING  " if self.breaks(mode) else "compatible"
        note = "" if self.breaks(mode) else f" (breaks {where} only)"
        return f"  {status}  {self.event}: {self.what} [{text}; breaks {where}]{note}"


@dataclasses.dataclass(frozen=True, slots=True)
class CompatReport:
    """Every change found, and those that break the mode asked for."""

    mode: Mode
    changes: tuple[Change, ...]

    @property
    def breaking(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.breaks(self.mode))

    def text(self) -> str:
        if not self.changes:
            return f"schema check ({self.mode}): no changes\n"
        lines = [c.line(self.mode) for c in self.changes]
        n, bad = len(self.changes), len(self.breaking)
        lines.append(f"schema check ({self.mode}): {n} change{'s' * (n != 1)}, {bad} breaking")
        return "\n".join(lines) + "\n"


def check_snapshot(data: object) -> Mapping[str, Any]:
    """The events of a snapshot read from a file.

    :raises ValueError: naming what is wrong, for data that is not a snapshot this code reads
    """
    if not isinstance(data, dict) or not isinstance(data.get("events"), dict):
        raise ValueError("it is not an events snapshot ('eventbus schema dump' writes one)")
    if data.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"snapshot format {data.get('format')!r}, expected {SNAPSHOT_FORMAT}")
    for name, event in data["events"].items():
        if not isinstance(event, dict) or not {"version", "durable", "fields"} <= event.keys():
            raise ValueError(f"event {name!r} lacks version, durable or fields")
    events: Mapping[str, Any] = data["events"]
    return events


def compare(old: Mapping[str, Any], new: Mapping[str, Any], mode: Mode = "full") -> CompatReport:
    """Compare the events of two snapshots (``old``: the file, ``new``: the code)."""
    changes: list[Change] = []
    for name in sorted(old.keys() | new.keys()):
        if name not in new:
            if old[name]["durable"]:
                changes.append(_broken(name, "removed", "removed-event"))
            else:
                changes.append(Change(name, "in-process event removed"))
            continue
        if name not in old:
            changes.append(Change(name, f"new event (version {new[name]['version']})"))
            continue
        changes += _event_changes(name, old[name], new[name])
    return CompatReport(mode, tuple(changes))


def _broken(event: str, what: str, rule: str) -> Change:
    return Change(event, what, rule, RULES[rule][1])


def _event_changes(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Change]:
    out: list[Change] = []
    if old["durable"] and not new["durable"]:
        out.append(_broken(name, "no longer durable", "made-in-process"))
    elif new["durable"] and not old["durable"]:
        out.append(Change(name, "made durable"))
    v_old, v_new = old["version"], new["version"]
    casts_old = set(old.get("upcasters_from", ()))
    casts_new = set(new.get("upcasters_from", ()))
    if v_new < v_old:
        out.append(_broken(name, f"version {v_old} -> {v_new}", "version-lowered"))
    elif v_new > v_old:
        missing = [v for v in range(v_old, v_new) if v not in casts_new]
        if missing:
            froms = ", ".join(map(str, missing))
            what = f"version {v_old} -> {v_new} with no upcaster from version {froms}"
            out.append(_broken(name, what, "version-without-upcaster"))
        else:
            out.append(Change(name, f"version {v_old} -> {v_new}, upcasters from each"))
    out += [Change(name, f"new upcaster from version {v}") for v in sorted(casts_new - casts_old)]
    out += [  # stored payloads of that version are no longer brought up to date
        _broken(name, f"upcaster from version {v} removed", "removed-upcaster")
        for v in sorted(casts_old - casts_new)
    ]
    if old.get("unknown_fields", new.get("unknown_fields")) != new.get("unknown_fields"):
        out.append(
            Change(name, f"unknown_fields {old['unknown_fields']!r} -> {new['unknown_fields']!r}")
        )
    upcast = v_new > v_old and all(v in casts_new for v in range(v_old, v_new))
    if old["durable"] and new["durable"]:
        if v_new > v_old and old.get("unknown_fields") == "reject":  # old code leaves it pending
            what = f"version {v_old} -> {v_new}; old code cannot read version {v_new}"
            out.append(_broken(name, what, "rejected-new-version"))
        out += _field_changes(name, old, new, upcast)
    elif old["fields"] != new["fields"]:
        out.append(Change(name, "fields changed (in-process: not stored across versions)"))
    return out


def _field_changes(
    name: str, old: Mapping[str, Any], new: Mapping[str, Any], upcast: bool
) -> list[Change]:
    out: list[Change] = []
    f_old, f_new = old["fields"], new["fields"]
    removed = sorted(f_old.keys() - f_new.keys())
    added = sorted(f_new.keys() - f_old.keys())
    for r in list(removed):  # a removed field and an added one of the same schema: a rename
        twin = next(
            (a for a in added if f_new[a]["schema"] == f_old[r]["schema"] and f_new[a]["required"]),
            None,
        )
        if twin is None or not f_old[r]["required"]:
            continue
        removed.remove(r)
        added.remove(twin)
        what = f"field {r!r} renamed {twin!r}"
        if upcast:
            out.append(_broken(name, what + " (an upcaster reads old events)", "removed-field"))
        else:
            out.append(_broken(name, what, "renamed-field"))
    strict_old = old.get("unknown_fields") == "reject"
    strict_new = new.get("unknown_fields") == "reject"
    for r in removed:
        required = f_old[r]["required"]
        if required:  # old code needs it in the events new code stores
            out.append(_broken(name, f"field {r!r} removed", "removed-field"))
        if strict_new and not upcast:  # and new code refuses it in the events old code stored
            what = f"field {r!r} removed; new code rejects it in stored events"
            out.append(_broken(name, what, "rejected-stored-field"))
        elif not required:
            out.append(Change(name, f"optional field {r!r} removed"))
    for a in added:
        required = f_new[a]["required"]
        if required and not upcast:  # new code needs it in the events old code stored
            out.append(_broken(name, f"field {a!r} added without a default", "new-required-field"))
        if strict_old:  # and old code refuses it in the events new code stores
            out.append(
                _broken(name, f"field {a!r} added; old code rejects it", "rejected-new-field")
            )
        elif required and upcast:
            out.append(Change(name, f"field {a!r} added, filled by an upcaster"))
        elif not required:
            out.append(Change(name, f"optional field {a!r} added"))
    for f in sorted(f_old.keys() & f_new.keys()):
        o, n = f_old[f], f_new[f]
        if o["schema"] != n["schema"]:
            what = f"field {f!r}: {_short(o['schema'])} -> {_short(n['schema'])}"
            if upcast:  # new code reads old values through the upcaster; old code has none
                out.append(_broken(name, what + " (an upcaster converts)", "converted-type"))
            else:
                out.append(_broken(name, what, "changed-type"))
        if not o["required"] and n["required"] and upcast:
            out.append(Change(name, f"field {f!r} made required, filled by an upcaster"))
        elif not o["required"] and n["required"]:
            out.append(_broken(name, f"field {f!r} made required", "made-required"))
        elif o["required"] and not n["required"]:
            out.append(Change(name, f"field {f!r} made optional"))
        elif o.get("default") != n.get("default"):
            out.append(
                Change(name, f"field {f!r} default {o.get('default')!r} -> {n.get('default')!r}")
            )
    return out


def _short(schema: Mapping[str, Any]) -> str:
    if set(schema) <= {"type", "format"} and "type" in schema:
        return str(schema["type"]) + (f" ({schema['format']})" if "format" in schema else "")
    return str(dict(schema))
