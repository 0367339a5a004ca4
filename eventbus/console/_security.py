"""Who may use the console: the login secret, signed session cookies, CSRF tokens, headers.

A session is a cookie signed with a key derived from the login secret (so replicas that share
the secret share sessions, and changing the secret ends them all) that holds the user's name,
a CSRF token, a random session id and the time of login; it expires after ``session_ttl``,
and a logout revokes its id (``_sessions``). Every state-changing form carries the CSRF token,
compared in constant time. The login form itself is protected by a random nonce kept in a
short-lived cookie and repeated in the form (double submit): a page on another site can
neither read it nor, with ``SameSite=Strict``, send it.

An action's result travels in its redirect, signed and bound to the session (``?done=``), so
whichever process serves the next page shows it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._exceptions import EventBusError

__all__ = [
    "AuthCallable",
    "LoginSecretError",
    "Session",
    "SessionSigner",
    "check_login_secret",
    "secret_matches",
    "security_headers",
]

MIN_SECRET = 16
SESSION_COOKIE = "eventbus_console"
LOGIN_COOKIE = "eventbus_console_login"
LOGIN_TTL = 600  # seconds a login form stays valid
RESULT_TTL = 600  # seconds an action's result link shows the result
MIN_SESSION_KEY = 16

#: An application's own login: given the request, the signed-in user's name, or ``None``.
AuthCallable = Callable[[Request], "Awaitable[str | None] | str | None"]

#: Sent with every console response. The CSP allows no inline script or style, no plugin, no
#: framing; forms post only to the console's own origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}


class LoginSecretError(EventBusError, ValueError):
    """A console login secret that is too weak to guard actions on the bus."""

    def __init__(self, problem: str) -> None:
        super().__init__(
            f"the console's login secret is {problem}; use at least {MIN_SECRET} characters, "
            "e.g. python -c 'import secrets; print(secrets.token_urlsafe(24))'"
        )


def check_login_secret(secret: str) -> str:
    """The secret stripped of surrounding whitespace; :raises LoginSecretError: if too short."""
    stripped = secret.strip()
    if not stripped:
        raise LoginSecretError("blank")
    if len(stripped) < MIN_SECRET:
        raise LoginSecretError(f"{len(stripped)} characters long")
    return stripped


def check_session_key(key: str | bytes) -> str | bytes:
    """*key* if it is long enough to sign sessions; :raises ValueError: naming its length."""
    if len(key) < MIN_SESSION_KEY:
        unit = "characters" if isinstance(key, str) else "bytes"
        raise ValueError(
            f"session_key is {len(key)} {unit} long; use at least {MIN_SESSION_KEY}, e.g. "
            "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    return key


def secret_matches(given: str, secret: str) -> bool:
    """Constant-time comparison of what the login form sent with the configured secret."""
    return secrets.compare_digest(given.strip().encode(), secret.encode())


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    """A signed-in user: the name shown in the action log, the CSRF token of their forms, and
    the id a logout revokes."""

    user: str
    csrf: str
    sid: str


class SessionSigner:
    """Signs and checks the session and login cookies with a key derived from *key*."""

    def __init__(self, key: str | bytes, *, ttl: timedelta) -> None:
        raw = key.encode() if isinstance(key, str) else key
        derived = hmac.new(raw, b"eventbus.console.session", hashlib.sha256).digest()
        self._session = URLSafeTimedSerializer(derived, salt="eventbus.console.session")
        self._login = URLSafeTimedSerializer(derived, salt="eventbus.console.login")
        self._derived = derived
        self.ttl = ttl

    def new_session(self, user: str) -> tuple[Session, str]:
        """A fresh session for *user* and its cookie value."""
        session = Session(user=user, csrf=secrets.token_urlsafe(24), sid=secrets.token_urlsafe(18))
        data = {"u": session.user, "c": session.csrf, "s": session.sid}
        return session, self._session.dumps(data)

    def load_session(self, cookie: str | None) -> Session | None:
        """The session in a cookie, or ``None`` if absent, tampered with, expired, or of a
        version without a session id (it could not be revoked: signing in again makes one)."""
        data = _loads(self._session, cookie, int(self.ttl.total_seconds()))
        if not isinstance(data, dict):
            return None
        user, csrf, sid = data.get("u"), data.get("c"), data.get("s")
        if not (isinstance(user, str) and isinstance(csrf, str) and isinstance(sid, str)):
            return None
        return Session(user=user, csrf=csrf, sid=sid)

    def _results(self, session: Session) -> URLSafeTimedSerializer:
        # Bound to the session by the salt, not by its id in the payload: the redirect's URL
        # carries what the page shows (the session's user and the signing time need no room).
        return URLSafeTimedSerializer(self._derived, salt=f"eventbus.console.result:{session.sid}")

    def sign_result(self, session: Session, result: Sequence[str]) -> str:
        """An action's *result* (text fields, in order) for the redirect that shows it,
        bound to *session*; the time it was signed comes back with it."""
        return self._results(session).dumps(list(result))

    def load_result(self, session: Session, token: str | None) -> tuple[list[str], datetime] | None:
        """The fields in *token* and when they were signed, if they were signed for
        *session* within :data:`RESULT_TTL`."""
        if not token:
            return None
        try:
            data, signed = self._results(session).loads(
                token, max_age=RESULT_TTL, return_timestamp=True
            )
        except BadSignature:  # SignatureExpired is a BadSignature
            return None
        if not (isinstance(data, list) and all(isinstance(v, str) for v in data)):
            return None
        return data, signed

    def new_login_nonce(self) -> tuple[str, str]:
        """A nonce for the login form, and the signed cookie that must come back with it."""
        nonce = secrets.token_urlsafe(24)
        return nonce, self._login.dumps(nonce)

    def login_nonce_matches(self, cookie: str | None, given: str) -> bool:
        nonce = _loads(self._login, cookie, LOGIN_TTL)
        return isinstance(nonce, str) and secrets.compare_digest(nonce.encode(), given.encode())


def _loads(serializer: URLSafeTimedSerializer, value: str | None, max_age: int) -> Any:
    if not value:
        return None
    try:
        return serializer.loads(value, max_age=max_age)
    except BadSignature:  # SignatureExpired is a BadSignature
        return None


def csrf_matches(session: Session, given: object) -> bool:
    return isinstance(given, str) and secrets.compare_digest(given.encode(), session.csrf.encode())


def set_cookie(
    response: Response, request: Request, name: str, value: str, *, max_age: int, path: str
) -> None:
    """An HttpOnly, SameSite=Strict cookie, Secure when the console is served over HTTPS (the
    request's scheme: behind a proxy that terminates TLS, the console's ``trusted_proxies=``
    makes it the one the proxy's ``X-Forwarded-Proto`` says)."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=path,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def security_headers(app: ASGIApp) -> ASGIApp:
    """Wrap *app* so that every response carries :data:`SECURITY_HEADERS` and no caching."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for key, value in SECURITY_HEADERS.items():
                    if key.lower().encode() not in present:
                        headers.append((key.lower().encode(), value.encode()))
                if b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await app(scope, receive, send_with_headers)

    return wrapped
