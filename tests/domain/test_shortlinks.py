"""Short links: codes, URL and alias rules, the pool and its races, expiry, counted clicks."""

from __future__ import annotations

import collections
import logging
import re
from collections.abc import Iterator
from datetime import timedelta

import anyio
import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from domain._shortlink_rules import ALPHABET, new_code, validate_alias, validate_url
from domain.abc import CounterStore
from domain.db import short_links, shortlink_pool
from domain.events import catalog
from domain.exceptions import (
    AliasTakenError,
    CodeSpaceExhaustedError,
    InvalidAliasError,
    InvalidUrlError,
    ReservedAliasError,
)
from domain.shortlinks import ShortLinks
from eventbus import EventBus
from tests.domain.conftest import T0, Clock


def test_codes_are_six_base62_characters_drawn_without_bias() -> None:
    codes = [new_code() for _ in range(10_000)]
    assert all(len(c) == 6 and set(c) <= set(ALPHABET) for c in codes)
    counts = collections.Counter("".join(codes))
    expected = 60_000 / 62  # ~968; "byte % 62" would give the first 8 chars ~25% more
    assert set(counts) == set(ALPHABET)
    assert max(counts.values()) < expected * 1.15
    assert min(counts.values()) > expected * 0.85


@pytest.mark.parametrize(
    "url",
    [
        pytest.param("https://example.com", id="https"),
        pytest.param("http://example.com:8080/a?b=c#d", id="http-port-query"),
        pytest.param("HTTPS://Example.COM/Path", id="upper-scheme"),
        pytest.param("https://[2606:4700::1111]/x", id="ipv6"),
        pytest.param("http://93.184.215.14:8000/", id="ipv4"),
        pytest.param("http://8.8.8.8./", id="ipv4-trailing-dot"),
        pytest.param("https://localhost.example.com/", id="localhost-label-of-a-domain"),
        pytest.param("https://123abc.example/x", id="label-starting-with-digits"),
        pytest.param("https://example.0xg/", id="last-label-not-a-number"),
        pytest.param("https://xn--bcher-kva.example/", id="idna-a-label"),
        pytest.param("https://my_host.example.com./", id="underscore-trailing-dot"),
        pytest.param("https://example.com/caf\u00e9?q=\u00fc", id="non-ascii-path"),
        pytest.param("https://example.com/a@b", id="at-in-path"),
    ],
)
def test_accepted_urls(url: str) -> None:
    assert validate_url(url) == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        pytest.param("javascript:alert(1)", "scheme 'javascript'", id="javascript"),
        pytest.param("JavaScript:alert(1)", "scheme 'javascript'", id="javascript-case"),
        pytest.param("data:text/html,<b>x</b>", "scheme 'data'", id="data"),
        pytest.param("ftp://example.com/f", "scheme 'ftp'", id="ftp"),
        pytest.param("/relative/path", "relative", id="relative"),
        pytest.param("//example.com/x", "relative", id="scheme-relative"),
        pytest.param("example.com", "relative", id="bare-host"),
        pytest.param("https://", "no host", id="no-host"),
        pytest.param("https://exa mple.com", "whitespace", id="space"),
        pytest.param("https://example.com/\n", "whitespace", id="newline"),
        pytest.param("https://example.com:99999/", "does not parse", id="bad-port"),
        pytest.param("", "empty", id="empty"),
        pytest.param("https://e.com/" + "a" * 2100, "over 2048", id="overlong"),
        pytest.param("https://paypal.com@evil.com/", "userinfo", id="userinfo"),
        pytest.param("https://user:pw@example.com/", "userinfo", id="userinfo-password"),
        pytest.param("https://@example.com/", "userinfo", id="userinfo-empty"),
        pytest.param("https://evil.com\\@good.com/", "backslash", id="backslash-host"),
        pytest.param("https://example.com/a\\b", "backslash", id="backslash-path"),
        pytest.param("https://exa\u200bmple.com/", "invisible", id="zero-width-space"),
        pytest.param("https://example.com/\u202eexe.txt", "invisible", id="bidi-override"),
        pytest.param("https://example.com/\ufeff", "invisible", id="bom"),
        pytest.param("https://example.com/\x85", "whitespace", id="c1-control"),
        pytest.param("https://example.com/\u00a0", "whitespace", id="nbsp"),
        pytest.param("https://example.com/\x00", "control", id="nul"),
        pytest.param("https://b\u00fccher.example/", "not ASCII", id="idn-host"),
        pytest.param("https://\u0440\u0430ypal.com/", "not ASCII", id="cyrillic-homograph"),
        pytest.param("https://ex%61mple.com/", "is not dot-separated labels", id="percent-host"),
        pytest.param("https://exa<mple.com/", "is not dot-separated labels", id="angle-host"),
        pytest.param("https://[v1.fe]/", "not an IPv6", id="ipvfuture"),
        pytest.param("https://a..com/", "is not dot-separated labels", id="empty-label"),
        pytest.param("https://-/", "is not dot-separated labels", id="hyphen-host"),
        pytest.param("https://a.com:0/", "port 0", id="port-0"),
    ],
)
def test_refused_urls_name_the_reason(url: str, reason: str) -> None:
    """Regression test (rows from ``userinfo`` on): userinfo, backslashes, invisible characters
    and non-ASCII or odd hosts were accepted, so a link could show one host and go to another."""
    with pytest.raises(InvalidUrlError, match=reason):
        validate_url(url)


