"""Parsing of cron expressions into sets of allowed values, one per field.

Kept apart from :mod:`scheduler._cron` so that the dialect (what is accepted, and what
each rejection says) reads in one place, and the time arithmetic in another.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._exceptions import CronSyntaxError

__all__ = ["FIELD_NAMES", "CronFields", "parse_cron"]

FIELD_NAMES = ("second", "minute", "hour", "day-of-month", "month", "day-of-week")

_WEEKDAYS = {"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}
# Month names are those of the C locale whatever the process locale is.
_MONTHS = {
    name: i + 1
    for i, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
    )
}

_MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

PRESETS = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}

# Longest each month can be (February in leap years), for the "never fires" check.
_MAX_DAYS = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

_BLANKS = re.compile(r"[ \t]+")
_QUARTZ_LW = re.compile(r"^(\d*L|L-\d+|LW|\d+W)$", re.IGNORECASE)
_ALLOWED_CHARS = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ*-/,")


@dataclass(frozen=True, slots=True)
class _Spec:
    name: str
    lo: int
    hi: int
    names: dict[str, int] | None
    top: int  # where '*' and 'a/n' end: 6 for day-of-week, whose 7 is only an alias


_SPECS = (
    _Spec("second", 0, 59, None, 59),
    _Spec("minute", 0, 59, None, 59),
    _Spec("hour", 0, 23, None, 23),
    _Spec("day-of-month", 1, 31, None, 31),
    _Spec("month", 1, 12, _MONTHS, 12),
    _Spec("day-of-week", 0, 7, _WEEKDAYS, 6),
)


@dataclass(frozen=True, slots=True)
class CronFields:
    """The allowed values of each field; day-of-week uses 0-6, Sunday being 0."""

    second: frozenset[int]
    minute: frozenset[int]
    hour: frozenset[int]
    day_of_month: frozenset[int]
    month: frozenset[int]
    day_of_week: frozenset[int]

    @property
    def dom_restricted(self) -> bool:
        return len(self.day_of_month) < 31

    @property
    def dow_restricted(self) -> bool:
        return len(self.day_of_week) < 7


class _FieldParser:
    """Parses one field; holds what an error message needs to name the culprit."""

    def __init__(self, expr: str, spec: _Spec, text: str) -> None:
        self.expr = expr
        self.spec = spec
        self.text = text

    def error(self, token: str, reason: str) -> CronSyntaxError:
        return CronSyntaxError(self.expr, self.spec.name, token, reason)

    def parse(self) -> frozenset[int]:
        values: set[int] = set()
        for item in self.text.split(","):
            if not item:
                raise self.error(self.text, "empty list item; remove the extra ','")
            values.update(self.parse_item(item))
        if self.spec.name == "day-of-week":
            values = {v % 7 for v in values}
        return frozenset(values)

    def parse_item(self, item: str) -> range:
        spec = self.spec
        self.check_chars(item)
        base, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not step_text:
                raise self.error(item, "missing step after '/'; write e.g. '*/5'")
            if not (step_text.isascii() and step_text.isdigit()):
                raise self.error(item, f"step {step_text!r} is not a number")
            step = int(step_text)
            if step == 0:
                raise self.error(item, "step 0 never advances; use a step of at least 1")
            if step > spec.top - spec.lo:
                raise self.error(
                    item,
                    f"step {step} is larger than the {spec.name} field's range "
                    f"{spec.lo}-{spec.top}; use at most {spec.top - spec.lo}",
                )
        if base == "*":
            return range(spec.lo, spec.top + 1, step)
        if not base:
            raise self.error(item, "missing value before '/'; write e.g. '*/5' or '0/5'")
        first, dash, last = base.partition("-")
        if not first:
            raise self.error(item, "missing start of range before '-'")
        if first == "*":
            raise self.error(item, "'*' cannot start a range; write a number or '*' alone")
        lo = self.value(item, first, end=False)
        if not dash:
            return range(lo, (max(lo, spec.top) if slash else lo) + 1, step)
        if not last:
            raise self.error(item, "missing end of range after '-'")
        hi = self.value(item, last, end=True)
        if lo > hi:
            wrap = f"{lo}-{spec.hi},{spec.lo}-{hi}"
            raise self.error(
                item, f"range {lo}-{hi} is reversed; write '{hi}-{lo}' or {wrap!r} to wrap around"
            )
        return range(lo, hi + 1, step)

    def check_chars(self, item: str) -> None:
        if "?" in item:
            hint = "; use '*'" if item == "?" else ""
            raise self.error(item, f"'?' is Quartz syntax and is not supported{hint}")
        if "#" in item:
            raise self.error(
                item, "'#' (nth weekday of the month) is Quartz syntax and is not supported"
            )
        for part in re.split(r"[-/]", item):
            if _QUARTZ_LW.match(part) and not (self.spec.names and part.lower() in self.spec.names):
                what = "'W' (nearest weekday)" if "W" in part.upper() else "'L' (last)"
                raise self.error(item, f"{what} is Quartz syntax and is not supported")
        for char in item:
            if char not in _ALLOWED_CHARS:
                raise self.error(item, f"unexpected character {char!r}")
        if item.count("/") > 1:
            raise self.error(item, "more than one '/'; write e.g. '0-30/5'")
        if item.partition("/")[0].count("-") > 1:
            raise self.error(item, "more than one '-'; a range is 'a-b'")

    def value(self, item: str, text: str, *, end: bool) -> int:
        spec = self.spec
        if text.isdigit():
            number = int(text)
            if not spec.lo <= number <= spec.hi:
                hint = "; midnight is hour 0" if spec.name == "hour" and number == 24 else ""
                raise self.error(
                    item, f"{number} is out of range for {spec.name} ({spec.lo}-{spec.hi}){hint}"
                )
            return number
        if not text.isalpha():
            raise self.error(item, f"{text!r} is not a number or a name")
        name = text.lower()
        if spec.names is not None and name in spec.names:
            number = spec.names[name]
            # 'sat-sun' means Saturday to Sunday: Sunday as a range end is 7.
            return 7 if end and spec.name == "day-of-week" and number == 0 else number
        if spec.names is None:
            kind = "month" if name in _MONTHS else "weekday" if name in _WEEKDAYS else ""
            where = f"{kind} names belong in the {kind} field" if kind else "use a number"
            raise self.error(item, f"names are not allowed in the {spec.name} field; {where}")
        if spec.name == "month" and name in _WEEKDAYS:
            raise self.error(
                item, f"{text!r} is a weekday name; it belongs in the day-of-week field"
            )
        if spec.name == "day-of-week" and name in _MONTHS:
            raise self.error(item, f"{text!r} is a month name; it belongs in the month field")
        choices = ", ".join(spec.names)
        raise self.error(item, f"unknown {spec.name} name {text!r}; use one of {choices}")


def parse_cron(expr: str) -> CronFields:
    """Parse a 5- or 6-field expression or an ``@preset``.

    :raises CronSyntaxError: naming the field, the token and the reason
    """
    if not isinstance(expr, str):
        raise TypeError(f"a cron expression must be a str, not {type(expr).__name__}")
    text = expr.strip(" \t")
    if not text:
        raise CronSyntaxError(expr, "expression", expr, "empty; expected 5 or 6 fields")
    if text.startswith("@"):
        preset = PRESETS.get(text.lower())
        if preset is None:
            choices = ", ".join(PRESETS)
            raise CronSyntaxError(expr, "expression", text, f"unknown preset; use one of {choices}")
        text = preset
    tokens = _BLANKS.split(text)
    if len(tokens) == 7:
        raise CronSyntaxError(
            expr, "year", tokens[6], "a seventh (year) field is Quartz syntax; remove it"
        )
    if len(tokens) == 5:
        tokens.insert(0, "0")
    elif len(tokens) != 6:
        raise CronSyntaxError(
            expr,
            "expression",
            text,
            f"expected 5 fields (minute ... day-of-week) or 6 (second first), got {len(tokens)}",
        )
    sets = [_FieldParser(expr, spec, tok).parse() for spec, tok in zip(_SPECS, tokens, strict=True)]
    fields = CronFields(*sets)
    _check_fires(expr, tokens[3], fields)
    return fields


def _check_fires(expr: str, dom_text: str, fields: CronFields) -> None:
    """Reject day-of-month and month combinations that can never occur (``30 2``).

    Day-of-week always matches some day in any month, so only a restricted day-of-month
    with an unrestricted day-of-week can make the expression dead.
    """
    if fields.dow_restricted or not fields.dom_restricted:
        return
    first = min(fields.day_of_month)
    if any(first <= _MAX_DAYS[m] for m in fields.month):
        return
    names = ", ".join(_MONTH_NAMES[m - 1] for m in sorted(fields.month))
    raise CronSyntaxError(
        expr,
        "day-of-month",
        dom_text,
        f"no listed day occurs in {names}; the expression would never fire",
    )
