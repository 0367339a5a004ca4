"""A failure row's link to the durable delivery it records: which group gave up on which
entry of which stream, so that the event can be handed back to that group alone.

The link is kept in the row's ``durable_*`` columns (an operator rewriting the ``note``, as
the console's "resolve" does, cannot cut it); the ``note`` says the same in words. Rows written
before the columns existed have the note only: :func:`link_of` reads it then.
"""

from __future__ import annotations

import dataclasses
import re
import uuid

from .._core._retry import DURABLE_NOTE
from .._failures import FailureRecord

__all__ = ["DurableLink", "failure_id", "link_of", "parse_note"]

_NAMESPACE = uuid.UUID("4f0c1a52-8a43-4d43-9a59-6b1c6e2f7d11")
_NOTE = re.compile(r"(\w+)=(\S+)")


def failure_id(group: str, stream: str, entry_id: str) -> str:
    """The failure row of one dead entry: the same id however often it is dead-lettered (a
    crash between the row and the dead letter repeats both; the row is written once)."""
    return uuid.uuid5(_NAMESPACE, f"{group}\n{stream}\n{entry_id}").hex


@dataclasses.dataclass(frozen=True, slots=True)
class DurableLink:
    """Where a durable failure came from (see the module docstring)."""

    group: str
    stream: str
    entry: str
    deliveries: int
    seq: int | None
    occurred_at: str | None = None  #: the note's only (the envelope's; not a column)

    def note(self) -> str:
        """The row's note: the link in words (``durable group=... stream=... entry=...``)."""
        text = (
            f"{DURABLE_NOTE}group={self.group} stream={self.stream} entry={self.entry} "
            f"deliveries={self.deliveries}"
        )
        if self.seq is not None:
            text += f" seq={self.seq}"
        if self.occurred_at is not None:
            text += f" occurred_at={self.occurred_at}"
        return text

    def columns(self) -> dict[str, object]:
        """The ``FailureRecord.durable_*`` fields."""
        return {
            "durable_group": self.group,
            "durable_stream": self.stream,
            "durable_entry": self.entry,
            "durable_deliveries": self.deliveries,
            "durable_seq": self.seq,
        }


def parse_note(note: str | None) -> dict[str, str] | None:
    """The ``key=value`` fields of a durable failure's note; ``None`` for another note."""
    if not note or not note.startswith(DURABLE_NOTE):
        return None
    return dict(_NOTE.findall(note))


def link_of(rec: FailureRecord) -> DurableLink | None:
    """The link of a durable failure row (columns first, else its note); ``None`` for a row
    of an in-process listener."""
    words = parse_note(rec.note) or {}
    if rec.durable_group is not None:
        return DurableLink(
            group=rec.durable_group,
            stream=rec.durable_stream or "",
            entry=rec.durable_entry or "",
            deliveries=rec.durable_deliveries or 0,
            seq=rec.durable_seq,
            occurred_at=words.get("occurred_at"),
        )
    if "group" not in words:
        return None
    seq = words.get("seq", "")
    deliveries = words.get("deliveries", "")
    return DurableLink(
        group=words["group"],
        stream=words.get("stream", ""),
        entry=words.get("entry", ""),
        deliveries=int(deliveries) if deliveries.isdigit() else 0,
        seq=int(seq) if seq.isdigit() else None,
        occurred_at=words.get("occurred_at"),
    )
