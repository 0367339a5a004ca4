"""Pure rules of short links: code generation and the validation of aliases and target URLs."""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Collection
from urllib.parse import urlsplit

from .exceptions import InvalidAliasError, InvalidUrlError, ReservedAliasError

__all__ = [
    "ALPHABET",
    "CODE_LENGTH",
    "DEFAULT_RESERVED",
    "MAX_URL_LENGTH",
    "new_code",
    "validate_alias",
    "validate_url",
]

ALPHABET = string.digits + string.ascii_letters  # base62
CODE_LENGTH = 6  # 62**6 = 56.8 billion codes
MAX_URL_LENGTH = 2048
ALIAS_MIN, ALIAS_MAX = 3, 32
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")
DEFAULT_RESERVED = frozenset(
    {
        "about", "admin", "api", "assets", "auth", "favicon.ico", "health", "healthz", "help",
        "login", "logout", "metrics", "new", "robots.txt", "settings", "signup", "static",
        "status", "www",
    }
)  # fmt: skip


def new_code(length: int = CODE_LENGTH) -> str:
    """A random base62 code from :mod:`secrets`.

    ``secrets.choice`` draws with ``randbelow``, which rejects out-of-range draws instead of
    reducing modulo 62, so every character is equally likely (``byte % 62`` would favour the
    first 8 characters: 256 = 4 * 62 + 8).
    """
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def validate_url(url: str, *, max_length: int = MAX_URL_LENGTH) -> str:
    """Accept only absolute ``http``/``https`` URLs with a host; return the URL unchanged.

    :raises InvalidUrlError: for another scheme (``javascript:``, ``data:``, ...), a relative
        URL, a missing host, whitespace or control characters, or more than *max_length* chars
    """
    if not isinstance(url, str) or not url:
        raise InvalidUrlError(str(url), "it is empty; give an absolute http(s) URL")
    if len(url) > max_length:
        raise InvalidUrlError(url, f"it is {len(url)} characters long, over {max_length}")
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise InvalidUrlError(url, "it contains whitespace or control characters; encode them")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError as exc:
        raise InvalidUrlError(url, f"it does not parse ({exc})") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise InvalidUrlError(url, "it is relative; give an absolute http(s) URL")
    if scheme not in ("http", "https"):
        raise InvalidUrlError(url, f"scheme {scheme!r} is not allowed; only http and https")
    if not host:
        raise InvalidUrlError(url, "it has no host")
    return url


def validate_alias(alias: str, reserved: Collection[str] = DEFAULT_RESERVED) -> str:
    """Check a custom alias: 3 to 32 characters of ``[A-Za-z0-9_-]``, not a reserved word.

    :raises InvalidAliasError: for a wrong length or character
    :raises ReservedAliasError: for a reserved word (compared case-insensitively)
    """
    if not isinstance(alias, str):
        raise InvalidAliasError(str(alias), f"expected a string, got {type(alias).__name__}")
    if not ALIAS_MIN <= len(alias) <= ALIAS_MAX:
        raise InvalidAliasError(
            alias, f"it has {len(alias)} characters; use {ALIAS_MIN} to {ALIAS_MAX}"
        )
    if not _ALIAS.match(alias):
        raise InvalidAliasError(
            alias, "use letters, digits, '-' and '_' only, starting with a letter or digit"
        )
    if alias.lower() in {r.lower() for r in reserved}:
        raise ReservedAliasError(alias)
    return alias
