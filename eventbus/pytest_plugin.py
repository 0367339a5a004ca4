"""pytest plugin registered under the ``pytest11`` entry point (see ``eventbus.testing``)."""

from __future__ import annotations
