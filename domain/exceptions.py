"""Errors of the domain modules; each message names the culprit and says what to do instead.

::

    DomainError
     ├── AdminTokenError (ValueError)          web admin token blank or too short
     ├── InvalidUrlError (ValueError)          target URL refused by create()
     ├── InvalidAliasError (ValueError)        alias of the wrong length or characters
     │    └── ReservedAliasError               alias on the reserved list
     ├── AliasTakenError (ValueError)          alias (or code) already in use
     ├── CodeSpaceExhaustedError (RuntimeError) the fallback found no free code
     ├── ScheduleTimeError (ValueError)        publication time in the past or too soon
     ├── ArticleNotFoundError (LookupError)    no article with that id
     └── MailDeliveryError (OSError)           the example welcome mail bounced
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ._public import shown_as_domain

__all__ = [
    "AdminTokenError",
    "AliasTakenError",
    "ArticleNotFoundError",
    "CodeSpaceExhaustedError",
    "DomainError",
    "InvalidAliasError",
    "InvalidUrlError",
    "MailDeliveryError",
    "ReservedAliasError",
    "ScheduleTimeError",
]


class DomainError(Exception):
    """Base class of every error raised by the domain modules."""


class AdminTokenError(DomainError, ValueError):
    """The configured admin token is unusable; the message never shows the token."""

    def __init__(self, reason: str, min_length: int) -> None:
        super().__init__(
            f"the admin token (EVENTBUS_ADMIN_TOKEN) is {reason}; set at least {min_length} "
            "non-blank characters (python -c 'import secrets; print(secrets.token_urlsafe(32))'), "
            "or leave it unset to disable the /admin routes"
        )
        self.reason = reason
        self.min_length = min_length


class InvalidUrlError(DomainError, ValueError):
    """A target URL that ``ShortLinks.create`` refuses (not an absolute http(s) URL)."""

    def __init__(self, url: str, reason: str) -> None:
        shown = url if len(url) <= 80 else url[:77] + "..."
        super().__init__(f"target URL {shown!r} is refused: {reason}")
        self.url = url
        self.reason = reason


class InvalidAliasError(DomainError, ValueError):
    """An alias of the wrong length, or with characters outside ``[A-Za-z0-9_-]``."""

    def __init__(self, alias: str, reason: str) -> None:
        super().__init__(f"alias {alias!r} is invalid: {reason}")
        self.alias = alias
        self.reason = reason


class ReservedAliasError(InvalidAliasError):
    """An alias on the reserved list (a route of the site)."""

    def __init__(self, alias: str) -> None:
        super().__init__(alias, "it is a reserved word (a route of the site); choose another")


class AliasTakenError(DomainError, ValueError):
    """An alias (or code) already in use."""

    def __init__(self, alias: str) -> None:
        super().__init__(f"alias {alias!r} is already taken; choose another or omit alias=")
        self.alias = alias


class CodeSpaceExhaustedError(DomainError, RuntimeError):
    """The pool was empty and the fallback found no free code."""

    def __init__(self, attempts: int) -> None:
        super().__init__(
            f"no free short code after {attempts} attempts with an empty pool; "
            "refill the pool (ShortLinks.refill) or raise its watermark"
        )
        self.attempts = attempts


class ScheduleTimeError(DomainError, ValueError):
    """A publication time in the past, or less than ``min_lead`` ahead."""

    def __init__(self, at: datetime, now: datetime, min_lead: timedelta) -> None:
        when = "in the past" if at <= now else f"less than {min_lead} ahead"
        super().__init__(
            f"publication time {at.isoformat()!r} is {when} (now {now.isoformat()!r}); "
            f"schedule at least {min_lead} ahead, or publish now"
        )
        self.at = at
        self.now = now


class ArticleNotFoundError(DomainError, LookupError):
    """No article with that id."""

    def __init__(self, article_id: int) -> None:
        super().__init__(f"no article with id {article_id!r}; create it before scheduling it")
        self.article_id = article_id


class MailDeliveryError(DomainError, OSError):
    """The example welcome mail bounced (on purpose, for ``bounce.invalid`` addresses)."""

    def __init__(self, email: str) -> None:
        super().__init__(f"mail server refused the welcome message to {email!r}; retry later")
        self.email = email


shown_as_domain(
    AdminTokenError,
    AliasTakenError,
    ArticleNotFoundError,
    CodeSpaceExhaustedError,
    DomainError,
    InvalidAliasError,
    InvalidUrlError,
    MailDeliveryError,
    ReservedAliasError,
    ScheduleTimeError,
)
