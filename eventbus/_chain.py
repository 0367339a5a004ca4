"""The chain of causes of one failure, from the first event to the failure's own, as far as the
failure table knows it: what ``python -m eventbus failures show`` prints and the console's
failure page draws.

The table knows an event when one of its listeners failed: a row gives the event's name and
its ``causation_id``, the event before it. An event none of whose listeners failed left no
row, so its name is not known, and neither is what caused it; the chain's first event is
known by id all the same (it is the ``correlation_id``), with a gap before it.
"""

from __future__ import annotations

import dataclasses

from ._failures import FailureRecord
from .abc import FailureStore

__all__ = ["ChainLink", "causation_chain"]

#: Links followed at most (a chain is as deep as ``max_depth`` allows: 32 by default).
MAX_LINKS = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class ChainLink:
    """One event of a chain of causes."""

    event_id: str | None  #: ``None``: a gap, events between that left no failure row
    event_name: str | None  #: ``None``: no failure row of this event, so its name is unknown
    failures: tuple[FailureRecord, ...] = ()  #: the chain's failure rows of this event


async def causation_chain(store: FailureStore, rec: FailureRecord) -> list[ChainLink]:
    """The events from the chain's first to *rec*'s, first event first; empty for a record
    without a correlation id (recorded before causality existed)."""
    if rec.correlation_id is None:
        return []
    rows = await store.query(correlation=rec.correlation_id, limit=None)
    by_event: dict[str, list[FailureRecord]] = {}
    for row in sorted(rows, key=lambda r: r.first_failed_at):
        by_event.setdefault(row.event_id, []).append(row)
    own = tuple(by_event.get(rec.event_id, [rec]))
    chain = [ChainLink(rec.event_id, rec.event_name, own)]
    cause = rec.causation_id
    while cause is not None and len(chain) < MAX_LINKS:
        known = by_event.get(cause)
        if known is None:
            chain.append(ChainLink(cause, None))
            if cause != rec.correlation_id:
                chain.append(ChainLink(None, None))
                chain.append(ChainLink(rec.correlation_id, None))
            break
        chain.append(ChainLink(cause, known[0].event_name, tuple(known)))
        cause = known[0].causation_id
    return chain[::-1]
