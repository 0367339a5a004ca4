"""Protocols that the domain's storage backends implement (concrete classes need not inherit)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["CounterStore", "Hit"]

#: One counted thing: ``(item, viewer)``; ``viewer=None`` always counts (no dedupe).
Hit = tuple[str, str | None]


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
    """

    buckets: int

    async def record(self, counter: str, hits: Sequence[Hit], *, dedupe_ttl: float) -> int:
        """:return: how many of *hits* counted (were fresh)"""
        ...

    async def stage(self, counter: str, flush_id: str) -> int:
        """:return: how many buckets were staged (0: nothing pending, or already staged)"""
        ...

    async def staged(self, counter: str) -> list[str]: ...

    async def read_staged(self, counter: str, flush_id: str) -> dict[str, int]: ...

    async def drop_staged(self, counter: str, flush_id: str) -> None: ...

    async def pending(self, counter: str) -> dict[str, int]: ...
