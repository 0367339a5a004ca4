"""The version of the installed distribution, which ships both ``eventbus`` and ``scheduler``.

Read on first access to ``eventbus.__version__`` (as attrs does): importing
:mod:`importlib.metadata` costs more than a third of ``import eventbus``.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

__all__ = ["DISTRIBUTION", "version"]

DISTRIBUTION = "eventbus"
UNKNOWN = "0+unknown"


def version() -> str:
    """The installed distribution's version; from a source tree never installed, the version
    in the ``pyproject.toml`` beside the package."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return source_tree_version(Path(__file__).resolve().parents[1])


def source_tree_version(root: Path) -> str:
    """``project.version`` of *root*'s ``pyproject.toml`` if it is ours, else ``0+unknown``."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return UNKNOWN
    found = project.get("version")
    return found if project.get("name") == DISTRIBUTION and isinstance(found, str) else UNKNOWN
