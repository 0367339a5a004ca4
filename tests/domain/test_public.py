"""The ``domain`` package's names: loaded on first access, shown as ``domain.Name``.

What a fresh interpreter loads is observed in a subprocess: this test session has long since
imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import domain
from eventbus import Event

ROOT = Path(__file__).resolve().parents[2]


def fresh_python(code: str) -> object:
    """Run *code* in a new interpreter and return the JSON it prints."""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return json.loads(proc.stdout)


def test_importing_the_catalog_loads_the_bus_and_nothing_else() -> None:
    """``import domain.events`` adds three modules to what ``import eventbus`` loads (the
    package's lazy names come from ``eventbus.lazy``): no SQLAlchemy, no redis, no scheduler,
    no domain service (it loaded 435 modules before)."""
    added = fresh_python(
        "import json, sys\n"
        "import eventbus\n"
        "before = set(sys.modules)\n"
        "import domain.events\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))\n"
    )
    assert added == ["domain", "domain.events", "eventbus.lazy"]


def test_an_exported_class_shows_the_package_path_whichever_path_imported_it() -> None:
    """A failure record's ``error_type`` is the same in every process, however the exception
    class was first imported."""
    shown = fresh_python(
        "import json\n"
        "from domain.exceptions import MailDeliveryError\n"
        "from domain.shortlinks import ShortLinks\n"
        "print(json.dumps([MailDeliveryError.__module__, ShortLinks.__module__]))\n"
    )
    assert shown == ["domain", "domain"]


@pytest.mark.parametrize("name", domain.__all__)
def test_every_name_loads_on_first_access(name: str) -> None:
    obj = getattr(domain, name)
    assert name in dir(domain)
    if isinstance(obj, type) and issubclass(obj, Event):
        assert obj.__module__ == "domain.events"  # annotations resolve in their module
    elif callable(obj):
        assert obj.__module__ == "domain"


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="module 'domain' has no attribute 'Nope'"):
        domain.Nope  # type: ignore[attr-defined]  # noqa: B018
