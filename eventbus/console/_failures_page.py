"""The failures page: the failure table, filtered and paginated; one failure in full with its
chain of causes; the actions an operator takes on them (retry, resolve with a note, purge
after a confirmation).

Built on the public API only: the store's ``query/get/update/purge`` and
``bus.retry_failures``. The store does every filter and the pagination (``offset``): a page
reads one page of rows. New query keywords are passed only when used, so a store written
against the first ``FailureStore`` Protocol serves every page that does not use them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.responses import Response

from eventbus import EventBus, FailureRecord, FailureStatus

from .._chain import causation_chain
from ._forms import parse_datetime, parse_int
from ._pages import Action, ActionError, Done, PageRequest, Panel, View
from ._store_wait import DEFAULT_STORE_TIMEOUT, StoreUnavailable, store_deadline

__all__ = ["FailuresPage"]

PER_PAGE = 50
MAX_NOTE = 500
MAX_NAME = 300
STATUSES = [s.value for s in FailureStatus]


@dataclasses.dataclass(frozen=True, slots=True)
class Filters:
    status: FailureStatus | None = None
    event: str | None = None
    listener: str | None = None
    correlation: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def store_filters(self) -> dict[str, Any]:
        """The filters as ``query()`` keywords; the newer ones only when used."""
        out: dict[str, Any] = {
            "status": self.status,
            "event": self.event,
            "listener": self.listener,
            "since": self.since,
        }
        if self.until is not None:
            out["until"] = self.until
        if self.correlation is not None:
            out["correlation"] = self.correlation
        return out

    def query(self) -> dict[str, str]:
        """The filters as query parameters (for links that keep them)."""
        out = {
            "status": self.status.value if self.status else "",
            "event": self.event or "",
            "listener": self.listener or "",
            "correlation": self.correlation or "",
            "since": _local(self.since),
            "until": _local(self.until),
        }
        return {k: v for k, v in out.items() if v}


def _local(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%dT%H:%M") if value else ""


class FailuresPage:
    """The failure table of *bus* (``bus.failures``).

    :param count_limit: most rows counted for the overview's figures and the purge
        confirmation (the Protocol has no count); beyond it a count shows as ``N+``
    :param max_attempts: a retry that fails this many times marks the row ``dead``
    :param store_timeout: seconds a page waits for the store (which waits for its database
        to write what it holds back); past it, the page says the store is unavailable
    """

    slug = "failures"
    title = "Failures"
    templates: tuple[str, str] | None = None

    def __init__(
        self,
        bus: EventBus,
        *,
        count_limit: int = 10_000,
        max_attempts: int = 5,
        store_timeout: float = DEFAULT_STORE_TIMEOUT,
    ) -> None:
        self.bus = bus
        self.count_limit = count_limit
        self.max_attempts = max_attempts
        self.store_timeout = store_timeout

    def __repr__(self) -> str:
        return f"FailuresPage(bus={self.bus!r})"

    def routes(self) -> Sequence[View | Action]:
        return [
            View("", self.index, "failures.list"),
            View("/purge", self.purge_form, "failures.purge_form"),
            Action("/purge", self.purge, "failures.purge"),
            Action("/retry", self.retry_matching, "failures.retry_matching"),
            View("/{failure_id}", self.detail, "failures.detail"),
            Action("/{failure_id}/retry", self.retry, "failures.retry"),
            Action("/{failure_id}/resolve", self.resolve, "failures.resolve"),
            Action("/{failure_id}/purge", self.purge_one, "failures.purge_one"),
        ]

    async def panel(self, request: PageRequest) -> Panel:
        store = self.bus.failures
        try:
            with store_deadline(store, self.store_timeout):
                await store.flush()
                pending = await store.query(status=FailureStatus.PENDING, limit=self.count_limit)
                dead = await store.query(status=FailureStatus.DEAD, limit=self.count_limit)
        except StoreUnavailable as exc:
            return Panel(
                title=self.title,
                href=request.url("/failures"),
                rows=[("store", "unavailable")],
                alert=True,
                notice=exc.message,
            )
        return Panel(
            title=self.title,
            href=request.url("/failures"),
            rows=[("pending", self._count(pending)), ("dead", self._count(dead))],
            alert=bool(pending or dead),
        )

    def _count(self, rows: Sequence[object]) -> str:
        return f"{len(rows)}+" if len(rows) >= self.count_limit else str(len(rows))

    # -- views -----------------------------------------------------------------------------------

    async def index(self, request: PageRequest) -> Response:
        errors: list[str] = []
        filters = self._filters(request, errors)
        page = parse_int(request.query.get("page"), "page", 1, 10_000, errors) or 1
        rows: list[FailureRecord] = []
        notices: list[str] = []
        if not errors:
            store = self.bus.failures
            paging: dict[str, Any] = {"offset": (page - 1) * PER_PAGE} if page > 1 else {}
            try:
                with store_deadline(store, self.store_timeout):
                    await store.flush()  # what the bus recorded so far is listed
                    # One row more than a page says whether there is a next one.
                    rows = await store.query(
                        **filters.store_filters(), limit=PER_PAGE + 1, **paging
                    )
            except StoreUnavailable as exc:
                notices.append(exc.message)
        query = filters.query()
        return request.render(
            "failures.html",
            status=400 if errors else 503 if notices else 200,
            errors=errors,
            notices=notices,
            filters=filters,
            form=query,
            statuses=STATUSES,
            rows=rows[:PER_PAGE],
            first=(page - 1) * PER_PAGE + 1,
            prev_url=request.url("/failures", **query, page=page - 1) if page > 1 else None,
            next_url=(
                request.url("/failures", **query, page=page + 1) if len(rows) > PER_PAGE else None
            ),
        )

    def _filters(self, request: PageRequest, errors: list[str]) -> Filters:
        q = request.query
        status = q.get("status") or None
        if status is not None and status not in STATUSES:
            errors.append(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
            status = None
        texts: dict[str, str | None] = {}
        for name in ("event", "listener", "correlation"):
            value = (q.get(name) or "").strip() or None
            if value is not None and len(value) > MAX_NAME:
                errors.append(f"{name} is {len(value)} characters long; at most {MAX_NAME}")
                value = None
            texts[name] = value
        since = parse_datetime(q.get("since"), "since", errors)
        until = parse_datetime(q.get("until"), "until", errors)
        if since and until and since >= until:
            errors.append("since must be before until")
        return Filters(
            status=FailureStatus(status) if status else None,
            event=texts["event"],
            listener=texts["listener"],
            correlation=texts["correlation"],
            since=since,
            until=until,
        )

    async def detail(self, request: PageRequest) -> Response:
        rec = await self._record(request)
        with store_deadline(self.bus.failures, self.store_timeout):
            chain = await causation_chain(self.bus.failures, rec)
        return request.render(
            "failure.html",
            rec=rec,
            chain=chain,
            retryable=rec.status == FailureStatus.PENDING and rec.payload_ok,
            listener_here=self.bus.listener(rec.listener) is not None,
            max_note=MAX_NOTE,
        )

    async def purge_form(self, request: PageRequest) -> Response:
        errors: list[str] = []
        status, days = self._purge_args(
            request.query.get("status"), request.query.get("older_than_days"), errors
        )
        matched: int | None = None
        if not errors:
            matched = await self._matching(status, days)
        return request.render(
            "failures_purge.html",
            status=400 if errors else 200,
            errors=errors,
            statuses=STATUSES,
            chosen=status.value if status else "",
            days=days,
            matched=matched,
            capped=matched is not None and matched >= self.count_limit,
        )

    async def _matching(self, status: FailureStatus | None, days: int) -> int:
        """How many rows a purge would delete (at most ``count_limit``): its ``before`` is
        the query's ``until``."""
        before = datetime.now(UTC) - timedelta(days=days)
        store = self.bus.failures
        with store_deadline(store, self.store_timeout):
            rows = await store.query(status=status, until=before, limit=self.count_limit)
        return len(rows)

    def _purge_args(
        self, status: str | None, days: str | None, errors: list[str]
    ) -> tuple[FailureStatus | None, int]:
        if status and status not in STATUSES:
            errors.append(f"status must be one of {', '.join(STATUSES)} or empty, not {status!r}")
            status = None
        n = parse_int(days if days not in (None, "") else "0", "older_than_days", 0, 36_500, errors)
        return (FailureStatus(status) if status else None), (n or 0)

    # -- actions ---------------------------------------------------------------------------------

    async def _record(self, request: PageRequest) -> FailureRecord:
        failure_id = str(request.path_params["failure_id"])
        rec = None
        if len(failure_id) <= 100:
            with store_deadline(self.bus.failures, self.store_timeout):
                await self.bus.failures.flush()
                rec = await self.bus.failures.get(failure_id)
        if rec is None:
            raise ActionError(f"There is no failure with id {failure_id[:100]!r}.", status=404)
        return rec

    async def _store_answers(self) -> None:
        """Refuse an action (503) while the store cannot write, before it does anything: a
        deadline in its middle could cut a retry between the listener's run and its row."""
        with store_deadline(self.bus.failures, self.store_timeout):
            await self.bus.failures.flush()

    async def retry(self, request: PageRequest) -> Done:
        rec = await self._record(request)
        if rec.status != FailureStatus.PENDING:
            raise ActionError(
                f"Failure {rec.id} is {rec.status.value}; only pending failures are retried."
            )
        report = await self.bus.retry_failures(ids=[rec.id], max_attempts=self.max_attempts)
        [item] = report.items
        reason = f": {item.reason}" if item.reason else ""
        return Done(
            f"Retried {rec.listener} for {rec.event_name}: {item.result}{reason}.",
            target=rec.id,
            back=request.url(f"/failures/{rec.id}"),
        )

    async def retry_matching(self, request: PageRequest) -> Done:
        event = request.field("event", max_length=MAX_NAME) or None
        listener = request.field("listener", max_length=MAX_NAME) or None
        correlation = request.field("correlation", max_length=MAX_NAME) or None
        by_chain: dict[str, Any] = {"correlation": correlation} if correlation else {}
        await self._store_answers()
        report = await self.bus.retry_failures(
            event=event, listener=listener, max_attempts=self.max_attempts, **by_chain
        )
        if not report.items:
            raise ActionError("No pending failure matches; nothing was retried.")
        target = f"event={event or '*'} listener={listener or '*'}"
        if correlation:
            target += f" correlation={correlation}"
        return Done(f"{report}.", target=target)

    async def resolve(self, request: PageRequest) -> Done:
        rec = await self._record(request)
        note = request.field("note", max_length=MAX_NOTE)
        if not note:
            raise ActionError("Write a note saying why this failure is resolved.")
        if rec.status == FailureStatus.RESOLVED:
            raise ActionError(f"Failure {rec.id} is already resolved.")
        await self.bus.failures.update(
            rec.replace(
                status=FailureStatus.RESOLVED,
                resolved_at=datetime.now(UTC),
                note=f"{note} (resolved by {request.user})",
            )
        )
        return Done(
            f"Marked failure {rec.id} resolved.",
            target=rec.id,
            back=request.url(f"/failures/{rec.id}"),
        )

    async def purge_one(self, request: PageRequest) -> Done:
        rec = await self._record(request)
        if request.field("confirm") != "yes":
            raise ActionError("Tick the confirmation box: a purged failure cannot be restored.")
        removed = await self.bus.failures.purge(ids=[rec.id])
        return Done(
            f"Purged failure {rec.id} ({rec.listener} for {rec.event_name})."
            if removed
            else f"Failure {rec.id} was purged already.",
            target=rec.id,
            back=request.url("/failures"),
        )

    async def purge(self, request: PageRequest) -> Done:
        errors: list[str] = []
        status, days = self._purge_args(
            request.field("status"), request.field("older_than_days"), errors
        )
        if errors:
            raise ActionError("; ".join(errors) + ".")
        if request.field("confirm") != "yes":
            raise ActionError("Tick the confirmation box: purged failures cannot be restored.")
        before = datetime.now(UTC) - timedelta(days=days)
        await self._store_answers()
        removed = await self.bus.failures.purge(status=status, before=before)
        which = f"{status.value} " if status else ""
        age = f" older than {days} day(s)" if days else ""
        return Done(
            f"Purged {removed} {which}failure(s){age}.",
            target=f"status={status.value if status else '*'} older_than_days={days}",
            back=request.url("/failures"),
        )
