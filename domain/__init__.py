"""Domain modules built on the event bus and the scheduler."""

from __future__ import annotations
