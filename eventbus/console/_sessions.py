"""What the console remembers about sessions and logins beyond the signed cookie: the sessions
ended by a logout (so that a copy of the cookie is refused), and the failed logins per client
address (so that the token cannot be guessed at speed); and an action's result, carried in
its redirect to whichever process serves the next page.

A session cookie is signed, not stored: without a record of logouts, a copy taken before a
logout would work until it expires. :class:`MemorySessionRevocations` keeps that record in
the process; replicas of an application share one (``eventbus.console.sql``'s, or any object
with the two methods of :class:`SessionRevocations`) so that a logout ends the session on
every one of them.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol, runtime_checkable

from ._audit import AuditEntry
from ._security import Session, SessionSigner

__all__ = ["LoginThrottle", "MemorySessionRevocations", "SessionRevocations"]

#: characters of an action's message carried in its result link
MAX_RESULT = 1000


@runtime_checkable
class SessionRevocations(Protocol):
    """**Protocol:** the sessions ended by a logout, by session id.

    * ``revoke(sid, ttl=)`` keeps the id at least *ttl* (the longest its cookie may still be
      used); after that it may be forgotten.
    * Every process that serves the console must see the same record for a logout to reach
      all of them.
    """

    async def revoke(self, sid: str, *, ttl: timedelta) -> None:
        """Record that session *sid* ended; its cookie is refused from now on."""
        ...

    async def is_revoked(self, sid: str) -> bool:
        """Whether session *sid* was ended by a logout."""
        ...


class MemorySessionRevocations:
    """Revoked session ids in this process (the default): a logout ends the session in every
    console of this process that shares the object, not in other processes.

    :param clock: seconds on a clock that never steps (default ``time.monotonic``)
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"MemorySessionRevocations(revoked={len(self._until)})"

    def __len__(self) -> int:
        return len(self._until)

    async def revoke(self, sid: str, *, ttl: timedelta) -> None:
        now = self._clock()
        self._until = {s: t for s, t in self._until.items() if t > now}  # the expired go
        self._until[sid] = now + ttl.total_seconds()

    async def is_revoked(self, sid: str) -> bool:
        until = self._until.get(sid)
        return until is not None and until > self._clock()


class LoginThrottle:
    """Refuses logins from a client address after *failures* wrong tokens within *window*,
    until the oldest of them leaves the window (a success clears the address's count).

    In-process: each process counts on its own, so behind *n* processes an address gets up
    to *n* times the failures. Addresses are those the console sees: behind a proxy, pass
    ``trusted_proxies=`` to the console so that they are the clients', not the proxy's.

    :param failures: wrong tokens allowed per address within *window*
    :param window: how long a failure counts
    :param clock: seconds on a clock that never steps (default ``time.monotonic``)
    :param max_addresses: addresses remembered at most; the least recently failed go first
    """

    def __init__(
        self,
        *,
        failures: int = 10,
        window: timedelta = timedelta(minutes=15),
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = 10_000,
    ) -> None:
        for name, value in (("failures", failures), ("max_addresses", max_addresses)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a whole number, at least 1")
        if window <= timedelta(0):
            raise ValueError(f"window={window!r} must be positive")
        self.failures = failures
        self.window = window.total_seconds()
        self._clock = clock
        self._max = max_addresses
        self._failed: collections.OrderedDict[str, collections.deque[float]] = (
            collections.OrderedDict()
        )

    def __repr__(self) -> str:
        return (
            f"LoginThrottle(failures={self.failures}, window={self.window:g}s, "
            f"addresses={len(self._failed)})"
        )

    def wait(self, address: str) -> float:
        """Seconds until *address* may try again (0: now)."""
        times = self._recent(address)
        if times is None or len(times) < self.failures:
            return 0.0
        return max(0.0, times[-self.failures] + self.window - self._clock())

    def failed(self, address: str) -> None:
        """Count a wrong token from *address*."""
        times = self._recent(address) or collections.deque(maxlen=self.failures)
        times.append(self._clock())
        self._failed[address] = times
        self._failed.move_to_end(address)
        while len(self._failed) > self._max:
            self._failed.popitem(last=False)

    def succeeded(self, address: str) -> None:
        """A right token from *address*: its failures no longer count."""
        self._failed.pop(address, None)

    def _recent(self, address: str) -> collections.deque[float] | None:
        times = self._failed.get(address)
        if times is None:
            return None
        horizon = self._clock() - self.window
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failed[address]
            return None
        return times


def result_token(signer: SessionSigner, session: Session, entry: AuditEntry) -> str:
    """The ``?done=`` value that shows *entry* (an action's result) on the next page, signed
    for *session*: any process serving that page shows it (an id in one process's action log
    meant nothing to another)."""
    return signer.sign_result(
        session, (entry.action, entry.target, entry.outcome, entry.message[:MAX_RESULT])
    )


def shown_result(signer: SessionSigner, session: Session, token: str | None) -> AuditEntry | None:
    """The result a ``?done=`` value carries, if it was signed for *session* recently; a
    token tampered with, expired or another session's shows nothing."""
    if token is None or len(token) > 4 * MAX_RESULT:
        return None
    loaded = signer.load_result(session, token)
    if loaded is None or len(loaded[0]) != 4:
        return None
    (action, target, outcome, message), at = loaded
    if outcome not in ("ok", "refused", "error"):
        return None
    return AuditEntry(
        id=0,
        at=at,
        user=session.user,  # the result is shown to the session that acted only
        client="",
        action=action,
        target=target,
        outcome=outcome,  # type: ignore[arg-type]  # checked above
        message=message,
    )


def retry_after(seconds: float) -> str:
    """A ``Retry-After`` value: whole seconds, rounded up."""
    return str(max(1, math.ceil(seconds)))
