"""Who is signed in to the console: the token login form or the application's own login
(``auth=``), and the signed session cookie that follows either.

:class:`Login` is a part the :class:`~eventbus.console.Console` owns: it keeps the secret, the
auth callable, the cookie signer, the revoked sessions and the login throttle, and is handed
the console's page renderer, form reader and action log, so that its error pages look like
every other page and every login, failed login and logout is in the log.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from ._audit import AuditLog, AuditOutcome
from ._pages import console_url
from ._requests import client_address, safe_next
from ._security import (
    LOGIN_COOKIE,
    LOGIN_TTL,
    SESSION_COOKIE,
    AuthCallable,
    Session,
    SessionSigner,
    secret_matches,
    set_cookie,
)
from ._sessions import LoginThrottle, SessionRevocations, retry_after

__all__ = ["MAX_USER", "Login"]

logger = logging.getLogger("eventbus.console")

MAX_USER = 64

#: renders a console template: ``render(request, template, status=, session=, **context)``
Render = Callable[..., HTMLResponse]


class Login:
    """Sessions of one console: the login form (with *secret*) or *auth*, never both."""

    def __init__(
        self,
        *,
        secret: str | None,
        auth: AuthCallable | None,
        login_url: str | None,
        signer: SessionSigner,
        render: Render,
        read_form: Callable[[Request], Awaitable[FormData | Response]],
        revocations: SessionRevocations,
        throttle: LoginThrottle,
        audit: AuditLog,
    ) -> None:
        self.secret = secret
        self.auth = auth
        self.login_url = login_url
        self.signer = signer
        self.revocations = revocations
        self.throttle = throttle
        self.audit = audit
        self._render = render
        self._read_form = read_form

    async def session(self, request: Request) -> tuple[Session | None, str | None]:
        """The request's session and, when a new cookie must be set, its value."""
        session = self.signer.load_session(request.cookies.get(SESSION_COOKIE))
        if session is not None and await self.revocations.is_revoked(session.sid):
            session = None  # logged out: a copy of the cookie is no session
        if self.auth is None:
            return session, None
        user: Any = self.auth(request)
        if inspect.isawaitable(user):
            user = await user
        if not user:
            return None, None
        if session is not None and session.user == user:
            return session, None
        fresh, value = self.signer.new_session(str(user))
        return fresh, value

    def set_session(self, response: Response, request: Request, value: str) -> None:
        set_cookie(
            response,
            request,
            SESSION_COOKIE,
            value,
            max_age=int(self.signer.ttl.total_seconds()),
            path=cookie_path(request),
        )

    def not_signed_in(self, request: Request) -> Response:
        """Where a request without a session goes: the login form, *login_url*, or a 401."""
        if self.auth is not None:
            if self.login_url:
                return RedirectResponse(self.login_url, status_code=303)
            return self._render(
                request,
                "error.html",
                status=401,
                title="Not signed in",
                message="Sign in to the application first; the console uses its login.",
            )
        target = request.url.path if request.method == "GET" else None
        return RedirectResponse(console_url(request, "/login", next=target), status_code=303)

    async def logout(self, request: Request, session: Session) -> None:
        """End *session*: its id is revoked for as long as its cookie could be used."""
        await self.revocations.revoke(session.sid, ttl=self.signer.ttl)
        self._log(request, session.user, "logout", "ok", "signed out; the session is ended")

    async def form(
        self,
        request: Request,
        *,
        error: str | None = None,
        next_path: object = None,
        status: int | None = None,
    ) -> Response:
        """``GET /login``: the form, with a fresh nonce in a short-lived signed cookie."""
        if self.secret is None:
            return self.not_signed_in(request)
        nonce, cookie = self.signer.new_login_nonce()
        if next_path is None:
            next_path = request.query_params.get("next")
        response = self._render(
            request,
            "login.html",
            status=status or (401 if error else 200),
            nonce=nonce,
            error=error,
            next=safe_next(request, next_path),
        )
        set_cookie(
            response, request, LOGIN_COOKIE, cookie, max_age=LOGIN_TTL, path=cookie_path(request)
        )
        return response

    async def submit(self, request: Request) -> Response:
        """``POST /login``: the nonce, a name, the token (compared in constant time)."""
        if self.secret is None:
            return self.not_signed_in(request)
        form = await self._read_form(request)
        if isinstance(form, Response):
            return form
        nonce = form.get("nonce")
        if not (
            isinstance(nonce, str)
            and self.signer.login_nonce_matches(request.cookies.get(LOGIN_COOKIE), nonce)
        ):
            return self._render(
                request,
                "error.html",
                status=403,
                title="Login form expired",
                message="The login form expired or came from another site; load it again.",
                back=console_url(request, "/login"),
            )
        user, token = form.get("user"), form.get("token")
        user = user.strip() if isinstance(user, str) else ""
        if not user or len(user) > MAX_USER or not user.isprintable():
            return await self.form(
                request,
                error=f"Give your name (1 to {MAX_USER} printable characters): "
                "it is recorded with every action you take.",
                next_path=form.get("next"),
            )
        address = client_address(request)
        wait = self.throttle.wait(address)
        if wait:
            self._log(request, user, "login", "refused", "too many failed logins from this address")
            response = await self.form(
                request,
                error=f"Too many failed logins from your address: try again in {_minutes(wait)}.",
                next_path=form.get("next"),
                status=429,
            )
            response.headers["Retry-After"] = retry_after(wait)
            return response
        if not (isinstance(token, str) and secret_matches(token, self.secret)):
            self.throttle.failed(address)
            logger.warning("console login refused for %r from %s", user, address)
            self._log(request, user, "login", "refused", "wrong token")
            return await self.form(request, error="Wrong token.", next_path=form.get("next"))
        self.throttle.succeeded(address)
        _session, value = self.signer.new_session(user)
        self._log(request, user, "login", "ok", "signed in with the console token")
        next_path = safe_next(request, form.get("next")) or console_url(request, "/")
        response = RedirectResponse(next_path, status_code=303)
        self.set_session(response, request, value)
        response.delete_cookie(LOGIN_COOKIE, path=cookie_path(request))
        return response

    def _log(
        self, request: Request, user: str, action: str, outcome: AuditOutcome, message: str
    ) -> None:
        self.audit.append(
            at=datetime.now(UTC),
            user=user,
            client=client_address(request),
            action=action,
            target="",
            outcome=outcome,
            message=message,
        )


def _minutes(seconds: float) -> str:
    minutes = math.ceil(seconds / 60)
    return "a minute" if minutes <= 1 else f"{minutes} minutes"


def cookie_path(request: Request) -> str:
    """The console's mount point: its cookies are sent to it alone."""
    return request.scope.get("root_path", "").rstrip("/") or "/"
