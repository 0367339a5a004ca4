"""The console: an ASGI application of server-rendered pages, mountable anywhere.

``app.mount("/ops", Console(pages, secret=...))``. Every route but the login page and the
static files needs a session; every ``POST`` goes through :meth:`Console._run_action`, which
applies the rules of :mod:`._pages` (read-only, CSRF, the action log) before the page's code.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from ._audit import AuditLog, AuditOutcome, MemoryAuditLog
from ._login import Login, cookie_path
from ._pages import Action, ActionError, ConsolePage, PageRequest, View, console_url
from ._requests import client_address, read_form, safe_next
from ._security import (
    SESSION_COOKIE,
    AuthCallable,
    Session,
    SessionSigner,
    check_login_secret,
    check_session_key,
    csrf_matches,
    security_headers,
)
from ._sessions import (
    LoginThrottle,
    MemorySessionRevocations,
    SessionRevocations,
    result_token,
    shown_result,
)
from ._template_filters import install_filters

__all__ = ["Console"]

logger = logging.getLogger("eventbus.console")


class Console:
    """The operator console: login, an overview, the pages given, and the action log.

    Exactly one of *secret* and *auth* is required.

    :param pages: the sections, in menu order (see :func:`eventbus.console.bus_pages`)
    :param secret: the login token or password (at least 16 characters), compared in constant
        time; the session cookies are signed with a key derived from it
    :param auth: the application's own login instead: called with each request, returns the
        user's name or ``None`` (then the console answers 401, or redirects to *login_url*)
    :param login_url: where *auth* users who are not signed in are sent
    :param session_key: signs the session cookies, CSRF tokens and action results (at least
        16 characters); required with *auth* (give every process the same, or a form posted
        to another process is refused); with *secret*, a key derived from it by default
    :param session_ttl: how long a session lasts after login (a logout ends it sooner)
    :param revocations: where logouts are kept (default: in this process, so behind several
        processes a copy of the cookie still opens the others until its TTL; share one, e.g.
        ``eventbus.console.sql.SqlSessionRevocations``, and a logout reaches every process)
    :param login_throttle: failed logins allowed per client address (default: 10 in 15
        minutes, counted in this process)
    :param trusted_proxies: the addresses (or networks) of reverse proxies whose
        ``X-Forwarded-Proto`` and ``X-Forwarded-For`` are believed: the cookies are then
        ``Secure`` when the proxy says HTTPS, and the client address (action log, login
        throttle) is the one the proxy saw. Default: none (anyone can send those headers)
    :param read_only: show everything, allow no action (every ``POST`` is a 403)
    :param audit: the action log (default: the newest 10,000 in memory)
    :param title: shown in the header and the window title
    :raises ValueError: unless exactly one of *secret* and *auth* is given; for *auth* without
        *session_key*, or a *session_key* shorter than 16 characters
    :raises LoginSecretError: for a secret shorter than 16 characters
    """

    def __init__(
        self,
        pages: Sequence[ConsolePage] = (),
        *,
        secret: str | None = None,
        auth: AuthCallable | None = None,
        login_url: str | None = None,
        session_key: str | bytes | None = None,
        session_ttl: timedelta = timedelta(hours=8),
        revocations: SessionRevocations | None = None,
        login_throttle: LoginThrottle | None = None,
        trusted_proxies: str | Sequence[str] | None = None,
        read_only: bool = False,
        audit: AuditLog | None = None,
        title: str = "eventbus console",
    ) -> None:
        if (secret is None) == (auth is None):
            raise ValueError(
                "Console() needs exactly one of secret= (a login form) and auth= (the "
                "application's own login)"
            )
        if auth is not None and session_key is None:
            raise ValueError(
                "Console(auth=...) needs session_key=: the key that signs its session cookies "
                "and CSRF tokens, the same in every process that serves the console (with a "
                "key of its own, each process refused the forms of the others)"
            )
        checked = check_login_secret(secret) if secret is not None else None
        key = check_session_key(session_key) if session_key is not None else checked
        assert key is not None
        self._signer = SessionSigner(key, ttl=session_ttl)
        self.read_only = read_only
        self._audit: AuditLog = audit if audit is not None else MemoryAuditLog()
        self._login = Login(
            secret=checked,
            auth=auth,
            login_url=login_url,
            signer=self._signer,
            render=self._page,
            read_form=self._form,
            revocations=revocations if revocations is not None else MemorySessionRevocations(),
            throttle=login_throttle if login_throttle is not None else LoginThrottle(),
            audit=self._audit,
        )
        self.title = title
        self.pages = list(pages)
        slugs = [p.slug for p in self.pages]
        for slug in slugs:
            if slugs.count(slug) > 1 or slug in {"login", "logout", "actions", "static"}:
                raise ValueError(f"page slug {slug!r} is used twice or reserved; rename the page")
        self._env = self._environment()
        app: ASGIApp = self._starlette()
        if trusted_proxies is not None:  # uvicorn's, which its --forwarded-allow-ips uses
            from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

            hosts = trusted_proxies if isinstance(trusted_proxies, str) else list(trusted_proxies)
            app = cast(ASGIApp, ProxyHeadersMiddleware(cast(Any, app), trusted_hosts=hosts))
        self._app = security_headers(app)

    @property
    def audit(self) -> AuditLog:
        """The action log: actions, refused attempts, logins and logouts."""
        return self._audit

    @audit.setter
    def audit(self, log: AuditLog) -> None:
        self._audit = self._login.audit = log

    @property
    def login_url(self) -> str | None:
        """Where users of *auth* who are not signed in are sent."""
        return self._login.login_url

    def __repr__(self) -> str:
        login = "secret" if self._login.secret is not None else "auth callable"
        return (
            f"Console(pages={[p.slug for p in self.pages]}, login={login}, "
            f"read_only={self.read_only})"
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    # -- building --------------------------------------------------------------------------------

    def _environment(self) -> jinja2.Environment:
        loaders: list[jinja2.BaseLoader] = [jinja2.PackageLoader("eventbus.console", "templates")]
        loaders += [jinja2.PackageLoader(*p.templates) for p in self.pages if p.templates]
        env = jinja2.Environment(
            loader=jinja2.ChoiceLoader(loaders),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        install_filters(env)
        return env

    def _starlette(self) -> Starlette:
        routes: list[BaseRoute] = [
            Route("/", self._overview, methods=["GET"]),
            Route("/login", self._login.form, methods=["GET"]),
            Route("/login", self._login.submit, methods=["POST"]),
            Route("/logout", self._logout, methods=["POST"]),
            Route("/actions", self._actions, methods=["GET"]),
            Mount("/static", StaticFiles(packages=[("eventbus.console", "static")])),
        ]
        for page in self.pages:
            routes += self._page_routes(page)
        return Starlette(routes=routes, exception_handlers={HTTPException: self._http_error})

    def _page_routes(self, page: ConsolePage) -> list[BaseRoute]:
        """The page's actions first, then its views: Starlette takes the first route whose
        path *and* method match, so a ``GET`` of ``/failures/retry`` would otherwise be the
        view ``/failures/{failure_id}`` (a 404 "no such failure") rather than a 405. Every
        other method of an action's path is a 405, unless a view has that very path (the
        purge form)."""
        declared = list(page.routes())
        views = [r for r in declared if isinstance(r, View)]
        actions = [r for r in declared if isinstance(r, Action)]
        view_paths = {v.path for v in views}
        routes: list[BaseRoute] = []
        for action in actions:
            path = f"/{page.slug}{action.path}"
            routes.append(Route(path, self._action_endpoint(action), methods=["POST"]))
            if action.path not in view_paths:
                routes.append(Route(path, _post_only))
        for view in views:
            path = f"/{page.slug}{view.path}"
            routes.append(Route(path, self._view_endpoint(view), methods=["GET"]))
        return routes

    def _context(self, request: Request, session: Session | None) -> dict[str, Any]:
        return {
            "console_title": self.title,
            "nav": [(p.title, console_url(request, f"/{p.slug}"), p.slug) for p in self.pages],
            "root": console_url(request, "/"),
            "static": console_url(request, "/static"),
            "session": session,
            "read_only": self.read_only,
            "now": datetime.now(UTC),
            "request": request,
            "url": lambda path="/", **q: console_url(request, path, **q),
            "done": None,
            "notices": [],  # banners of trouble (a failure store that does not answer)
        }

    def _page(
        self,
        request: Request,
        template: str,
        *,
        status: int = 200,
        session: Session | None = None,
        **context: Any,
    ) -> HTMLResponse:
        html = self._env.get_template(template).render(
            {**self._context(request, session), **context}
        )
        return HTMLResponse(html, status_code=status)

    # -- login (the rest is in ._login) ----------------------------------------------------------

    async def _logout(self, request: Request) -> Response:
        session, _ = await self._login.session(request)
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        if session is not None and not csrf_matches(session, form.get("csrf")):
            return self._csrf_refused(request, session, "logout")
        if session is not None:
            await self._login.logout(request, session)
        response = RedirectResponse(console_url(request, "/login"), status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=cookie_path(request))
        return response

    # -- built-in pages ------------------------------------------------------------------------

    async def _overview(self, request: Request) -> Response:
        session, cookie = await self._login.session(request)
        if session is None:
            return self._login.not_signed_in(request)
        preq = self._page_request(request, session)
        panels = [p for page in self.pages if (p := await page.panel(preq)) is not None]
        notices = [p.notice for p in panels if p.notice]
        page = preq.render("overview.html", panels=panels, notices=notices)
        return self._finish(page, request, cookie)

    async def _actions(self, request: Request) -> Response:
        session, cookie = await self._login.session(request)
        if session is None:
            return self._login.not_signed_in(request)
        preq = self._page_request(request, session)
        entries = self.audit.entries(limit=500)
        return self._finish(preq.render("actions.html", entries=entries), request, cookie)

    def _page_request(
        self, request: Request, session: Session, form: FormData | None = None
    ) -> PageRequest:
        context = self._context(request, session)
        context["done"] = shown_result(self._signer, session, request.query_params.get("done"))
        return PageRequest(request, session, env=self._env, base_context=context, form=form)

    def _finish(self, response: Response, request: Request, cookie: str | None) -> Response:
        if cookie is not None:
            self._login.set_session(response, request, cookie)
        return response

    # -- page routes ---------------------------------------------------------------------------

    def _view_endpoint(self, view: View) -> Any:
        async def endpoint(request: Request) -> Response:
            session, cookie = await self._login.session(request)
            if session is None:
                return self._login.not_signed_in(request)
            preq = self._page_request(request, session)
            try:
                response = await view.endpoint(preq)
            except ActionError as exc:
                response = preq.render(
                    "error.html",
                    status=exc.status,
                    title="Cannot show this",
                    message=exc.message,
                )
            return self._finish(response, request, cookie)

        endpoint.__name__ = view.name
        return endpoint

    def _action_endpoint(self, action: Action) -> Any:
        async def endpoint(request: Request) -> Response:
            return await self._run_action(action, request)

        endpoint.__name__ = action.name
        return endpoint

    async def _run_action(self, action: Action, request: Request) -> Response:
        session, cookie = await self._login.session(request)
        if session is None:
            return self._login.not_signed_in(request)
        form = await self._form(request)
        if isinstance(form, Response):
            return form
        if not csrf_matches(session, form.get("csrf")):
            return self._csrf_refused(request, session, action.name)
        preq = self._page_request(request, session, form)
        target = "/".join(str(v) for v in request.path_params.values())
        if self.read_only:
            message = "The console is read-only: no action can be taken here."
            self._log(request, session, action.name, target, "refused", message)
            return self._finish(
                preq.render("error.html", status=403, title="Read-only", message=message),
                request,
                cookie,
            )
        try:
            done = await action.endpoint(preq)
        except ActionError as exc:
            self._log(request, session, action.name, target, "refused", exc.message)
            response = preq.render(
                "error.html",
                status=exc.status,
                title="Not done",
                message=exc.message,
                back=safe_next(request, request.headers.get("referer")),
            )
            return self._finish(response, request, cookie)
        except Exception as exc:
            logger.exception("console action %s on %r failed", action.name, target)
            message = f"{type(exc).__name__}: {exc}"
            self._log(request, session, action.name, target, "error", message)
            response = preq.render(
                "error.html",
                status=500,
                title="The action failed",
                message=message,
            )
            return self._finish(response, request, cookie)
        entry = self._log(request, session, action.name, done.target or target, "ok", done.message)
        back = done.back or safe_next(request, request.headers.get("referer"))
        back_url = back or console_url(request, "/")
        sep = "&" if "?" in back_url else "?"
        result = result_token(self._signer, session, entry)
        redirect = RedirectResponse(f"{back_url}{sep}done={result}", status_code=303)
        return self._finish(redirect, request, cookie)

    def _log(
        self,
        request: Request,
        session: Session,
        action: str,
        target: str,
        outcome: AuditOutcome,
        message: str,
    ) -> Any:
        return self.audit.append(
            at=datetime.now(UTC),
            user=session.user,
            client=client_address(request),
            action=action,
            target=target,
            outcome=outcome,
            message=message,
        )

    def _csrf_refused(self, request: Request, session: Session, action: str) -> Response:
        message = "The form's CSRF token is missing or wrong; reload the page and try again."
        self._log(request, session, action, "", "refused", message)
        return self._page(
            request, "error.html", status=403, session=session, title="Refused", message=message
        )

    async def _form(self, request: Request) -> FormData | Response:
        """The request's form, or the page that says what is wrong with it."""
        try:
            return await read_form(request)
        except ClientDisconnect:  # nobody reads the answer; a traceback would be noise
            logger.info(
                "the client hung up while sending the form of %s %s",
                request.method,
                request.url.path,
            )
            return Response(status_code=400)
        except ActionError as exc:
            return self._page(
                request, "error.html", status=exc.status, title="Bad form", message=exc.message
            )

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            message = f"There is no console page at {request.url.path}."
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed here; actions are forms that POST."
        else:
            message = str(exc.detail)
        response = self._page(
            request, "error.html", status=exc.status_code, title="Not here", message=message
        )
        response.headers.update(exc.headers or {})
        return response


async def _post_only(request: Request) -> Response:
    """Any method but ``POST`` on an action's path."""
    raise HTTPException(405, headers={"Allow": "POST"})
