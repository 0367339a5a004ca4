"""The event catalog of the domain modules: every event they emit, declared in one file.

One file, so that a change of payload shows every subscriber in one diff. The events live in
their own :data:`catalog` registry rather than eventbus's default one, so that an application
embedding these modules can declare its own ``order.paid`` without a clash; build the bus with
``EventBus(registry=catalog)``.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from eventbus import Event, EventRegistry

__all__ = [
    "ArticlePublished",
    "ArticleViewed",
    "CountsLost",
    "OrderPaid",
    "ShortlinkCreated",
    "ShortlinkVisited",
    "UserRegistered",
    "catalog",
]

catalog = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=catalog):
    """An order was paid; listeners grant reward points and write an audit row."""

    order_id: int
    user_id: int
    amount: Decimal


class UserRegistered(Event, name="user.registered", registry=catalog):
    """A user signed up; a listener sends the welcome message."""

    user_id: int
    email: str


class ShortlinkCreated(Event, name="shortlink.created", registry=catalog):
    """A short code now points at *url* (from the pool, the fallback path or an alias)."""

    code: str
    url: str
    alias: bool


class ShortlinkVisited(Event, name="shortlink.visited", registry=catalog):
    """A short code was resolved to its target; the click counter listens to this."""

    code: str
    url: str


class ArticleViewed(Event, name="article.viewed", registry=catalog):
    """Someone opened an article; the view counter decides whether it counts."""

    article_id: int
    viewer_key: str


class CountsLost(Event, name="counts.lost", registry=catalog):
    """A counter's store lost counts not yet in SQL (Redis restarted without persistence, was
    flushed, or evicted them); the numbers are what this process last saw there."""

    counter: str  # "views" or "clicks"
    pending: int  # counts pending when last seen
    staged: int  # counts staged for SQL but not yet confirmed when last seen (at most lost)
    last_seen_at: datetime | None
    detected_at: datetime
    cause: str


class ArticlePublished(Event, name="article.published", registry=catalog):
    """A scheduled (or manual) publication took effect and is committed in SQL."""

    article_id: int
    published_at: datetime
