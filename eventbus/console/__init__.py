"""An operator console in the browser: failures, the bus, and the pages other packages add.

Server-rendered HTML (Starlette and Jinja2, the ``web`` extra), usable without JavaScript,
mountable into any ASGI application::

    from eventbus.console import Console, bus_pages

    console = Console(bus_pages(bus), secret=os.environ["CONSOLE_TOKEN"])
    app.mount("/ops", console)

Pages are objects with the :class:`ConsolePage` shape; ``scheduler.console`` and
``domain.console`` provide theirs. The console enforces the security rules for every page:
login, CSRF tokens on every form, ``POST`` for every action, read-only mode, the action log,
and the security headers (a CSP without inline script, no framing).
"""

from __future__ import annotations

from .._public import show_as_module
from ..extras import missing_extra

if _missing := missing_extra(__name__, "web"):
    raise _missing

from eventbus import EventBus

from . import _streams_page
from ._app import Console as Console
from ._audit import AuditEntry as AuditEntry
from ._audit import AuditLog as AuditLog
from ._audit import AuditOutcome as AuditOutcome
from ._audit import MemoryAuditLog as MemoryAuditLog
from ._bus_page import BusPage as BusPage
from ._charts import Bar as Bar
from ._charts import bar_chart as bar_chart
from ._charts import line_chart as line_chart
from ._charts import time_buckets as time_buckets
from ._failures_page import FailuresPage as FailuresPage
from ._forms import parse_datetime as parse_datetime
from ._forms import parse_int as parse_int
from ._pages import Action as Action
from ._pages import ActionError as ActionError
from ._pages import ConsolePage as ConsolePage
from ._pages import Done as Done
from ._pages import PageRequest as PageRequest
from ._pages import Panel as Panel
from ._pages import View as View
from ._security import AuthCallable as AuthCallable
from ._security import LoginSecretError as LoginSecretError
from ._sessions import LoginThrottle as LoginThrottle
from ._sessions import MemorySessionRevocations as MemorySessionRevocations
from ._sessions import SessionRevocations as SessionRevocations
from ._streams_page import StreamsPage as StreamsPage

__all__ = [
    "Action",
    "ActionError",
    "AuditEntry",
    "AuditLog",
    "AuditOutcome",
    "AuthCallable",
    "Bar",
    "BusPage",
    "Console",
    "ConsolePage",
    "Done",
    "FailuresPage",
    "LoginSecretError",
    "LoginThrottle",
    "MemoryAuditLog",
    "MemorySessionRevocations",
    "PageRequest",
    "Panel",
    "SessionRevocations",
    "StreamsPage",
    "View",
    "bar_chart",
    "bus_pages",
    "line_chart",
    "parse_datetime",
    "parse_int",
    "time_buckets",
]


def bus_pages(bus: EventBus) -> list[ConsolePage]:
    """The pages of the ``eventbus`` package for *bus*: failures, the bus (which turns the
    bus's call counting on), and its durable streams when it has a durable transport."""
    pages: list[ConsolePage] = [FailuresPage(bus), BusPage(bus)]
    if isinstance(bus.durable, _streams_page.DurableOperations):
        pages.append(StreamsPage(bus))
    return pages


show_as_module(__name__, *(globals()[name] for name in __all__))
