"""The page interface: what a package implements to add a section to the console.

A :class:`ConsolePage` has a ``slug`` (its URL prefix), a ``title`` (its menu entry), routes
and, optionally, a panel on the overview. Its routes are :class:`View` (``GET``, renders) and
:class:`Action` (``POST``, changes state). The console does the rest for every action: it
requires a session, refuses it in read-only mode, checks the CSRF token, logs it (who, what,
when, result), and redirects back with the result shown; so a page cannot forget any of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import urlencode

from markupsafe import Markup
from starlette.datastructures import FormData, QueryParams
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from .._exceptions import EventBusError

if TYPE_CHECKING:
    import jinja2

    from ._security import Session


__all__ = [
    "Action",
    "ActionError",
    "ConsolePage",
    "Done",
    "PageRequest",
    "Panel",
    "View",
]


class ActionError(EventBusError):
    """Raised by an action (or a view) for input the user must change: shown as a 400 page
    with *message*, or *status* (404 for something that does not exist)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclasses.dataclass(frozen=True, slots=True)
class Done:
    """What an action returns: the result *message*, the *target* it acted on (for the action
    log), and *back*, the console path to show next (default: the page it was posted from)."""

    message: str
    target: str = ""
    back: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Panel:
    """A card on the overview page: a title, a link to the page, and small *rows* of figures
    (label, value) or a rendered *body*; a *notice* is shown as a banner above the cards."""

    title: str
    href: str
    rows: Sequence[tuple[str, object]] = ()
    body: Markup | None = None
    alert: bool = False  #: highlighted: something needs an operator
    notice: str | None = None  #: a banner on the overview ("the failure store is unavailable")


class PageRequest:
    """A request to a page, with what the console knows: the user, the form, the URLs."""

    def __init__(
        self,
        request: Request,
        session: Session,
        *,
        env: jinja2.Environment,
        base_context: Mapping[str, Any],
        form: FormData | None = None,
    ) -> None:
        self.request = request
        self.session = session
        self.form = form
        self._env = env
        self._base_context = base_context

    @property
    def user(self) -> str:
        return self.session.user

    @property
    def query(self) -> QueryParams:
        return self.request.query_params

    @property
    def path_params(self) -> Mapping[str, Any]:
        return self.request.path_params

    @property
    def read_only(self) -> bool:
        return bool(self._base_context["read_only"])

    def url(self, path: str = "/", /, **query: object) -> str:
        """The URL of a console *path* (``/failures``), wherever the console is mounted."""
        return console_url(self.request, path, **query)

    def field(self, name: str, *, max_length: int = 1000) -> str:
        """A form field as text, stripped (``""`` when absent).

        :raises ActionError: if it is longer than *max_length* or is a file
        """
        value = self.form.get(name) if self.form is not None else None
        if value is None:
            return ""
        if not isinstance(value, str):
            raise ActionError(f"the field {name!r} must be text, not a file")
        value = value.strip()
        if len(value) > max_length:
            raise ActionError(
                f"the field {name!r} is {len(value)} characters long; at most {max_length}"
            )
        return value

    def render(self, template: str, /, *, status: int = 200, **context: Any) -> HTMLResponse:
        """Render a template of the console or of a page with *context*."""
        html = self._env.get_template(template).render(
            {**self._base_context, "page_request": self, **context}
        )
        return HTMLResponse(html, status_code=status)


def console_url(request: Request, path: str = "/", /, **query: object) -> str:
    base = request.scope.get("root_path", "").rstrip("/")
    shown = {k: v for k, v in query.items() if v is not None and v != ""}
    suffix = f"?{urlencode(shown)}" if shown else ""
    return f"{base}{path}{suffix}"


@dataclasses.dataclass(frozen=True, slots=True)
class View:
    """A ``GET`` route of a page; *path* is relative to the page's slug (``""``, ``"/{id}"``)."""

    path: str
    endpoint: Callable[[PageRequest], Awaitable[Response]]
    name: str


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """A ``POST`` route of a page that changes state; *name* appears in the action log."""

    path: str
    endpoint: Callable[[PageRequest], Awaitable[Done]]
    name: str


@runtime_checkable
class ConsolePage(Protocol):
    """**Protocol:** one section of the console.

    * ``slug`` is the URL prefix (``"failures"``: routes under ``/failures``), ``title`` the
      menu entry; ``templates`` names a package folder of templates (``("scheduler",
      "console_templates")``) or is ``None``.
    * ``routes()`` is called once, when the console is built.
    * ``panel()`` returns the page's card on the overview, or ``None``.
    """

    slug: str
    title: str
    templates: tuple[str, str] | None

    def routes(self) -> Sequence[View | Action]:
        """The page's views and actions."""
        ...

    async def panel(self, request: PageRequest) -> Panel | None:
        """The page's card on the overview page, or ``None``."""
        ...
