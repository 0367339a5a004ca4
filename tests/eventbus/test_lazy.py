"""``eventbus.lazy``: a package's names imported on first access (``scheduler`` and ``domain``
use it; their own tests check their names)."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

INIT = """
from typing import TYPE_CHECKING

from eventbus.lazy import lazy_exports

__all__ = ["Heavy", "helper"]

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {"Heavy": "._heavy", "helper": ".sub.tools"})
"""


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A fresh package whose two names live in modules not imported yet."""
    name = f"lazy_{uuid.uuid4().hex}"
    root = tmp_path / name
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text(INIT)
    (root / "_heavy.py").write_text("class Heavy:\n    pass\n")
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "tools.py").write_text("def helper() -> int:\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    yield module
    for loaded in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[loaded]


def test_a_name_imports_its_module_on_first_access_only(package: ModuleType) -> None:
    name = package.__name__
    assert f"{name}._heavy" not in sys.modules and f"{name}.sub.tools" not in sys.modules
    heavy = package.Heavy
    assert heavy is sys.modules[f"{name}._heavy"].Heavy
    assert f"{name}.sub.tools" not in sys.modules
    assert package.helper() == 42
    assert vars(package)["Heavy"] is heavy  # cached: later lookups skip __getattr__


def test_dir_lists_the_lazy_names_before_they_are_loaded(package: ModuleType) -> None:
    assert {"Heavy", "helper", "__all__"} <= set(dir(package))
    assert "Heavy" not in vars(package)


def test_another_name_is_an_attribute_error_naming_the_package(package: ModuleType) -> None:
    with pytest.raises(
        AttributeError, match=rf"^module '{package.__name__}' has no attribute 'Nope'$"
    ):
        package.Nope  # noqa: B018
