"""Domain modules built on the event bus and the scheduler: the patterns, for real.

* :mod:`domain.events` — the event catalog (one file, its own registry);
* :mod:`domain.views` / :mod:`domain.counters` — view counting with an exactly-once flush;
* :mod:`domain.shortlinks` — pooled codes, aliases, safe targets, counted 302 redirects;
* :mod:`domain.publishing` — scheduled publishing that two replicas never do twice;
* :mod:`domain.app` / :mod:`domain.demo` — everything wired on embedded defaults
  (``python -m domain``).

Public modules: ``abc``, ``backends.*``, ``db``, ``events``, ``exceptions``; the names below.

The names are imported on first access (:func:`eventbus.lazy.lazy_exports`, PEP 562), as
``scheduler`` does with its backends: ``import domain.events`` loads the catalog and the bus,
not SQLAlchemy, the scheduler and every service.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eventbus.lazy import lazy_exports

if TYPE_CHECKING:
    from ._shortlink_rules import new_code as new_code
    from ._shortlink_rules import validate_alias as validate_alias
    from ._shortlink_rules import validate_url as validate_url
    from .app import App as App
    from .app import Schedules as Schedules
    from .backends.memory import MemoryCounterStore as MemoryCounterStore
    from .counters import Counter as Counter
    from .counters import CounterStatistics as CounterStatistics
    from .counters import FlushReport as FlushReport
    from .db import create_tables as create_tables
    from .events import ArticlePublished as ArticlePublished
    from .events import ArticleViewed as ArticleViewed
    from .events import CountsLost as CountsLost
    from .events import OrderPaid as OrderPaid
    from .events import ShortlinkCreated as ShortlinkCreated
    from .events import ShortlinkVisited as ShortlinkVisited
    from .events import UserRegistered as UserRegistered
    from .events import catalog as catalog
    from .exceptions import AdminTokenError as AdminTokenError
    from .exceptions import AliasTakenError as AliasTakenError
    from .exceptions import ArticleNotFoundError as ArticleNotFoundError
    from .exceptions import CodeSpaceExhaustedError as CodeSpaceExhaustedError
    from .exceptions import DomainError as DomainError
    from .exceptions import InvalidAliasError as InvalidAliasError
    from .exceptions import InvalidUrlError as InvalidUrlError
    from .exceptions import MailDeliveryError as MailDeliveryError
    from .exceptions import ReservedAliasError as ReservedAliasError
    from .exceptions import ScheduleTimeError as ScheduleTimeError
    from .listeners import ExampleListeners as ExampleListeners
    from .publishing import PUBLISH_CRON as PUBLISH_CRON
    from .publishing import Publisher as Publisher
    from .shortlinks import Resolution as Resolution
    from .shortlinks import ShortLink as ShortLink
    from .shortlinks import ShortLinks as ShortLinks
    from .views import ArticleViews as ArticleViews

__all__ = [
    "AdminTokenError",
    "AliasTakenError",
    "App",
    "ArticleNotFoundError",
    "ArticlePublished",
    "ArticleViewed",
    "ArticleViews",
    "CodeSpaceExhaustedError",
    "Counter",
    "CounterStatistics",
    "CountsLost",
    "DomainError",
    "ExampleListeners",
    "FlushReport",
    "InvalidAliasError",
    "InvalidUrlError",
    "MailDeliveryError",
    "MemoryCounterStore",
    "OrderPaid",
    "PUBLISH_CRON",
    "Publisher",
    "ReservedAliasError",
    "Resolution",
    "ScheduleTimeError",
    "Schedules",
    "ShortLink",
    "ShortLinks",
    "ShortlinkCreated",
    "ShortlinkVisited",
    "UserRegistered",
    "catalog",
    "create_tables",
    "new_code",
    "validate_alias",
    "validate_url",
]

#: The module of each name in ``__all__``, imported on first access.
_LAZY = {
    "AdminTokenError": ".exceptions",
    "AliasTakenError": ".exceptions",
    "App": ".app",
    "ArticleNotFoundError": ".exceptions",
    "ArticlePublished": ".events",
    "ArticleViewed": ".events",
    "ArticleViews": ".views",
    "CodeSpaceExhaustedError": ".exceptions",
    "Counter": ".counters",
    "CounterStatistics": ".counters",
    "CountsLost": ".events",
    "DomainError": ".exceptions",
    "ExampleListeners": ".listeners",
    "FlushReport": ".counters",
    "InvalidAliasError": ".exceptions",
    "InvalidUrlError": ".exceptions",
    "MailDeliveryError": ".exceptions",
    "MemoryCounterStore": ".backends.memory",
    "OrderPaid": ".events",
    "PUBLISH_CRON": ".publishing",
    "Publisher": ".publishing",
    "ReservedAliasError": ".exceptions",
    "Resolution": ".shortlinks",
    "ScheduleTimeError": ".exceptions",
    "Schedules": ".app",
    "ShortLink": ".shortlinks",
    "ShortLinks": ".shortlinks",
    "ShortlinkCreated": ".events",
    "ShortlinkVisited": ".events",
    "UserRegistered": ".events",
    "catalog": ".events",
    "create_tables": ".db",
    "new_code": "._shortlink_rules",
    "validate_alias": "._shortlink_rules",
    "validate_url": "._shortlink_rules",
}

if not TYPE_CHECKING:  # mypy sees the imports above; a __getattr__ would hide typos from it
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY)
