"""``python -m domain --web``: the web application and its operator console, with demo data.

Serves :mod:`domain.web` on 127.0.0.1 with the console at ``/ops`` (the token is printed, or
taken from ``EVENTBUS_CONSOLE_TOKEN``) and, once the app runs, seeds what a person can look
at: articles with views and a scheduled publication, short links with clicks, paid orders,
and users, one of whose welcome mails bounces into the failure table.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from sqlalchemy import func, insert, select

from .app import App, Schedules
from .db import articles
from .events import ArticleViewed, OrderPaid, UserRegistered
from .listeners import BOUNCING_DOMAIN

__all__ = ["seed", "serve_demo"]

_ARTICLES = {
    1: "Why 302 and not 301",
    2: "Counting views exactly once",
    3: "Cron with seconds",
    4: "Failures are never silent",
}


async def seed(app: App) -> None:
    """Demo data in an empty database (a database that has articles is left as it is)."""
    async with app.engine.begin() as conn:
        if await conn.scalar(select(func.count()).select_from(articles)):
            return
        await conn.execute(insert(articles), [{"id": i, "title": t} for i, t in _ARTICLES.items()])
    for uid, email in enumerate(["ada@example.com", f"bob@{BOUNCING_DOMAIN}", "cy@example.com"]):
        app.bus.emit(UserRegistered(user_id=uid + 1, email=email))
    for oid, (uid, amount) in enumerate([(1, "19.90"), (2, "5.00"), (1, "42.00")]):
        app.bus.emit(OrderPaid(order_id=100 + oid, user_id=uid, amount=Decimal(amount)))
    await app.links.refill()
    links = [
        await app.links.create("https://example.com/docs", alias="docs"),
        await app.links.create("https://example.com/pricing"),
        await app.links.create(
            "https://example.com/flash-sale", expires_at=datetime.now(UTC) + timedelta(days=1)
        ),
    ]
    for n, link in enumerate(links):
        for _ in range(n + 2):
            await app.links.resolve(link.code)
    for article_id, viewers in [(1, 7), (2, 4), (3, 2)]:
        for v in range(viewers):
            app.bus.emit(ArticleViewed(article_id=article_id, viewer_key=f"viewer-{v}"))
    await app.publisher.schedule_publish(4, datetime.now(UTC) + timedelta(minutes=2))


def serve_demo(db: str | None, redis_url: str | None, *, port: int = 8000) -> int:
    """Serve on 127.0.0.1:*port* until Ctrl-C; a temporary database unless *db* is given."""
    from .web import main as serve

    token = os.environ.get("EVENTBUS_CONSOLE_TOKEN") or secrets.token_urlsafe(18)
    print(f"operator console: http://127.0.0.1:{port}/ops  (token: {token})")  # noqa: T201
    overrides = {
        "console_token": token,
        "on_start": seed,
        "app_options": {"schedules": Schedules.fast(), "refill_watermark": 20},
    }
    argv = ["--port", str(port)] + (["--redis", redis_url] if redis_url else [])
    if db is not None:
        return serve([*argv, "--db", db], overrides=overrides)
    with tempfile.TemporaryDirectory(prefix="eventbus-web-demo-") as tmp:
        return serve([*argv, "--db", str(Path(tmp) / "demo.db")], overrides=overrides)
