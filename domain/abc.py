"""Protocols that the domain's storage backends implement (concrete classes need not inherit)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

__all__ = ["CounterStore", "Hit", "StoreLoss"]

#: One counted thing: ``(item, viewer)``; ``viewer=None`` always counts (no dedupe).
Hit = tuple[str, str | None]


@dataclasses.dataclass(frozen=True, slots=True)
class StoreLoss:
    """A counter store found that its data for *counter* is gone (a server restarted without
    persistence, a flush, an eviction); the counts are what this process last saw there."""

    counter: str
    pending: int  # counts pending (not yet staged) when last seen: lost
    staged: int  # counts staged but not yet dropped when last seen: lost unless applied
    last_seen_at: datetime | None  # when this process last saw them (None: never)
    cause: str  # what the store could tell about the cause, one clause

    def describe(self) -> str:
        """One sentence for the log: what was lost, when it was last seen, and why."""
        seen = "never" if self.last_seen_at is None else f"at {self.last_seen_at:%H:%M:%S} UTC"
        return (
            f"the counts of counter {self.counter!r} are gone: {self.cause}; lost, as this "
            f"process last saw them ({seen}): {self.pending} pending and up to {self.staged} "
            "staged for SQL, plus any counted since by other replicas"
        )


@runtime_checkable
class CounterStore(Protocol):
    """**Protocol:** pending counts between the request path and SQL, with a staged take.

    * ``record()`` counts each hit whose ``(item, viewer)`` was not seen within ``dedupe_ttl``
      seconds (``SET NX EX``) into a pending hash sharded by item into ``buckets`` buckets.
    * ``stage(counter, flush_id)`` moves every pending bucket of *counter* to staging keys named
      by *flush_id* and lists *flush_id* among the staged ones, in **one atomic step**; running
      it again with the same *flush_id* changes nothing (safe to retry after a lost reply).
    * Staged counts stay until ``drop_staged()``: a crash anywhere leaves them in place, and the
      next flush finds them through ``staged()``.
    * ``pending()`` returns the pending (not yet staged) counts, for tests and health checks.
    * A store whose data can vanish under it (a Redis server restarted without persistence)
      detects it at the next ``record()`` or ``stage()`` and calls every ``on_loss()`` callback
      with a :class:`StoreLoss`; the counts of that call go on counting.
    * ``aclose()`` releases what the store built, never a client it was given; the counts stay
      where they are kept. (The stores of this package are also async context managers.)
    """

    buckets: int

    async def record(self, counter: str, hits: Sequence[Hit], *, dedupe_ttl: float) -> int:
        """Count the fresh ones of *hits* into the pending buckets.

        :return: how many of *hits* counted (were fresh)
        """
        ...

    async def stage(self, counter: str, flush_id: str) -> int:
        """Move every pending bucket to staging keys of *flush_id*, atomically and once.

        :return: how many buckets were staged (0: nothing pending, or already staged)
        """
        ...

    async def staged(self, counter: str) -> list[str]:
        """The flush ids of *counter* staged and not yet dropped, sorted."""
        ...

    async def read_staged(self, counter: str, flush_id: str) -> dict[str, int]:
        """The counts staged under *flush_id*, by item."""
        ...

    async def drop_staged(self, counter: str, flush_id: str) -> None:
        """Forget the counts staged under *flush_id* (they are in SQL)."""
        ...

    async def pending(self, counter: str) -> dict[str, int]:
        """The counts of *counter* not yet staged, by item."""
        ...

    def on_loss(self, callback: Callable[[StoreLoss], None]) -> None:
        """Call *callback* with each loss of stored counts detected from now on."""
        ...

    async def aclose(self) -> None:
        """Release what the store built (never a client it was given)."""
        ...
