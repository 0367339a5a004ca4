"""The runner's side of the lock for one fire: claim the fire, take one of the job's lock
slots (now, or waiting for one), name the holders of a ``locked`` skip, release quietly.

Two orders. A scheduled fire claims first, then takes the lock: the claim decides which
replica runs the fire, and a held lock skips it (runs of one job do not overlap). A
catch-up fire takes the lock first, waiting for it, then claims: replicas walking the same
backlog then run each missed fire once, in order, and none is lost to a ``locked`` skip.
A claim lives about ``lock_ttl``, and a long backlog outlasts it: so under the lock, a
catch-up fire first asks the run table whether a run of it already began (runs are recorded
as they start, under the lock), and only then claims.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

import anyio

from .._jobs import Job
from ..abc import Clock, Lease, Lock, RunStore

__all__ = ["LockStep", "slots"]

logger = logging.getLogger("scheduler")


class LockStep:
    """Claims and lock slots for the runner.

    :param claim_ttl: the scheduler's floor for how long a claim lives
    :param unsure: told when a lock call failed (its outcome is unknown)
    """

    def __init__(
        self,
        lock: Lock,
        clock: Clock,
        *,
        claim_ttl: float,
        unsure: Callable[[], None],
        runs: RunStore,
    ) -> None:
        self.lock = lock
        self.clock = clock
        self.claim_ttl = claim_ttl
        self.unsure = unsure
        self.runs = runs

    async def take(
        self, job: Job, fire: datetime | None, *, catching_up: bool
    ) -> tuple[Lease | None, str | None, datetime]:
        """Claim and lock in the order the fire needs: the lease (or ``None``), ``"claimed"``
        if another replica has the fire, and when the acquire that won began at the latest."""
        if fire is None or not catching_up:
            if fire is not None and not await self.claim(job, fire):
                return None, "claimed", self.clock.now()
            began = self.clock.now()
            return await self.acquire(job), None, began
        lease = await self.acquire_waiting(job)
        began = self.clock.now()  # the winning try began before this: a safe bound
        if lease is None:
            return None, None, began
        try:
            # A replica that waited long for the lock may find the fire's claim expired
            # although another ran it: the run table, read under the lock, tells.
            won = not await self._fire_started(job.name, fire) and await self.claim(job, fire)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await self.release_quietly(job.name, lease)
            raise
        if not won:
            await self.release_quietly(job.name, lease)
            return None, "claimed", began
        return lease, None, began

    async def _fire_started(self, name: str, fire: datetime) -> bool:
        """Whether the run table has a run of this fire (``False`` if the store cannot say:
        the claim decides alone then)."""
        started = getattr(self.runs, "fire_started", None)
        if started is None:
            return False
        try:
            return bool(await started(name, fire))
        except Exception:
            logger.exception("job %r: could not read the run table; the claim decides", name)
            return False

    async def claim(self, job: Job, fire: datetime) -> bool:
        # a claim outlives the latest moment a replica may still run the fire: its grace,
        # and its jitter on top
        ttl = max(job.lock_ttl, self.claim_ttl, 2 * (job.misfire_grace or 0.0)) + job.jitter
        return await self.lock.claim_fire(job.name, fire, ttl=ttl)

    async def acquire(self, job: Job) -> Lease | None:
        """The first free one of the job's ``max_running`` lock slots, or ``None``."""
        for slot in slots(job.name, job.max_running):
            lease = await self.lock.acquire(slot, ttl=job.lock_ttl)
            if lease is not None:
                return lease
        return None

    async def acquire_waiting(self, job: Job) -> Lease | None:
        """:meth:`acquire`, trying again every ``min(1 s, lock_ttl / 10)`` by the clock for up
        to ``lock_ttl`` (by then a holder that died has lost the lock); ``None`` after that."""
        poll = min(1.0, job.lock_ttl / 10)
        give_up = self.clock.now() + timedelta(seconds=job.lock_ttl)
        while True:
            lease = await self.acquire(job)
            if lease is not None or self.clock.now() >= give_up:
                return lease
            await self.clock.sleep(poll)

    async def held_by(self, job: Job) -> str:
        """The ``locked`` skip's detail, naming the holders when the lock can tell."""
        n = job.max_running
        detail = "another run holds the job's lock" if n == 1 else f"{n} runs hold its {n} locks"
        holder = getattr(self.lock, "holder", None)
        if holder is None:
            return detail
        try:
            who = [await holder(slot) for slot in slots(job.name, n)]
        except Exception as exc:
            return f"{detail} (its holder could not be read: {type(exc).__name__}: {exc})"
        named = ", ".join(repr(w) for w in who if w)
        return f"{detail} (held by {named})" if named else f"{detail} (released since)"

    async def release_quietly(self, name: str, lease: Lease) -> None:
        try:
            await lease.release()
        except Exception:
            logger.exception("job %r: could not release the lock of a run that ended", name)
            self.unsure()


def slots(name: str, n: int) -> list[str]:
    """The lock names of a job's ``max_running`` slots: ``name``, ``name#2``, ..."""
    return [name, *(f"{name}#{i}" for i in range(2, n + 1))]
