"""The events page: the catalog of the bus's events (version, fields and types, durable or
not, in-process and durable listeners, stream and consumer groups), each linked to its
failures, and the AsyncAPI document to download (``events/asyncapi.json``).

Drawn from :func:`eventbus._catalog.catalog` and :func:`eventbus.asyncapi_document`, the same
data as ``python -m eventbus schema dump`` and ``asyncapi``; it reads nothing but the bus.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from starlette.responses import Response

from eventbus import EventBus

from .._asyncapi import asyncapi_document
from .._catalog import catalog
from ._pages import PageRequest, Panel, View

__all__ = ["EventsPage"]


class EventsPage:
    """The catalog of *bus*'s declared events."""

    slug = "events"
    title = "Events"
    templates: tuple[str, str] | None = None

    def __init__(self, bus: EventBus) -> None:
        self.bus: EventBus = bus

    def __repr__(self) -> str:
        return f"EventsPage(bus={self.bus!r})"

    def routes(self) -> Sequence[View]:
        return [
            View("", self.index, "events.list"),
            View("/asyncapi.json", self.asyncapi, "events.asyncapi"),
        ]

    async def panel(self, request: PageRequest) -> Panel:
        events = catalog(self.bus)
        durable = sum(e.durable for e in events)
        return Panel(
            title=self.title,
            href=request.url("/events"),
            rows=[("declared", len(events)), ("durable", durable)],
        )

    async def index(self, request: PageRequest) -> Response:
        return request.render("events.html", events=catalog(self.bus))

    async def asyncapi(self, request: PageRequest) -> Response:
        body = json.dumps(asyncapi_document(self.bus), indent=2)
        return Response(
            body,
            media_type="application/json",
            headers={"Content-Disposition": 'attachment; filename="asyncapi.json"'},
        )
