"""``python -m eventbus`` and the ``eventbus`` command: failures, streams, doctor.

The helpers an application's own CLI may use (``load_app``, ``describe_error``) are public in
:mod:`eventbus.cli`.
"""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
