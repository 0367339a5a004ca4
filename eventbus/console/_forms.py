"""Parsing of query and form values, each problem one sentence that names the field."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["parse_datetime", "parse_int"]


def parse_int(value: str | None, name: str, low: int, high: int, errors: list[str]) -> int | None:
    """An integer from *low* to *high*, ``None`` when absent; a problem goes to *errors*."""
    if value is None or value == "":
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= len(str(high))):
        errors.append(f"{name} must be a whole number from {low} to {high}, not {value[:40]!r}")
        return None
    number = int(text)
    if not low <= number <= high:
        errors.append(f"{name} must be from {low} to {high}, not {number}")
        return None
    return number


def parse_datetime(value: str | None, name: str, errors: list[str]) -> datetime | None:
    """``YYYY-MM-DDTHH:MM`` (a ``datetime-local`` input) or ISO 8601, read as UTC when it has
    no offset; ``None`` when absent; a problem goes to *errors*."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        if len(text) > 40:
            raise ValueError
        parsed = datetime.fromisoformat(text)
    except ValueError:
        errors.append(f"{name} must be a date and time such as 2026-12-01T17:30, not {text[:40]!r}")
        return None
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    try:  # an offset can move it past year 1 or 9999, which a datetime cannot hold
        return parsed.astimezone(UTC)
    except (OverflowError, ValueError):
        errors.append(
            f"{name} {text!r} is out of range: it must fall between the years 1 and 9999 in UTC"
        )
        return None
