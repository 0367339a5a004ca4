"""Jinja filters of the console: times in UTC with a machine-readable twin, durations, JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import jinja2
from markupsafe import Markup, escape

__all__ = ["ago", "duration", "install_filters", "pretty_json", "when"]


def when(value: datetime | None) -> Markup:
    """``<time datetime="...">2026-12-01 17:30:05 UTC</time>``; the script adds local time."""
    if value is None:
        return Markup("&mdash;")
    utc = value.astimezone(UTC)
    return Markup('<time datetime="{}">{}</time>').format(
        utc.isoformat(), utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    )


def ago(value: datetime | None, now: datetime | None = None) -> str:
    """``"3 min ago"``, ``"in 2 h"``: a rough distance from now."""
    if value is None:
        return ""
    delta = (now or datetime.now(UTC)) - value
    seconds = abs(delta.total_seconds())
    if seconds < 60:
        amount = f"{int(seconds)} s"
    elif seconds < 3600:
        amount = f"{int(seconds // 60)} min"
    elif seconds < 86400 * 2:
        amount = f"{int(seconds // 3600)} h"
    else:
        amount = f"{int(seconds // 86400)} days"
    return f"{amount} ago" if delta >= timedelta(0) else f"in {amount}"


def duration(seconds: float | timedelta | None) -> str:
    """``"0.42 s"``, ``"3 min 5 s"``."""
    if seconds is None:
        return "—"
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest} s"


def pretty_json(text: str) -> str:
    """JSON text indented for reading; anything that is not JSON as it is."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text


def install_filters(env: jinja2.Environment) -> None:
    env.filters.update(when=when, ago=ago, duration=duration, pretty_json=pretty_json)
    env.globals["escape"] = escape
