"""Event names and subscription patterns.

A name is dot-separated segments of ``[a-z0-9_-]+``. In a pattern, ``*`` matches exactly one
segment and ``**`` zero or more, anywhere. Matching runs only when a dispatch plan is built
(once per event name), so it favours clarity over speed; the bus compiles each subscription's
pattern once and matches with :func:`match_segments`, so the size of the ``compile_pattern``
cache never matters to it.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ._exceptions import InvalidEventNameError, InvalidPatternError

__all__ = ["compile_pattern", "is_pattern", "match_segments", "matches", "validate_name"]

_SEGMENT = re.compile(r"[a-z0-9_-]+")


def validate_name(name: object) -> str:
    """Return *name* unchanged, or raise naming the first bad segment."""
    if not isinstance(name, str):
        raise InvalidEventNameError(name, f"must be a str, not {type(name).__name__}")
    if not name:
        raise InvalidEventNameError(name, "must not be empty")
    for i, seg in enumerate(name.split(".")):
        if not seg:
            raise InvalidEventNameError(name, f"segment {i + 1} is empty (stray or doubled dot)")
        if _SEGMENT.fullmatch(seg) is None:
            bad = next(c for c in seg if _SEGMENT.fullmatch(c) is None)
            raise InvalidEventNameError(
                name,
                f"segment {seg!r} contains {bad!r}; use lowercase letters, digits, '_' and '-'"
                + (
                    "; wildcards belong in subscriptions, not in declared names"
                    if "*" in seg
                    else ""
                ),
            )
    return name


def is_pattern(text: str) -> bool:
    return "*" in text


@lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> tuple[str, ...]:
    """Validate *pattern* and return its segments (a pattern without wildcards is a name)."""
    if not isinstance(pattern, str):
        raise InvalidPatternError(pattern, f"must be a str, not {type(pattern).__name__}")
    if not pattern:
        raise InvalidPatternError(pattern, "must not be empty")
    segments = tuple(pattern.split("."))
    for i, seg in enumerate(segments):
        if not seg:
            raise InvalidPatternError(pattern, f"segment {i + 1} is empty (stray or doubled dot)")
        if seg in ("*", "**"):
            continue
        if "*" in seg:
            raise InvalidPatternError(
                pattern,
                f"segment {seg!r} mixes '*' with text; a wildcard must be a whole segment "
                "('*' for one segment, '**' for any number)",
            )
        if _SEGMENT.fullmatch(seg) is None:
            bad = next(c for c in seg if _SEGMENT.fullmatch(c) is None)
            raise InvalidPatternError(
                pattern, f"segment {seg!r} contains {bad!r}; use [a-z0-9_-], '*' or '**'"
            )
    return segments


def matches(pattern: str, name: str) -> bool:
    """Whether event *name* is matched by *pattern*."""
    return match_segments(compile_pattern(pattern), tuple(name.split(".")))


def match_segments(pat: tuple[str, ...], segs: tuple[str, ...]) -> bool:
    """Whether the segments of a name (*segs*) match a compiled pattern (*pat*)."""
    # Classic two-pointer glob match with backtracking to the last '**'.
    p = s = 0
    star_p = star_s = -1
    while s < len(segs):
        if p < len(pat) and pat[p] == "**":
            star_p, star_s = p, s
            p += 1
        elif p < len(pat) and (pat[p] == "*" or pat[p] == segs[s]):
            p += 1
            s += 1
        elif star_p >= 0:
            star_s += 1
            s = star_s
            p = star_p + 1
        else:
            return False
    while p < len(pat) and pat[p] == "**":
        p += 1
    return p == len(pat)
