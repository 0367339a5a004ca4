"""Every public module of the two libraries has a page in the site's reference, in its nav."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
# Public modules that are not an API to read: the pytest plugin is loaded by its entry point
# (docs/embedding.md says what it provides); the namespaces export nothing (``__all__ = []``),
# their modules have pages of their own.
NOT_AN_API = {
    "eventbus.pytest_plugin",
    "eventbus.backends",
    "eventbus.interop",
    "scheduler.backends",
}


def public_modules() -> list[str]:
    found = []
    for package in ("eventbus", "scheduler"):
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if any(p.startswith("_") and p != "__init__" for p in parts):
                continue
            name = ".".join(p for p in parts if p != "__init__")
            if name not in NOT_AN_API:
                found.append(name)
    return found


@pytest.mark.parametrize("module", public_modules())
def test_the_reference_has_a_page_for_each_public_module(module: str) -> None:
    page = REFERENCE / f"{module}.md"
    assert page.read_text(encoding="utf-8").strip() == f"::: {module}", page
    assert f"reference/{module}.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_the_reference_has_no_page_for_a_module_that_is_gone() -> None:
    pages = {p.stem for p in REFERENCE.glob("*.md")}
    assert pages == set(public_modules())