INTRANET = "intranet targets need allow_intranet=True"
LOOPBACK = "is loopback (the machine that follows the link)"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        pytest.param("http://127.0.0.1:8000/", f"host '127.0.0.1' {LOOPBACK}", id="loopback"),
        pytest.param("http://127.9.9.9/", f"host '127.9.9.9' {LOOPBACK}", id="loopback-8"),
        pytest.param("https://[::1]/x", f"host [::1] {LOOPBACK}", id="loopback-ipv6"),
        pytest.param("http://localhost:3000/", f"host 'localhost' {LOOPBACK}", id="localhost"),
        pytest.param("http://LocalHost./", f"host 'localhost.' {LOOPBACK}", id="localhost-dot"),
        pytest.param("http://admin.localhost/", f"host 'admin.localhost' {LOOPBACK}",
                     id="dot-localhost"),
        pytest.param("http://169.254.10.1/", "host '169.254.10.1' is link-local",
                     id="link-local"),
        pytest.param("http://[fe80::1]/", "host [fe80::1] is link-local", id="link-local-ipv6"),
        pytest.param("http://10.0.0.255./", "host '10.0.0.255.' is private", id="private-10"),
        pytest.param("http://172.16.0.1/", "host '172.16.0.1' is private", id="private-172"),
        pytest.param("http://192.168.1.1/", "host '192.168.1.1' is private", id="private-192"),
        pytest.param("http://[fd12:3456::1]/", "host [fd12:3456::1] is private", id="ula"),
        pytest.param("http://100.64.0.1/", "host '100.64.0.1' is not globally reachable",
                     id="shared-cgnat"),
        pytest.param("http://[::ffff:127.0.0.1]/",
                     f"host [::ffff:127.0.0.1] (the IPv4 address 127.0.0.1) {LOOPBACK}",
                     id="ipv4-mapped"),
        pytest.param("http://[2002:c0a8:101::]/",
                     "(the IPv4 address 192.168.1.1) is private", id="6to4"),
    ],
)  # fmt: skip
def test_loopback_link_local_and_private_targets_need_the_intranet_option(
    url: str, reason: str
) -> None:
    """Regression test: links to loopback, link-local and private addresses were accepted,
    so a public shortener sent whoever follows its links (a browser, a link-preview fetcher)
    into their own machine or network."""
    with pytest.raises(InvalidUrlError, match=re.escape(f"{reason}; {INTRANET}")):
        validate_url(url)
    assert validate_url(url, allow_intranet=True) == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        pytest.param("http://169.254.169.254/latest/meta-data/",
                     "host '169.254.169.254' is a cloud metadata service", id="metadata"),
        pytest.param("http://[fd00:ec2::254]/latest/",
                     "host [fd00:ec2::254] is a cloud metadata service", id="metadata-ipv6"),
        pytest.param("http://metadata.google.internal/computeMetadata/v1/",
                     "host 'metadata.google.internal' is a cloud metadata service",
                     id="metadata-gcp"),
        pytest.param("http://metadata.google.internal./",
                     "host 'metadata.google.internal.' is a cloud metadata service",
                     id="metadata-gcp-dot"),
        pytest.param("http://[64:ff9b::a9fe:a9fe]/",
                     "(the IPv4 address 169.254.169.254) is a cloud metadata service",
                     id="metadata-nat64"),
        pytest.param("http://0.0.0.0/", "host '0.0.0.0' is the unspecified address",
                     id="unspecified"),
        pytest.param("http://[::]/", "host [::] is the unspecified address",
                     id="unspecified-ipv6"),
        pytest.param("http://224.0.0.1/", "host '224.0.0.1' is a multicast address",
                     id="multicast"),
        pytest.param("http://255.255.255.255/", "host '255.255.255.255' is in a reserved range",
                     id="broadcast"),
        pytest.param("http://[fe80::1%25eth0]/", "host [fe80::1%25eth0] has an IPv6 zone id",
                     id="zone-id"),
        pytest.param("http://[::1%251]:8000/", "host [::1%251] has an IPv6 zone id",
                     id="zone-id-loopback"),
    ],
)  # fmt: skip
def test_metadata_unspecified_and_zoned_targets_are_refused_even_on_an_intranet(
    url: str, reason: str
) -> None:
    """Regression test: a link could lead to the cloud metadata service (instance
    credentials), to the unspecified address (the follower's own machine) or to an
    address with a zone id (an interface of the follower's machine)."""
    for allow_intranet in (False, True):
        with pytest.raises(InvalidUrlError, match=re.escape(reason)) as refused:
            validate_url(url, allow_intranet=allow_intranet)
        assert INTRANET not in str(refused.value)


