"""What the SQL failure store's writer says: one WARNING when an outage starts and one when it
ends, rate-limited lines about records spilled, refused or lost (the first ones, then a
summary with counts: :class:`~eventbus._core._log_limit.LogLimiter`), and a summary at close.

Split from :mod:`eventbus.backends._sql_writer`, which keeps the counts and decides when to
speak; this module only words it. Every line names the store (its ``repr``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from .._core._log_limit import LogLimiter
from .._failures import FailureRecord, describe_error

__all__ = ["WriterLog"]

logger = logging.getLogger("eventbus.failures")


class WriterLog:
    """The log lines of one ``FailureWriter``.

    :param describe: the store's ``repr``, read at each line (its buffered count changes)
    """

    def __init__(self, describe: Callable[[], str]) -> None:
        self._describe = describe
        self._warn_limit = LogLimiter(logger, level=logging.WARNING, burst=1)
        self._error_limit = LogLimiter(logger, level=logging.ERROR, burst=3)

    def outage(self, exc: BaseException, kept: int, *, first: bool) -> None:
        """A write failed: a WARNING for the *first* failure of an outage, DEBUG after."""
        if first:
            logger.warning(
                "failure store %s cannot write (%s); keeping %d records and retrying with "
                "backoff (logged once per outage)",
                self._describe(),
                describe_error(exc),
                kept,
            )
        else:
            logger.debug("failure store still unavailable: %s", describe_error(exc))

    def recovered(self, buffered: int) -> None:
        logger.warning(
            "failure store %s: database available again; writing %d buffered records",
            self._describe(),
            buffered,
        )

    def spilled(
        self, count: int, why: str, *, outage: bool, path: Path, total: int, when: str
    ) -> None:
        """*count* records went to the spill file (*total* so far); rate-limited."""
        if self._warn_limit.allow("spilled", "spilled records"):
            logger.warning(
                "failure store %s: %d records %s (database %s), spilled to %s (%d in all); "
                "they are written to the table %s",
                self._describe(),
                count,
                why,
                "unavailable" if outage else "slow",
                path,
                total,
                when,
            )

    def unreadable_spill(self, exc: OSError) -> None:
        logger.error(
            "failure store %s cannot read its spill file (%s); its records stay there "
            "and are read again at the next start",
            self._describe(),
            exc,
        )

    def lost(self, records: Sequence[FailureRecord], why: str) -> None:
        """Records stored nowhere; rate-limited."""
        for rec in records:
            if self._error_limit.allow("lost", "records NOT stored"):
                logger.error(
                    "failure store %s: %s; record NOT stored: %r", self._describe(), why, rec
                )

    def refused(self, why: str, what: object) -> None:
        """A record (or a spill file's line) the database or the file refused; rate-limited."""
        if self._error_limit.allow("refused", "records refused"):
            logger.error("%s; NOT stored: %r", why, what)

    def closed(
        self,
        *,
        overflowed: int,
        spilled: int,
        reingested: int,
        rejected: int,
        lost: int,
        waiting: Path | None,
    ) -> None:
        """At close: the rate limiters' counts, then one line if anything missed the table
        (*waiting*: the spill file still holding records for the next start)."""
        self._warn_limit.summarize()
        self._error_limit.summarize()
        if overflowed or lost or waiting is not None:
            later = "" if waiting is None else f"; the spill file {str(waiting)!r} is read"
            logger.warning(
                "failure store %s closed: %d records overflowed the buffer, %d spilled, %d "
                "re-ingested, %d rejected, %d lost%s",
                self._describe(),
                overflowed,
                spilled,
                reingested,
                rejected,
                lost,
                f"{later} at the next start" if later else "",
            )
