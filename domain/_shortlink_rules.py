"""Pure rules of short links: code generation and the validation of aliases and target URLs."""

from __future__ import annotations

import ipaddress
import re
import secrets
import string
import unicodedata
from collections.abc import Collection
from urllib.parse import urlsplit

from ._link_targets import target_host_problem
from ._public import shown_as_domain
from .exceptions import InvalidAliasError, InvalidUrlError, ReservedAliasError

__all__ = [
    "ALPHABET",
    "CODE_LENGTH",
    "DEFAULT_RESERVED",
    "MAX_URL_LENGTH",
    "could_be_code",
    "new_code",
    "validate_alias",
    "validate_url",
]

ALPHABET = string.digits + string.ascii_letters  # base62
CODE_LENGTH = 6  # 62**6 = 56.8 billion codes
MAX_URL_LENGTH = 2048
ALIAS_MIN, ALIAS_MAX = 3, 32
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}\.?\Z")  # urlsplit lowercases the host
# control, format (zero-width, bidi), surrogate, private-use, unassigned, line/para separators
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_ALIAS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*\Z")
# every code there can be: pool and fallback codes (base62) and aliases; the column holds 64
_CODE = re.compile(r"[A-Za-z0-9_-]{1,64}")
DEFAULT_RESERVED = frozenset(
    {
        "about", "admin", "api", "articles", "assets", "auth", "favicon.ico", "health",
        "healthz", "help", "links", "login", "logout", "metrics", "new", "ops", "orders",
        "robots.txt", "settings", "signup", "static", "status", "www",
    }
)  # fmt: skip


def new_code(length: int = CODE_LENGTH) -> str:
    """A random base62 code from :mod:`secrets`.

    ``secrets.choice`` draws with ``randbelow``, which rejects out-of-range draws instead of
    reducing modulo 62, so every character is equally likely (``byte % 62`` would favour the
    first 8 characters: 256 = 4 * 62 + 8).
    """
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def could_be_code(text: str) -> bool:
    """Whether *text* has the shape of a code or an alias (``[A-Za-z0-9_-]``, 1 to 64).

    Anything else (a NUL, a lone surrogate, a space) is no code: looking it up would only
    make the database driver raise (PostgreSQL refuses NUL in text, and no driver can encode
    a surrogate), so a resolver answers "unknown" without asking.
    """
    return _CODE.fullmatch(text) is not None


def validate_url(
    url: str, *, max_length: int = MAX_URL_LENGTH, allow_intranet: bool = False
) -> str:
    """Accept only absolute ``http``/``https`` URLs with a plain host; return the URL unchanged.

    Refused, because a reader of the short link could be misled about where it goes or
    because browsers and this parser could read it differently:

    * userinfo (``https://paypal.com@evil.com`` goes to ``evil.com``);
    * a backslash anywhere (browsers read ``https://evil.com\\@good.com`` as a path
      separator, :func:`urllib.parse.urlsplit` does not);
    * whitespace, control, format (zero-width, bidi) or unassigned characters anywhere;
    * a host that is not ASCII letters, digits, ``-``, ``_`` and dots, or a bracketed IP
      literal. A non-ASCII host is refused rather than converted: the standard library's
      IDNA 2003 codec and browsers' IDNA 2008/UTS #46 disagree on some names (``ß``, ``ς``),
      so a converted host could differ from the one the user typed; give its ``xn--`` form;
    * an IPv4 address in any form but dotted decimal (``http://2130706433/``,
      ``0177.0.0.1``, ``0x7f.0.0.1``, ``127.1``: browsers go to 127.0.0.1 for each), and a
      host ending in a number that browsers refuse (``example.123``, ``256.0.0.1``);
    * a host that is a cloud metadata service (``169.254.169.254``, ``[fd00:ec2::254]``,
      ``metadata.google.internal``), the unspecified address, a multicast or reserved
      address, or an IPv6 address with a zone id (``[fe80::1%25eth0]``); and, unless
      *allow_intranet*, a loopback (``localhost`` too), link-local, private or other not
      globally reachable address (see :mod:`domain._link_targets`).

    :raises InvalidUrlError: for any of the above, another scheme (``javascript:``,
        ``data:``, ...), a relative URL, a missing host or a bad port, or more than
        *max_length* characters
    """
    if not isinstance(url, str) or not url:
        raise InvalidUrlError(str(url), "it is empty; give an absolute http(s) URL")
    if len(url) > max_length:
        raise InvalidUrlError(url, f"it is {len(url)} characters long, over {max_length}")
    for c in url:
        if c.isspace() or unicodedata.category(c) in _INVISIBLE:
            raise InvalidUrlError(
                url,
                f"it contains whitespace, control or invisible characters ({c!r}); "
                "percent-encode them",
            )
    if "\\" in url:
        raise InvalidUrlError(url, "it contains a backslash; use '/' or percent-encode it")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise InvalidUrlError(url, f"it does not parse ({exc})") from None
    scheme = parts.scheme.lower()
    if not scheme:
        raise InvalidUrlError(url, "it is relative; give an absolute http(s) URL")
    if scheme not in ("http", "https"):
        raise InvalidUrlError(url, f"scheme {scheme!r} is not allowed; only http and https")
    if "@" in parts.netloc:
        raise InvalidUrlError(url, "it has userinfo ('user@' before the host); remove it")
    if not host:
        raise InvalidUrlError(url, "it has no host")
    if port == 0:
        raise InvalidUrlError(url, "port 0 is not a port a server listens on")
    if not host.isascii():
        raise InvalidUrlError(
            url, f"host {host!r} is not ASCII; give its IDNA form (xn--...) instead"
        )
    if parts.netloc.startswith("[") or "]" in parts.netloc:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise InvalidUrlError(url, f"host [{host}] is not an IPv6 address") from None
    elif not _HOST.match(host):
        raise InvalidUrlError(
            url,
            f"host {host!r} is not dot-separated labels of letters, digits, '-' and '_'",
        )
    else:
        problem = _numeric_host_problem(host)
        if problem is not None:
            raise InvalidUrlError(url, problem)
    problem = target_host_problem(host, allow_intranet=allow_intranet)
    if problem is not None:
        raise InvalidUrlError(url, problem)
    return url