HIDDEN = "which hides where the link goes; write it as"
NOT_AN_ADDRESS = "ends in a number, so browsers read it as an IPv4 address, and it is not one"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        pytest.param("http://2130706433/", f"127.0.0.1 as one decimal number, {HIDDEN} 127.0.0.1",
                     id="decimal"),
        pytest.param("http://0177.0.0.1/", f"127.0.0.1 in octal, {HIDDEN} 127.0.0.1", id="octal"),
        pytest.param("http://0x7f.0.0.1/", f"127.0.0.1 in hexadecimal, {HIDDEN}", id="hex"),
        pytest.param("http://0X7F000001/", "127.0.0.1 as one hexadecimal number", id="hex-whole"),
        pytest.param("http://127.1/", f"127.0.0.1 in 2 parts, {HIDDEN} 127.0.0.1", id="short"),
        pytest.param("http://10.1.256/", "10.1.1.0 in 3 parts", id="short-3-parts"),
        pytest.param("http://0x7f.1/", "127.0.0.1 in hexadecimal and 2 parts", id="mixed"),
        pytest.param("http://127.0.0.01/", "127.0.0.1 in octal", id="octal-last"),
        pytest.param("http://0x/", "0.0.0.0 as one hexadecimal number", id="bare-0x"),
        pytest.param("http://256.0.0.1/", NOT_AN_ADDRESS, id="octet-over-255"),
        pytest.param("http://1.2.3.4.5/", NOT_AN_ADDRESS, id="five-parts"),
        pytest.param("http://1.2.3.08/", NOT_AN_ADDRESS, id="bad-octal"),
        pytest.param("http://example.123/", NOT_AN_ADDRESS, id="name-ending-in-a-number"),
        pytest.param("http://4294967296/", NOT_AN_ADDRESS, id="over-32-bits"),
    ],
)  # fmt: skip
def test_hosts_that_browsers_read_as_another_ipv4_address_are_refused(
    url: str, reason: str
) -> None:
    """Regression test: numeric IPv4 forms other than dotted decimal were accepted, so a link
    to ``http://2130706433/`` went to 127.0.0.1 without showing it."""
    with pytest.raises(InvalidUrlError, match=re.escape(reason)):
        validate_url(url)


@pytest.mark.parametrize("route", ["links", "articles", "orders", "healthz", "admin"])
def test_the_web_routes_are_reserved_by_default(route: str) -> None:
    """Regression test: ``/links``, ``/articles`` and ``/orders`` could be claimed as aliases."""
    with pytest.raises(ReservedAliasError):
        validate_alias(route)


