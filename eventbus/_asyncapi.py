"""The AsyncAPI 3.0.0 document of a bus's events (``eventbus asyncapi``).

One channel per durable event, addressed by its stream key (the ``{name}`` in it is Redis
Cluster's hash tag; AsyncAPI reads braces as a parameter, so the parameter is declared, with
the event's name as its only value). A message per event: its payload's JSON Schema and the
envelope's fields as headers. A ``send`` operation per durable event, and a ``receive``
operation per durable listener, named by its consumer group. In-process events have a
message each, tagged ``in-process``, and no channel: they never leave the process.
"""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING, Any

from ._catalog import EventInfo, catalog

if TYPE_CHECKING:
    from ._core._bus import EventBus

__all__ = ["asyncapi_document", "dump_yaml"]

ASYNCAPI_VERSION = "3.0.0"

_HEADERS: dict[str, Any] = {
    "type": "object",
    "description": "The envelope's fields: every field of the stream entry but the payload.",
    "properties": {
        "v": {"type": "string", "const": "1", "description": "the envelope format"},
        "event_id": {"type": "string", "description": "unique per event (hex)"},
        "name": {"type": "string", "description": "the event's name"},
        "seq": {"type": "string", "description": "the outbox row's id (an integer)"},
        "occurred_at": {
            "type": "string",
            "format": "date-time",
            "description": "the publishing transaction's time (UTC)",
        },
        "event_version": {
            "type": "string",
            "description": "the version of the event type that wrote the payload (absent: 1)",
        },
        "causation_id": {"type": "string", "description": "the event that caused this one"},
        "correlation_id": {"type": "string", "description": "the first event of the chain"},
        "aggregate_key": {"type": "string"},
        "headers": {"type": "string", "description": "a JSON object of strings"},
    },
    "required": ["v", "event_id", "name", "seq", "occurred_at"],
}


def asyncapi_document(bus: EventBus, *, title: str = "eventbus events") -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document of every event declared in the bus's registry."""
    events = catalog(bus)
    transport: Any = bus.durable
    service = getattr(transport, "service", None)
    messages: dict[str, Any] = {}
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for info in events:
        key = _id(info.name)
        messages[key] = _message(info)
        if not info.durable:
            continue
        address = info.stream or f"eventbus:evt:{{{info.name}}}"
        channels[key] = {
            "address": address,
            "title": info.name,
            "description": f"The stream of {info.name!r}: one entry per published event.",
            "messages": {key: {"$ref": f"#/components/messages/{key}"}},
            "parameters": _parameters(address),
        }
        ref = {"$ref": f"#/channels/{key}"}
        msg = [{"$ref": f"#/channels/{key}/messages/{key}"}]
        operations[f"{key}.publish"] = {
            "action": "send",
            "channel": ref,
            "title": f"publish {info.name}",
            "summary": "bus.publish(event, conn): an outbox row, added to the stream by a relay",
            "messages": msg,
        }
        for lst in info.durable_listeners:
            operations[_id(lst.group)] = {
                "action": "receive",
                "channel": ref,
                "title": lst.group,
                "summary": f"the durable listener {lst.name!r} (consumer group {lst.group!r})",
                "messages": msg,
            }
    info_obj: dict[str, Any] = {
        "title": title,
        "version": _app_version(),
        "description": "Durable events travel through Redis Streams (one channel each); "
        "in-process events are messages tagged 'in-process', without a channel.",
    }
    if service:
        info_obj["x-eventbus-service"] = service
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": info_obj,
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
    }


def _message(info: EventInfo) -> dict[str, Any]:
    tag = "durable" if info.durable else "in-process"
    message: dict[str, Any] = {
        "name": info.name,
        "title": info.name,
        "contentType": "application/json",
        "payload": info.schema,
        "tags": [{"name": tag}],
        "x-eventbus-version": info.version,
        "x-eventbus-unknown-fields": info.unknown_fields,
    }
    if info.doc:
        message["summary"] = info.doc
    if info.durable:
        message["headers"] = _HEADERS
    return message


def _parameters(address: str) -> dict[str, Any]:
    return {
        name: {
            "enum": [name],
            "default": name,
            "description": "the hash tag: always the event's name",
        }
        for name in re.findall(r"\{([^}]*)\}", address)
    }


def _id(name: str) -> str:
    """A component key (``^[a-zA-Z0-9.\\-_]+$``) for a name or a group."""
    return re.sub(r"[^A-Za-z0-9.\-_]", "_", name)


def _app_version() -> str:
    from ._version import version

    return version()


def dump_yaml(doc: dict[str, Any]) -> str:
    """*doc* as YAML (the ``yaml`` extra: PyYAML), keys in the document's order.

    :raises ImportError: without PyYAML
    """
    yaml: Any = importlib.import_module("yaml")
    text: str = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    return text