def _numeric_host_problem(host: str) -> str | None:
    """Why browsers would read *host* as an IPv4 address it does not show, or ``None``.

    Browsers follow the WHATWG URL standard: a host whose last label is a number (decimal,
    ``0x`` hex or ``0``-prefixed octal) is an IPv4 address of one to four parts, so
    ``2130706433``, ``0177.0.0.1``, ``0x7f.0.0.1`` and ``127.1`` all go to 127.0.0.1. Only
    the dotted-decimal form shows the address; the others hide it, and an invalid one (a
    part over 255, five parts, ``example.123``) is refused by browsers anyway.
    """
    parts = host.removesuffix(".").split(".")
    if _ipv4_number(parts[-1]) is None and not parts[-1].isdigit():
        return None  # a name (a last label of digits is a number even if invalid, as in "08")
    numbers = [_ipv4_number(p) for p in parts]
    *head, last = numbers
    if (
        len(parts) > 4
        or last is None
        or any(n is None or n > 255 for n in head)
        or last >= 256 ** (5 - len(parts))
    ):
        return (
            f"host {host!r} ends in a number, so browsers read it as an IPv4 address, and it "
            "is not one; give a name or a dotted-decimal address (a.b.c.d)"
        )
    value = last
    for i, n in enumerate(head):
        value += (n or 0) << (8 * (3 - i))
    address = str(ipaddress.IPv4Address(value))
    kinds = [
        kind
        for kind, used in (
            ("hexadecimal", any(p[:2] == "0x" for p in parts)),
            ("octal", any(len(p) > 1 and p[0] == "0" and p[:2] != "0x" for p in parts)),
        )
        if used
    ]
    if len(parts) == 1:
        form = f"as one {kinds[0] if kinds else 'decimal'} number"
    elif kinds or len(parts) < 4:
        form = "in " + " and ".join(kinds + ([f"{len(parts)} parts"] if len(parts) < 4 else []))
    else:
        return None  # plain dotted decimal: the address as it is shown
    return (
        f"host {host!r} is the IPv4 address {address} {form}, which hides where the link "
        f"goes; write it as {address}"
    )


def _ipv4_number(part: str) -> int | None:
    """One part of a WHATWG IPv4 host: decimal, ``0x`` hex or ``0``-prefixed octal; else None."""
    if part[:2] == "0x":  # urlsplit lowercases the host
        digits, base, allowed = part[2:], 16, string.hexdigits
    elif len(part) > 1 and part[0] == "0":
        digits, base, allowed = part[1:], 8, string.octdigits
    else:
        digits, base, allowed = part, 10, string.digits
    if not part or not all(c in allowed for c in digits):
        return None
    return int(digits, base) if digits else 0


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


shown_as_domain(new_code, validate_alias, validate_url)