async def test_create_refuses_bad_url_before_touching_the_pool(engine: AsyncEngine) -> None:
    links = ShortLinks(engine)
    await links.refill(watermark=3)
    with pytest.raises(InvalidUrlError, match="javascript"):
        await links.create("javascript:alert(document.cookie)")
    assert await links.idle_codes() == 3


async def test_intranet_targets_are_an_option_of_the_service(engine: AsyncEngine) -> None:
    public, intranet = ShortLinks(engine), ShortLinks(engine, allow_intranet=True)
    await public.refill(watermark=3)
    with pytest.raises(InvalidUrlError, match=re.escape("host '10.0.0.5' is private")):
        await public.create("http://10.0.0.5/wiki")
    assert (await intranet.create("http://10.0.0.5/wiki")).url == "http://10.0.0.5/wiki"
    with pytest.raises(InvalidUrlError, match="is a cloud metadata service"):
        await intranet.create("http://169.254.169.254/latest/meta-data/")


async def test_refill_reaches_watermark_and_skips_duplicate_codes(engine: AsyncEngine) -> None:
    links = ShortLinks(engine, batch=4)
    await links.create("https://example.com", alias="dupe01")
    script = iter(["aaaaaa", "aaaaaa", "dupe01", "bbbbbb"] + [f"c{i:05d}" for i in range(100)])
    links.code_factory = lambda: next(script)
    with anyio.fail_after(10):
        added = await links.refill(watermark=6)
    assert added == 6
    async with engine.connect() as conn:
        codes = (await conn.execute(select(shortlink_pool.c.code))).scalars().all()
    # batch 1 keeps 2 of 4 (a duplicate in the batch, one of the alias), batch 2 tops up
    assert sorted(codes) == ["aaaaaa", "bbbbbb", "c00000", "c00001", "c00002", "c00003", "dupe01"]
    assert await links.refill(watermark=6) == 0  # already at the watermark


