"""A Griffe extension: our docstrings' reStructuredText, read as the Markdown MkDocs renders.

The docstrings follow the anyio/APScheduler style (STYLE.md §7): ``:param x:`` fields, which
mkdocstrings' ``sphinx`` parser reads, and inline roles and simple tables, which it does not.
This rewrites those before parsing, so that the reference pages (``docs/reference/``) show:

* a role such as ``:class:`~eventbus.EventBus``` as a link to that object's entry when the
  site has one (an *optional* autorefs cross-reference: no warning when it has none);
* a simple table (rows framed by ``=====  =====`` rules) as a Markdown table;
* a paragraph ending in ``::`` (a literal block follows) with one colon;
* a method defined as a module-level function and bound in the class body
  (``on = _subscribing.on``: ``EventBus`` keeps its parts in their own modules) as a method of
  the class, its first parameter (the instance) left out, as for ``self``.

Loaded by ``mkdocs.yml`` (``extensions: [docs/_tooling/griffe_rst.py]``).
"""

from __future__ import annotations

import html
import re
from typing import Any

from griffe import (
    Class,
    Docstring,
    ExprAttribute,
    ExprName,
    Extension,
    Function,
    GriffeLoader,
    Module,
    Object,
    Parameters,
)

__all__ = ["RestructuredText"]

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj|const):`(?P<target>[^`]+)`")
RULE = re.compile(r"^(\s*)(=+)( +=+)+\s*$")


def _identifier(obj: Object, target: str) -> str:
    """*target* as a full dotted path, resolved in *obj*'s scope where it can be."""
    head, _, rest = target.lstrip(".").partition(".")
    try:
        resolved = obj.resolve(head)
    except Exception:  # griffe raises several kinds; an unresolved name stays as written
        return target.lstrip(".")
    return f"{resolved}.{rest}" if rest else resolved


def _role(obj: Object, match: re.Match[str]) -> str:
    target = match["target"]
    if "<" in target:  # :class:`title <target>`
        title, target = target.rstrip(">").split("<", 1)
        title = title.strip()
    else:
        title = target.rsplit(".", 1)[-1] if target.startswith("~") else target.lstrip(".")
    identifier = _identifier(obj, target.lstrip("~"))
    return (
        f'<autoref identifier="{html.escape(identifier)}" optional>'
        f"<code>{html.escape(title)}</code></autoref>"
    )


def _cells(line: str, spans: list[tuple[int, int]]) -> list[str]:
    cells = [line[a:b].strip() for a, b in spans[:-1]]
    return [*cells, line[spans[-1][0] :].strip()]


def _table(lines: list[str]) -> list[str]:
    """``lines`` (a simple table, rules included) as Markdown table lines."""
    spans = [m.span() for m in re.finditer(r"=+", lines[0])]
    indent = lines[0][: len(lines[0]) - len(lines[0].lstrip())]
    rows: list[list[str]] = []
    header: list[str] | None = None
    for line in lines[1:]:
        if RULE.match(line):
            if header is None:
                header, rows = rows[0] if rows else [""] * len(spans), []
            continue
        cells = _cells(line, spans)
        if rows and not cells[0]:  # a continuation line of the row above
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
        else:
            rows.append(cells)
    header = header or [""] * len(spans)
    out = [f"{indent}| {' | '.join(header)} |", f"{indent}|{'---|' * len(spans)}"]
    return out + [f"{indent}| {' | '.join(c.replace('|', '&#124;') for c in r)} |" for r in rows]


def markdown(obj: Object, text: str) -> str:
    """*text*, a docstring of *obj*, with its roles, tables and ``::`` rewritten."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if RULE.match(lines[i]):
            end = i + 1
            rules = 1
            while end < len(lines) and rules < 3:
                rules += bool(RULE.match(lines[end]))
                end += 1
            out += _table(lines[i:end])
            i = end
            continue
        line = lines[i]
        if line.endswith("::") and not line.strip().startswith(":"):
            line = line[:-1]
        out.append(line)
        i += 1
    return ROLE.sub(lambda m: _role(obj, m), "\n".join(out))


def _bound_functions(cls: Class, loader: GriffeLoader) -> None:
    """Each ``name = module.function`` of *cls*'s body, as a method of *cls*."""
    for name, member in list(cls.members.items()):
        if member.is_alias or not member.is_attribute:
            continue
        value = getattr(member, "value", None)
        if not isinstance(value, ExprName | ExprAttribute):  # a call, a literal...
            continue
        path = value.canonical_path
        try:
            target = loader.modules_collection.get_member(path) if path else None
        except (KeyError, ValueError):
            continue
        if not isinstance(target, Function) or not len(target.parameters):
            continue
        method = Function(
            name,
            lineno=target.lineno,
            endlineno=target.endlineno,
            parameters=Parameters(*list(target.parameters)[1:]),  # the instance
            returns=target.returns,
            decorators=target.decorators,
        )
        method.labels |= target.labels
        cls.set_member(name, method)
        if target.docstring is not None:
            method.docstring = Docstring(
                target.docstring.value,
                lineno=target.docstring.lineno,
                parent=method,
                parser=target.docstring.parser,
                parser_options=target.docstring.parser_options,
            )


def _classes(obj: Object) -> list[Class]:
    found = [obj] if isinstance(obj, Class) else []
    for member in obj.members.values():
        if not member.is_alias and isinstance(member, Module | Class):
            found += _classes(member)
    return found


class RestructuredText(Extension):
    """Rewrites every docstring once the package is loaded (names then resolve)."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj, obj.docstring.value)

    def on_package(self, *, pkg: Module, loader: GriffeLoader, **kwargs: Any) -> None:
        self.on_object(obj=pkg)  # on_object is called for its members only
        for cls in _classes(pkg):
            _bound_functions(cls, loader)
