"""The ``pip install`` command that fits how this copy of eventbus was installed, for the
doctor's advice: from an index, ``'eventbus[redis]'``; from a clone or a built wheel (PEP 610's
``direct_url.json``), that directory or file, since ``eventbus`` from an index may be another
version, or not be there at all.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from .._version import DISTRIBUTION

__all__ = ["install_command"]


def install_command(extras: Sequence[str] = (), *, force: bool = False) -> str:
    """``pip install ...`` of this copy's source with *extras* (``--force-reinstall`` with
    *force*): ``eventbus`` from an index, else the clone or the wheel it came from."""
    source, editable = _source()
    spec = source + (f"[{','.join(extras)}]" if extras else "")
    words = ["pip", "install"] + ["--force-reinstall"] * force + ["-e"] * editable
    return " ".join(words + [shlex.quote(spec) if extras or source != DISTRIBUTION else spec])


def _source() -> tuple[str, bool]:
    """What pip installed eventbus from, and whether editable; ``("eventbus", False)`` for an
    index (or when it cannot tell)."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        text = None
    if not text:
        return DISTRIBUTION, False
    try:
        info = json.loads(text)
        url = urlparse(info["url"])
    except (ValueError, KeyError, TypeError):
        return DISTRIBUTION, False
    if url.scheme != "file" or not Path(unquote(url.path)).exists():
        return DISTRIBUTION, False  # a VCS URL, or a wheel deleted since
    editable = bool((info.get("dir_info") or {}).get("editable"))
    return unquote(url.path), editable
