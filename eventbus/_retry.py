"""Re-running recorded failures (filled in by the failure-table work)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["RetryReport", "retry_failures"]


@dataclasses.dataclass(frozen=True, slots=True)
class RetryReport:
    resolved: int = 0
    failed: int = 0
    dead: int = 0
    skipped: int = 0


async def retry_failures(
    bus: EventBus,
    *,
    event: str | None = None,
    listener: str | None = None,
    limit: int | None = None,
    max_attempts: int = 5,
) -> RetryReport:
    raise NotImplementedError("retry_failures is being written")
