"""In-process counter store: the embedded default and a verified fake of the Redis store."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from anyio.abc import AsyncResource
from anyio.lowlevel import checkpoint

from .._public import shown_as_domain
from ..abc import Hit, StoreLoss
from . import bucket_of

__all__ = ["MemoryCounterStore"]


class MemoryCounterStore(AsyncResource):
    """Keeps pending and staged counts in dicts; lost with the process (one process only).

    Closing it keeps the counts (there is nothing to release).

    :param buckets: number of pending shards per counter (``id % buckets``)
    :param clock: monotonic seconds for the dedupe window (inject a fake one in tests)
    """

    def __init__(self, *, buckets: int = 16, clock: Callable[[], float] = time.monotonic) -> None:
        if buckets < 1:
            raise ValueError(f"buckets={buckets!r} must be >= 1")
        self.buckets = buckets
        self._clock = clock
        self._seen: dict[tuple[str, str, str], float] = {}
        self._pending: dict[str, list[dict[str, int]]] = {}
        self._staging: dict[str, dict[str, list[dict[str, int]]]] = {}
        self._next_sweep = 0.0

    def __repr__(self) -> str:
        return f"MemoryCounterStore(buckets={self.buckets}, counters={sorted(self._pending)})"

    def _shards(self, counter: str) -> list[dict[str, int]]:
        shards = self._pending.get(counter)
        if shards is None:
            shards = self._pending[counter] = [{} for _ in range(self.buckets)]
        return shards

    async def record(self, counter: str, hits: Sequence[Hit], *, dedupe_ttl: float) -> int:
        await checkpoint()
        now = self._clock()
        if now >= self._next_sweep:  # forget expired viewers now and then, not on every hit
            self._seen = {k: exp for k, exp in self._seen.items() if exp > now}
            self._next_sweep = now + max(dedupe_ttl, 1.0)
        shards = self._shards(counter)
        seen = self._seen
        fresh = 0
        for item, viewer in hits:
            if viewer is not None:
                key = (counter, item, viewer)
                if seen.get(key, 0.0) > now:
                    continue
                seen[key] = now + dedupe_ttl
            shard = shards[bucket_of(item, self.buckets)]
            shard[item] = shard.get(item, 0) + 1
            fresh += 1
        return fresh

    async def stage(self, counter: str, flush_id: str) -> int:
        await checkpoint()
        staging = self._staging.setdefault(counter, {})
        shards = self._shards(counter)
        if flush_id in staging or not any(shards):
            return 0
        staging[flush_id] = shards
        self._pending[counter] = [{} for _ in range(self.buckets)]
        return sum(1 for s in shards if s)

    async def staged(self, counter: str) -> list[str]:
        await checkpoint()
        return sorted(self._staging.get(counter, {}))

    async def read_staged(self, counter: str, flush_id: str) -> dict[str, int]:
        await checkpoint()
        out: dict[str, int] = {}
        for shard in self._staging.get(counter, {}).get(flush_id, []):
            out.update(shard)
        return out

    async def drop_staged(self, counter: str, flush_id: str) -> None:
        await checkpoint()
        self._staging.get(counter, {}).pop(flush_id, None)

    async def pending(self, counter: str) -> dict[str, int]:
        await checkpoint()
        out: dict[str, int] = {}
        for shard in self._pending.get(counter, []):
            out.update(shard)
        return out

    def on_loss(self, callback: Callable[[StoreLoss], None]) -> None:
        """Nothing to detect: the counts live and die with the process (never called)."""

    async def aclose(self) -> None:
        """Nothing to release (a checkpoint)."""
        await checkpoint()


shown_as_domain(MemoryCounterStore)
