"""Subscription patterns: ``*`` is one segment, ``**`` zero or more, anywhere."""

from __future__ import annotations

import pytest

from eventbus import EventBus, InvalidPatternError, matches
from eventbus._patterns import compile_pattern
from tests.eventbus.helpers import OrderPaid, Recorder, ShortlinkVisited

PAID = OrderPaid(order_id=1, user_id=7)

CASES = [
    # exact names
    pytest.param("order.paid", "order.paid", True, id="exact"),
    pytest.param("order.paid", "order.shipped", False, id="exact-other"),
    pytest.param("order.paid", "order.paid.late", False, id="exact-longer-name"),
    pytest.param("order.paid.late", "order.paid", False, id="exact-shorter-name"),
    pytest.param("order", "order", True, id="exact-one-segment"),
    # '*' matches exactly one segment
    pytest.param("order.*", "order.paid", True, id="star-tail"),
    pytest.param("order.*", "order.shipped", True, id="star-tail-2"),
    pytest.param("order.*", "order", False, id="star-tail-needs-a-segment"),
    pytest.param("order.*", "order.paid.late", False, id="star-tail-only-one"),
    pytest.param("order.*", "user.paid", False, id="star-tail-prefix-differs"),
    pytest.param("*.paid", "order.paid", True, id="star-head"),
    pytest.param("*.paid", "invoice.paid", True, id="star-head-2"),
    pytest.param("*.paid", "paid", False, id="star-head-needs-a-segment"),
    pytest.param("*.paid", "a.order.paid", False, id="star-head-only-one"),
    pytest.param("*.paid", "order.paid.x", False, id="star-head-suffix"),
    pytest.param("a.*.c", "a.b.c", True, id="star-middle"),
    pytest.param("a.*.c", "a.c", False, id="star-middle-empty"),
    pytest.param("a.*.c", "a.b.b.c", False, id="star-middle-two"),
    pytest.param("*", "order", True, id="star-alone"),
    pytest.param("*", "order.paid", False, id="star-alone-two-segments"),
    pytest.param("*.*", "order.paid", True, id="star-star-separate"),
    pytest.param("*.*", "order", False, id="star-star-separate-short"),
    # '**' matches zero or more segments
    pytest.param("**", "order", True, id="globstar-one"),
    pytest.param("**", "order.paid.late.really", True, id="globstar-many"),
    pytest.param("shortlink.**", "shortlink", True, id="globstar-tail-zero"),
    pytest.param("shortlink.**", "shortlink.visited", True, id="globstar-tail-one"),
    pytest.param("shortlink.**", "shortlink.code.claimed", True, id="globstar-tail-two"),
    pytest.param("shortlink.**", "shortlinks.visited", False, id="globstar-tail-whole-segment"),
    pytest.param("shortlink.**", "order.shortlink", False, id="globstar-tail-prefix-differs"),
    pytest.param("**.paid", "paid", True, id="globstar-head-zero"),
    pytest.param("**.paid", "order.paid", True, id="globstar-head-one"),
    pytest.param("**.paid", "x.order.paid", True, id="globstar-head-two"),
    pytest.param("**.paid", "order.paid.late", False, id="globstar-head-suffix"),
    pytest.param("a.**.b", "a.b", True, id="globstar-middle-zero"),
    pytest.param("a.**.b", "a.x.b", True, id="globstar-middle-one"),
    pytest.param("a.**.b", "a.x.y.b", True, id="globstar-middle-two"),
    pytest.param("a.**.b", "a.x.y", False, id="globstar-middle-no-end"),
    pytest.param("a.**.b", "x.a.b", False, id="globstar-middle-no-start"),
    pytest.param("a.**.b", "a.b.c", False, id="globstar-middle-trailing"),
    pytest.param("a.**.b", "a.b.x.b", True, id="globstar-middle-backtracks"),
    pytest.param("a.**.b.**.c", "a.x.b.y.z.c", True, id="two-globstars"),
    pytest.param("a.**.b.**.c", "a.b.c", True, id="two-globstars-zero"),
    pytest.param("a.**.b.**.c", "a.c.b", False, id="two-globstars-wrong-order"),
    pytest.param("**.*", "order", True, id="globstar-then-star"),
    pytest.param("*.**", "order", True, id="star-then-globstar"),
    pytest.param("**.*.*", "order", False, id="globstar-needs-two"),
    pytest.param("**.**", "order.paid", True, id="globstar-twice"),
    pytest.param("*.**.paid", "order.paid", True, id="star-globstar-name"),
    pytest.param("*.**.paid", "paid", False, id="star-globstar-name-too-short"),
    pytest.param("user-v2.sign_up", "user-v2.sign_up", True, id="dash-underscore"),
    pytest.param("order.*", "order.1", True, id="digit-segment"),
]


@pytest.mark.parametrize(("pattern", "name", "expected"), CASES)
def test_matches(pattern: str, name: str, expected: bool) -> None:
    assert matches(pattern, name) is expected


def test_table_is_big_enough_and_balanced() -> None:
    results = [p.values[2] for p in CASES]
    assert len(CASES) >= 40
    assert results.count(True) >= 15 and results.count(False) >= 15


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        pytest.param("", "must not be empty", id="empty"),
        pytest.param("order..paid", "segment 2 is empty", id="empty-segment"),
        pytest.param("order.", "segment 2 is empty", id="trailing-dot"),
        pytest.param(".order", "segment 1 is empty", id="leading-dot"),
        pytest.param("a.*x", "mixes '\\*' with text", id="star-with-text"),
        pytest.param("a.x**", "mixes '\\*' with text", id="globstar-with-text"),
        pytest.param("a.***", "mixes '\\*' with text", id="triple-star"),
        pytest.param("Order.paid", "contains 'O'", id="uppercase"),
        pytest.param("order.pa/id", "contains '/'", id="slash"),
    ],
)
def test_invalid_pattern_is_a_clear_error(pattern: str, reason: str) -> None:
    with pytest.raises(InvalidPatternError, match=reason) as info:
        matches(pattern, "order.paid")
    assert repr(pattern) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_invalid_pattern_is_refused_at_subscription(bus: EventBus) -> None:
    with pytest.raises(InvalidPatternError, match="a.\\*x"):
        bus.on("a.*x", lambda e: None)
    assert bus.statistics().listeners == 0


def test_non_string_pattern_is_refused(bus: EventBus) -> None:
    with pytest.raises(TypeError, match="expected an Event subclass or a pattern"):
        bus.on(42, lambda e: None)  # type: ignore[call-overload]


def test_wildcards_subscribe_on_the_bus(bus: EventBus, rec: Recorder) -> None:
    bus.on("shortlink.**", rec.sync("tail"))
    bus.on("*.visited", rec.sync("head"))
    bus.on("**", rec.sync("all"))
    bus.on("order.*", rec.sync("orders"))
    bus.emit(ShortlinkVisited(code="abc123"))
    assert rec.tags == ["tail", "head", "all"]


def test_plans_match_compiled_segments_not_the_pattern_cache(bus: EventBus, rec: Recorder) -> None:
    """Regression test: beyond 1024 patterns, lru_cache thrashed on every plan build."""
    for i in range(1100):
        bus.on(f"x{i}.*", rec.sync(f"p{i}"))
    bus.on("order.*", rec.sync("orders"))
    before = compile_pattern.cache_info()
    bus.emit(PAID)
    after = compile_pattern.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)
    assert rec.tags == ["orders"]
