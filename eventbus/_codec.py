"""JSON encoding of event payloads for the failure table, and rehydration through the registry."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ._events import Event, EventRegistry

__all__ = ["decode_payload", "encode_payload"]


def encode_payload(event: Event) -> tuple[str, bool]:
    """Return ``(json_text, ok)``; on failure the text is the ``repr`` and ``ok`` is false."""
    try:
        data = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
        return json.dumps(data, default=_default, sort_keys=True), True
    except Exception:
        return repr(event), False


def decode_payload(registry: EventRegistry, name: str, text: str) -> Event:
    cls = registry.get(name)
    data: dict[str, Any] = json.loads(text)
    return cls(**data)


def _default(value: object) -> Any:
    raise TypeError(f"cannot encode {type(value).__name__}")
