"""A lock for replicas on Redis, built on redis-py's asyncio ``Lock`` (asyncio only).

Keys, per job name: ``{prefix}:lock:{name}`` (the lock: a ``SET NX PX`` with a token
``owner#random``, released by a compare-and-delete script), ``{prefix}:fence:{name}``
(incremented once per acquisition: the fencing token) and ``{prefix}:fire:{name}:{epoch_ms}``
(the same ``SET NX PX``: claims one scheduled fire, so it runs once even if the first
replica's run ended before another replica woke; keyed to the millisecond, so sub-second
interval fires stay apart). ``{prefix}:void:{token}`` marks the token of a command whose reply
was lost as void once it has been settled, so that a late copy of it takes nothing.

The ``SET NX PX`` is a script that also answers "yes" when the key already holds the same
token: resending it after a lost reply is safe, and needs no read-back (a read can be served
before the delayed command it is meant to observe).

Fencing tokens: within one Redis lifetime each acquisition gets the previous token plus one.
When the counter key is missing (first use, or a restart of a Redis without persistence), a
script seeds it from the server's clock in milliseconds since the epoch before incrementing,
so tokens keep growing across such a restart as long as the server's clock did not go back
and the job averaged under one acquisition per millisecond since the key was last seeded.
A clock set back, or a restore from an old snapshot taken while keys were seeded in the
future, can still hand out a smaller token: fencing is only as monotonic as that clock.

Every acquisition builds a *new* redis-py ``Lock`` object (``thread_local=False``): one
object shared by several tasks shares one token, and a late ``release()`` from one task
would then delete the lock another task (or replica) now holds.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, NamedTuple

from eventbus.extras import missing_extra

if _missing := missing_extra(__name__, "redis"):
    raise _missing

import anyio
from anyio.abc import AsyncResource
from redis.asyncio import Redis
from redis.asyncio.lock import Lock as _RedisPyLock
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError
from redis.exceptions import TimeoutError as RedisTimeoutError

from eventbus.backends.redis import check_async_redis, check_redis_server

__all__ = ["RedisLease", "RedisLock"]

if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

logger = logging.getLogger("scheduler")


class RedisLock(AsyncResource):
    """Mutual exclusion of a job's runs across every replica using the same Redis.

    Ownership: the client is the caller's; this class never closes it. :meth:`aclose` (and
    leaving ``async with``) settles what commands with a lost reply may have taken, once.

    Give it a client from :func:`eventbus.backends.redis.make_redis_client`: that client
    never resends a command whose reply was lost (a resent ``SET NX`` would find the lock it
    just took and report it held by someone else, a resent ``INCR`` skips a fencing token, a
    resent release reports a lock that was ours as lost). This class resends its own
    commands only where that is safe (its ``SET NX`` script recognises its own token; the
    fencing ``INCR``, where a repeat skips a token, which fencing tolerates), and voids what
    an unanswered command may have taken once Redis answers (:meth:`settle`).

    A command whose reply is lost (a timeout, a dropped connection, a cancelled call) may
    still run, even after the caller gave up on it: a stalled server runs what is in its
    socket buffers when it resumes. So the token of every such command is remembered, and
    :meth:`settle` voids it (compare-and-delete, plus a marker that makes a late replay of
    it take nothing) as soon as Redis answers: at the start of the next call of this lock,
    and in the background of a running :class:`~scheduler.Scheduler`. A lock or claim taken
    by a command nobody heard back from is therefore held no longer than that.

    :param client: an asyncio Redis client, ideally from
        :func:`eventbus.backends.redis.make_redis_client`
    :param prefix: the key prefix (several applications can share one Redis)
    :param owner: who this process is, written into every token so that a ``locked`` skip
        names the holder (default ``host:pid``, the scheduler's default ``replica``)
    :param check_server: at first use, warn once when the server would lose locks (an
        evicting ``maxmemory-policy``, no persistence; see
        :func:`eventbus.backends.redis.check_redis_server`); ``False`` when the caller
        checked that server already
    """

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = "scheduler",
        owner: str | None = None,
        check_server: bool = True,
    ) -> None:
        check_async_redis(client, "RedisLock", url_ok=False)
        self.client = client
        self.prefix = prefix
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}"
        self._settling = anyio.Lock()  # one settle at a time: the others wait for it
        self._pending: dict[tuple[str, bytes], int] = {}
        self._scripts: dict[str, AsyncScript] = {}
        self._unchecked = check_server

    def __repr__(self) -> str:
        return f"RedisLock(prefix={self.prefix!r}, owner={self.owner!r})"

    def key(self, name: str) -> str:
        """The Redis key of the lock of job ``name``."""
        return f"{self.prefix}:lock:{name}"

    async def acquire(self, name: str, *, ttl: float) -> RedisLease | None:
        """Take the lock with a fresh token, then the next fencing token.

        :raises redis.exceptions.ConnectionError: (or ``TimeoutError``) if Redis cannot be
            reached, or it cannot be told whether the lock was taken; the token is then
            remembered and voided once Redis answers
        """
        await self._before_use()
        key, token = self.key(name), self._new_token()
        taken = await self._take(key, token, ttl)
        if not taken.ours:
            return None
        fence_key = f"{self.prefix}:fence:{name}"
        try:
            try:
                fence = int(await self._script(_NEXT_FENCE)(keys=[fence_key]))
            except _UNSURE:  # it may have run: a retry at worst skips a token, never reuses one
                fence = int(await self._script(_NEXT_FENCE)(keys=[fence_key]))
        except BaseException:
            self._remember(key, token, _px(ttl))
            with anyio.CancelScope(shield=True), anyio.move_on_after(_GIVE_BACK_SECONDS):
                await self.settle()
            raise
        lock = _RedisPyLock(self.client, key, timeout=ttl, blocking=False, thread_local=False)
        lock.local.token = token
        return RedisLease(self, lock, name, fence, replayable=taken.unsure)

    async def claim_fire(self, name: str, fire: datetime, *, ttl: float) -> bool:
        await self._before_use()
        epoch_ms = (fire - _EPOCH) // timedelta(milliseconds=1)
        key = f"{self.prefix}:fire:{name}:{epoch_ms}"
        return (await self._take(key, self._new_token(), ttl)).ours

    async def holder(self, name: str) -> str | None:
        """The owner named in the token that holds the lock of ``name`` now, if any."""
        await self._check_first()
        value = await self.client.get(self.key(name))
        if value is None:
            return None
        text = value.decode(errors="replace") if isinstance(value, bytes) else str(value)
        owner, sep, _ = text.rpartition("#")
        return owner if sep else text

    async def settle(self) -> int:
        """Void what commands with an unknown outcome may have taken; how many remain.

        Stops at the first command that gets no answer (Redis is still away); never raises.
        Settles run one at a time (the scheduler's background settle and a fire's own settle
        before it takes a lock may overlap): a caller that finds one running waits for it,
        then settles what is still left.
        """
        async with self._settling:
            return await self._settle_pending()

    async def _settle_pending(self) -> int:
        for (key, token), px in list(self._pending.items()):
            try:
                held = await self._void(key, token, px)
            except _UNSURE:
                break
            except Exception:
                logger.exception("could not void %r in Redis; will try again", key)
                break
            self._pending.pop((key, token), None)
            level = logging.WARNING if held else logging.INFO
            logger.log(
                level,
                "voided %r of %r, left by a command whose reply was lost (%s)",
                key,
                self.owner,
                "it held the key until now" if held else "it held nothing",
            )
        return len(self._pending)

    async def aclose(self) -> None:
        """Settle once (see :meth:`settle`, bounded by the client's timeouts); the client stays
        open. What is still unsettled is logged: its keys expire with their TTL."""
        left = await self.settle()
        if left:
            logger.warning(
                "%r closed with %d command(s) of unknown outcome not voided; what they may "
                "have taken expires with its TTL",
                self,
                left,
            )

    @property
    def unsettled(self) -> int:
        """How many commands with an unknown outcome wait for :meth:`settle`."""
        return len(self._pending)

    async def _before_use(self) -> None:
        """Settle what earlier calls left unsettled, then check the server at first use."""
        if self._pending:
            await self.settle()
        await self._check_first()

    async def _check_first(self) -> None:
        """At first use, warn once if the server would lose locks.

        :raises redis.exceptions.ConnectionError: (or ``TimeoutError``) if the check cannot
            reach Redis: the call would not have either (it is checked again next time)
        """
        if not self._unchecked:
            return
        self._unchecked = False  # one check, however many tasks start at once
        try:
            await check_redis_server(
                self.client,
                purpose="locks",
                on_unsafe="warn",
                snapshots_suffice=True,
                after_loss=_AFTER_LOSS,
                log=logger,
            )
        except BaseException:
            self._unchecked = True
            raise

    def _new_token(self) -> bytes:
        return f"{self.owner}#{uuid.uuid4().hex}".encode()

    def _remember(self, key: str, token: bytes, px: int) -> None:
        if (key, token) not in self._pending:
            logger.warning(
                "Redis did not answer whether a command on %r ran; voiding it once Redis answers",
                key,
            )
        self._pending[(key, token)] = max(px, self._pending.get((key, token), 0))

    async def _take(self, key: str, token: bytes, ttl: float) -> _Taken:
        """Set ``key`` to ``token`` unless it holds another value or the token was voided.

        Sending it again with the same token is safe: if an earlier attempt ran, the key
        holds our token and the script says so. No read-back, so no race with a delayed
        earlier attempt. If any attempt went unanswered and the key is not ours in the end,
        the token is remembered: a delayed attempt could still take the key after this.
        """
        px = _px(ttl)
        unsure = False
        last: BaseException = RedisConnectionError(f"{key!r} was not attempted")
        try:
            for _ in range(_ATTEMPTS):
                try:
                    ours = await self._script(_TAKE)(
                        keys=[key, self._void_key(token)], args=[token, px]
                    )
                except _UNSURE as exc:
                    unsure, last = True, exc
                    continue
                if unsure and not ours:
                    self._remember(key, token, px)
                return _Taken(bool(ours), unsure)
        except BaseException:  # cancelled mid-command: it may run all the same
            self._remember(key, token, px)
            raise
        self._remember(key, token, px)
        raise last

    async def _void(self, key: str, token: bytes, marker_px: int) -> bool:
        """Compare-and-delete ``key``; with ``marker_px``, also make the token void (a late
        replay of a take with it then takes nothing). Whether it deleted our token."""
        result = await self._script(_VOID)(
            keys=[key, self._void_key(token)], args=[token, marker_px]
        )
        return bool(result)

    def _void_key(self, token: bytes) -> str:
        return f"{self.prefix}:void:{token.decode()}"

    def _script(self, source: str) -> AsyncScript:
        script = self._scripts.get(source)
        if script is None:
            script = self._scripts[source] = self.client.register_script(source)
        return script


class _Taken(NamedTuple):
    ours: bool
    unsure: bool  # an attempt went unanswered: a delayed copy of it may still run


def _px(ttl: float) -> int:
    return max(1, int(ttl * 1000))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# INCR, seeding a missing counter from the server's clock (ms since the epoch) first.
_NEXT_FENCE = """
if redis.call('EXISTS', KEYS[1]) == 0 then
    local t = redis.call('TIME')
    local ms = string.format('%03d', math.floor(tonumber(t[2]) / 1000))
    redis.call('SET', KEYS[1], t[1] .. ms)
end
return redis.call('INCR', KEYS[1])
"""

# SET NX PX that is safe to resend: 1 if the key holds this token (set now, or by an
# earlier copy of this command), 0 if it holds another one or the token was voided.
# KEYS: the key, the token's void marker; ARGV: the token, milliseconds to live.
_TAKE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then return 1 end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# Compare-and-delete; with a marker lifetime > 0, first mark the token void.
# KEYS: the key, the token's void marker; ARGV: the token, the marker's milliseconds (or 0).
_VOID = """
if tonumber(ARGV[2]) > 0 then redis.call('SET', KEYS[2], '1', 'PX', ARGV[2]) end
if redis.call('GET', KEYS[1]) == ARGV[1] then
    redis.call('DEL', KEYS[1])
    return 1
end
return 0
"""

#: What the first-use warning about the Redis server adds.
_AFTER_LOSS = (
    "A lock lost early lets another replica start the same job (its run gets the next fencing "
    "token)"
)
#: errors after which a command may or may not have run on the server
_UNSURE = (RedisConnectionError, RedisTimeoutError)
_ATTEMPTS = 3
#: how long a cancelled acquire may spend giving back the lock it took (shielded)
_GIVE_BACK_SECONDS = 2.0


class RedisLease:
    """One acquisition of a :class:`RedisLock`: its own redis-py ``Lock`` and token."""

    def __init__(
        self, owner: RedisLock, lock: _RedisPyLock, name: str, fence: int, *, replayable: bool
    ) -> None:
        self._owner = owner
        self._lock = lock
        self.name = name
        self._fence = fence
        self._token: bytes = lock.local.token
        # a delayed copy of the command that took the lock may still arrive: void the token
        # when releasing, so that the copy cannot take the lock again afterwards
        self._marker_px = _px(lock.timeout or 0) if replayable else 0

    def __repr__(self) -> str:
        return f"RedisLease(name={self.name!r}, fence={self._fence})"

    @property
    def fence(self) -> int:
        return self._fence

    @property
    def token(self) -> bytes:
        """The value this acquisition wrote into the lock's key (``owner#random``)."""
        return self._token

    async def extend(self) -> bool:
        """Reset the TTL, atomically checking that the token is still ours."""
        try:
            await self._lock.reacquire()
        except LockError:  # LockNotOwnedError included
            return False
        return True

    async def release(self) -> bool:
        """Compare-and-delete: deletes the key only if it still holds our token.

        If the reply is lost (the client does not retry), the delete is sent again; if that
        finds the key gone, it is reported as lost: the first delete may have run, or a
        Redis restart may have taken the lock away, and a false alarm is preferred to
        missing the latter. If no attempt is answered, the token is left to
        :meth:`RedisLock.settle`, and the error raised.
        """
        key = self._owner.key(self.name)
        last: BaseException | None = None
        for _ in range(_ATTEMPTS):
            try:
                return await self._owner._void(key, self._token, self._marker_px)
            except _UNSURE as exc:
                last = exc
        self._owner._remember(key, self._token, self._marker_px)
        assert last is not None
        raise last
