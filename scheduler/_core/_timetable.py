"""The loop's heap of next fire times.

Entries are ``(fire_time, seq, job_name, generation)``. Replacing or removing a job bumps
its generation, which turns its old entries into no-ops; they are dropped when popped, or
all at once when stale entries outnumber live ones.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from datetime import UTC, datetime

from .._jobs import Job

__all__ = ["Timetable"]

Entry = tuple[datetime, int, str, int]


class Timetable:
    """Next fire times of the jobs in ``jobs`` (the registry's dict, read, never written)."""

    def __init__(self, jobs: Mapping[str, Job]) -> None:
        self._jobs = jobs
        self._heap: list[Entry] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, when: datetime, job: Job) -> None:
        when = when.astimezone(UTC)
        heapq.heappush(self._heap, (when, next(self._seq), job.name, job.generation))
        if len(self._heap) > 2 * len(self._jobs) + 64:
            self._heap = [e for e in self._heap if self.job_of(e) is not None]
            heapq.heapify(self._heap)

    def earliest(self) -> datetime | None:
        return self._heap[0][0] if self._heap else None

    def pop_due(self, wall: datetime) -> tuple[datetime, Job] | None:
        """The earliest live entry due by ``wall``, removed; ``None`` if nothing is due."""
        while self._heap and self._heap[0][0] <= wall:
            entry = heapq.heappop(self._heap)
            job = self.job_of(entry)
            if job is not None:
                return entry[0], job
        return None

    def next_for(self, job: Job) -> datetime | None:
        """The next fire the loop holds for ``job`` (a scan: for inspection, not the loop)."""
        times = [e[0] for e in self._heap if e[2] == job.name and e[3] == job.generation]
        return min(times, default=None)

    def job_of(self, entry: Entry) -> Job | None:
        job = self._jobs.get(entry[2])
        return job if job is not None and job.generation == entry[3] else None

    def clear(self) -> None:
        self._heap.clear()