async def test_refill_gives_up_after_bounded_rounds_of_duplicates(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    links = ShortLinks(engine, code_factory=lambda: "zzzzzz")
    with caplog.at_level(logging.WARNING, "domain.shortlinks"), anyio.fail_after(10):
        assert await links.refill(watermark=5, max_rounds=3) == 1
    assert "too many duplicate codes" in caplog.text


async def test_50_creators_racing_for_10_codes_never_share_one(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    links = ShortLinks(engine)
    await links.refill(watermark=10)
    async with engine.connect() as conn:
        pool = set((await conn.execute(select(shortlink_pool.c.code))).scalars())
    made = []

    async def creator(i: int) -> None:
        made.append(await links.create(f"https://example.com/{i}"))

    with caplog.at_level(logging.WARNING, "domain.shortlinks"), anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i in range(50):
                tg.start_soon(creator, i)
    codes = [link.code for link in made]
    assert len(codes) == len(set(codes)) == 50
    from_pool = {link.code for link in made if link.source == "pool"}
    assert from_pool == pool  # all 10 idle codes handed out, each once
    assert sum(link.source == "fallback" for link in made) == 40
    assert "pool is empty" in caplog.text
    async with engine.connect() as conn:
        urls = dict((await conn.execute(select(short_links.c.code, short_links.c.url))).all())
    assert all(urls[link.code] == link.url for link in made)


async def test_fallback_retries_on_a_taken_code_then_gives_up(engine: AsyncEngine) -> None:
    links = ShortLinks(engine, fallback_attempts=3)
    taken = await links.create("https://example.com/1")  # pool empty: a fallback code
    script: Iterator[str] = iter([taken.code, taken.code, "fresh1"])
    links.code_factory = lambda: next(script)
    second = await links.create("https://example.com/2")
    assert (second.code, second.source) == ("fresh1", "fallback")
    links.code_factory = lambda: "fresh1"
    with pytest.raises(CodeSpaceExhaustedError, match="after 3 attempts"):
        await links.create("https://example.com/3")


@pytest.mark.parametrize(
    ("alias", "error", "match"),
    [
        pytest.param("ab", InvalidAliasError, "2 characters", id="too-short"),
        pytest.param("a" * 33, InvalidAliasError, "33 characters", id="too-long"),
        pytest.param("my link", InvalidAliasError, "letters, digits", id="space"),
        pytest.param("-lead", InvalidAliasError, "starting with", id="leading-dash"),
        pytest.param("café", InvalidAliasError, "letters, digits", id="non-ascii"),
        pytest.param("admin", ReservedAliasError, "reserved", id="admin"),
        pytest.param("API", ReservedAliasError, "reserved", id="api-upper"),
        pytest.param("health", ReservedAliasError, "reserved", id="health"),
        pytest.param("custom", ReservedAliasError, "reserved", id="configured"),
    ],
)
async def test_invalid_and_reserved_aliases(
    engine: AsyncEngine, alias: str, error: type[Exception], match: str
) -> None:
    links = ShortLinks(engine, reserved={"api", "admin", "health", "static", "login", "custom"})
    with pytest.raises(error, match=match):
        await links.create("https://example.com", alias=alias)
    async with engine.connect() as conn:
        assert await conn.scalar(select(func.count()).select_from(short_links)) == 0


async def test_taken_alias_is_refused(engine: AsyncEngine) -> None:
    links = ShortLinks(engine)
    first = await links.create("https://example.com/a", alias="summer-sale")
    assert (first.code, first.source) == ("summer-sale", "alias")
    with pytest.raises(AliasTakenError, match="'summer-sale' is already taken"):
        await links.create("https://example.com/b", alias="summer-sale")
    assert (await links.resolve("summer-sale")).url == "https://example.com/a"


async def test_resolve_unknown_and_expired_codes(engine: AsyncEngine) -> None:
    clock = Clock()
    links = ShortLinks(engine, clock=clock)
    link = await links.create("https://example.com", expires_at=T0 + timedelta(hours=1))
    hit = await links.resolve(link.code)
    assert (hit.found, hit.status, hit.url) == (True, 302, "https://example.com")
    missing = await links.resolve("nope42")
    assert (missing.status, missing.reason) == (404, "unknown")
    clock.now = T0 + timedelta(hours=1)
    expired = await links.resolve(link.code)
    assert (expired.status, expired.reason) == (404, "expired")
    async with engine.connect() as conn:  # expiry is a field: the row is still there
        assert await conn.scalar(select(func.count()).select_from(short_links)) == 1


@pytest.mark.parametrize(
    "code",
    [
        pytest.param("ab\x00cd", id="nul"),
        pytest.param("\ud800abc", id="lone-surrogate"),
        pytest.param("abc\udcff", id="trailing-surrogate"),
        pytest.param("ab cd", id="space"),
        pytest.param("docs\n", id="trailing-newline"),
        pytest.param("caf\u00e9", id="non-ascii"),
        pytest.param("", id="empty"),
        pytest.param("a" * 65, id="too-long"),
    ],
)
async def test_a_string_that_cannot_be_a_code_is_a_miss(engine: AsyncEngine, code: str) -> None:
    """Regression test: a lone surrogate raised on SQLite and PostgreSQL, and a NUL raised on
    PostgreSQL (``tests/domain/test_postgres.py`` runs this test there), instead of a 404."""
    links = ShortLinks(engine)
    await links.create("https://example.com/", alias="docs")
    with anyio.fail_after(5):
        missing = await links.resolve(code)
    assert (missing.status, missing.reason, missing.url) == (404, "unknown", None)
    assert (await links.resolve("docs")).url == "https://example.com/"


async def test_visits_emit_and_clicks_are_flushed_to_sql(
    engine: AsyncEngine, store: CounterStore
) -> None:
    bus = EventBus(registry=catalog)
    links = ShortLinks(engine, bus=bus, clicks=store)
    links.attach(bus)
    seen: list[str] = []
    bus.on("shortlink.visited", lambda e: seen.append(e.code))  # type: ignore[attr-defined]
    with anyio.fail_after(10):
        async with bus:
            a = await links.create("https://example.com/a")
            b = await links.create("https://example.com/b", alias="bee")
            for _ in range(3):
                await links.resolve(a.code)
            await links.resolve(b.code)
            await links.resolve("unknown")  # a miss emits nothing
        report = await links.flush_clicks()
    assert seen == [a.code] * 3 + [b.code]
    assert report.total == 4
    assert await links.clicks_of(a.code, b.code) == {a.code: 3, b.code: 1}
