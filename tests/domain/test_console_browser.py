"""The console in a real browser (headless Chromium), as an operator uses it.

One live server (the domain web application with its console, seeded with the web demo's
data) and one browser session serve the whole module. Every page load checks that the
browser's console logged no error (a CSP violation, a missing file, a script error).
``EVENTBUS_SCREENSHOTS=DIR`` (``make screenshots``) saves the screenshots of the README and
docs/console.md there.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from domain import App, Schedules
from domain.web import WebConfig, create_app
from domain.web_demo import seed
from tests.console_support import TOKEN, LiveServer, chromium
from tests.eventbus.console.conftest import Invoicer
from tests.eventbus.console.test_streams_page import Fragile

pytestmark = pytest.mark.browser

SHOTS = os.environ.get("EVENTBUS_SCREENSHOTS")


@pytest.fixture(scope="module")
def invoicer() -> Invoicer:
    """Works while the demo data is seeded; a test breaks it when it needs a failure."""
    invoicer = Invoicer()
    invoicer.broken = False
    return invoicer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, invoicer: Invoicer) -> Iterator[LiveServer]:
    from domain.events import OrderPaid

    async def on_start(app: App) -> None:
        app.bus.on(OrderPaid, invoicer, name="tests:invoice")
        await seed(app)

    db = tmp_path_factory.mktemp("console-browser") / "web.db"
    config = WebConfig(
        db=db,
        console_token=TOKEN,
        on_start=on_start,
        app_options={"refill_watermark": 20, "schedules": Schedules.fast()},  # as the web demo
        allow_intranet_links=True,  # a short link to a page of this server on 127.0.0.1
    )
    with LiveServer(create_app(config)) as live:
        yield live


@pytest.fixture(scope="module")
def browser(server: LiveServer) -> Iterator[Any]:
    with chromium() as driver:
        yield driver


class Operator:
    """What a person does: open a page, fill a form, press a button; checking each time that
    the browser logged no error."""

    def __init__(self, driver: Any, server: LiveServer) -> None:
        from selenium.webdriver.common.by import By

        self.driver = driver
        self.server = server
        self.by = By

    def errors(self) -> list[str]:
        return [e["message"] for e in self.driver.get_log("browser") if e["level"] == "SEVERE"]

    def open(self, path: str) -> None:
        self.driver.get(self.server.url + path)
        assert self.errors() == []

    def find(self, css: str) -> Any:
        return self.driver.find_element(self.by.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        return list(self.driver.find_elements(self.by.CSS_SELECTOR, css))

    def text(self, css: str = "main") -> str:
        return str(self.find(css).text)

    def submit(self, button: Any) -> None:
        """Press a form's button and wait for the page it leads to."""
        old = self.find("html")
        button.click()
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.driver, 10).until(expected_conditions.staleness_of(old))
        assert self.errors() == []

    def login(self) -> None:
        self.open("/ops/")
        if "/ops/login" not in self.driver.current_url:
            return
        self.find("input[name=user]").send_keys("ann")
        self.find("input[name=token]").send_keys(TOKEN)
        self.submit(self.find("form button[type=submit]"))
        assert "/ops/login" not in self.driver.current_url

    def shot(self, name: str) -> None:
        if SHOTS:
            Path(SHOTS).mkdir(parents=True, exist_ok=True)
            height = self.driver.execute_script("return document.documentElement.scrollHeight")
            width = self.driver.get_window_size()["width"]
            self.driver.set_window_size(width, min(1400, max(700, height + 100)))
            self.driver.save_screenshot(str(Path(SHOTS) / f"console-{name}.png"))


@pytest.fixture
def person(browser: Any, server: LiveServer) -> Iterator[Operator]:
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})
    browser.set_window_size(1280, 900)
    operator = Operator(browser, server)
    operator.errors()  # forget what an earlier test left in the log
    yield operator


def test_log_in_see_a_failure_open_its_traceback_and_retry_it(
    person: Operator, server: LiveServer, invoicer: Invoicer
) -> None:
    invoicer.broken = True
    person.open("/ops/failures")
    assert "/ops/login" in person.driver.current_url  # no session yet
    person.find("input[name=user]").send_keys("ann")
    person.find("input[name=token]").send_keys(TOKEN)
    person.submit(person.find("form button[type=submit]"))
    assert person.driver.current_url.endswith("/ops/failures")

    paid = httpx.post(f"{server.url}/orders/7/pay", json={"user_id": 1, "amount": "5.00"})
    assert paid.status_code == 202
    person.open("/ops/failures?listener=tests:invoice")
    [row] = person.find_all("table.failures tbody tr")
    assert "invoice service down for order 7" in row.text
    person.submit(row.find_element(person.by.CSS_SELECTOR, "a"))
    assert "invoice service down for order 7" in person.text("#traceback")
    assert person.text("#failure-status") == "pending"

    invoicer.broken = False  # the listener was fixed
    person.submit(person.find("form[action$='/retry'] button"))
    assert person.text("#result").startswith("Retried tests:invoice for order.paid: resolved.")
    assert person.text("#failure-status") == "resolved"
    assert invoicer.invoiced[-1] == 7
    person.open("/ops/actions")
    assert "failures.retry" in person.text("table") and "ann" in person.text("table")


def test_create_a_short_link_and_follow_it(person: Operator, server: LiveServer) -> None:
    person.login()
    person.open("/ops/links")
    target = f"{server.url}/ops/bus"  # a page of ours: its errors are checked too
    person.find("#create-link input[name=url]").send_keys(target)
    person.submit(person.find("#create-link button"))
    banner = person.text("#result")
    match = re.match(rf"Created ({re.escape(server.url)}/(\w+)) → ", banner)
    assert match is not None, banner
    short_url, code = match.groups()
    link = person.find(f"a.short[href='{short_url}']")
    person.submit(link)  # follow it: a 302 to the target
    assert person.driver.current_url == target
    assert person.text("h1") == "Bus"
    deadline = time.monotonic() + 10
    while True:  # the click is counted by a background listener, then flushed by a job
        person.open("/ops/links")
        row = person.find(f"a.short[href='{short_url}']").find_element(
            person.by.XPATH, "./ancestor::tr"
        )
        cells = row.find_elements(person.by.TAG_NAME, "td")
        counted = sum(int(n) for n in re.findall(r"\d+", cells[2].text))
        if counted == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert counted == 1, cells[2].text
    assert code in person.text("#links")


def test_pause_a_job_see_its_fires_skipped_and_trigger_one(person: Operator) -> None:
    person.login()
    person.open("/ops/jobs")
    row = person.find("tr[data-job='publish_due']")  # fires every second (the demo's plan)
    assert "* * * * * *" in row.text
    person.submit(row.find_element(person.by.CSS_SELECTOR, "form[action$='/pause'] button"))
    assert person.text("#result").startswith("Paused publish_due")
    assert person.text("tr[data-job='publish_due'] td.state") == "paused"
    deadline = time.monotonic() + 10
    while True:
        person.open("/ops/runs?job=publish_due&status=skipped")
        skipped = [r.text for r in person.find_all("table.runs tbody tr") if "paused" in r.text]
        if len(skipped) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(skipped) >= 2, skipped
    person.open("/ops/jobs")
    person.submit(person.find("tr[data-job='publish_due'] form[action$='/resume'] button"))
    assert person.text("tr[data-job='publish_due'] td.state") == "active"

    def manual_runs() -> int:  # on the job's page; the app ran one at start (an empty pool)
        return sum("manual" in r.text for r in person.find_all("table.runs tbody tr"))

    person.open("/ops/jobs/refill_pool")
    before = manual_runs()
    person.open("/ops/jobs")
    person.submit(person.find("tr[data-job='refill_pool'] form[action$='/trigger'] button"))
    assert person.text("#result").startswith("Ran refill_pool now: succeeded in ")
    assert person.text("h1") == "Job refill_pool"
    assert manual_runs() == before + 1
    newest = person.find("table.runs tbody tr").text
    assert "manual" in newest and "succeeded" in newest


@pytest.fixture
def fragile() -> Fragile:
    return Fragile()


@pytest.fixture
def durable_server(redis_url: str, tmp_path: Path, fragile: Fragile) -> Iterator[LiveServer]:
    """A bus with ``RedisStreams`` on the suite's redis-server (the domain application has no
    durable transport) and its console; it publishes one order at start, which the durable
    listener ``fragile`` gives up on at once (one delivery): a dead letter to replay."""
    from contextlib import asynccontextmanager
    from dataclasses import replace

    from starlette.applications import Starlette
    from starlette.routing import Mount

    from eventbus import EventBus, MemoryFailureStore
    from eventbus.console import Console, bus_pages
    from eventbus.durable import RedisStreams
    from tests.durable.conftest import FAST
    from tests.durable.events import REG, OrderPaid

    db = tmp_path / "shop.db"
    streams = RedisStreams(
        redis_url,
        str(db),
        service="shop",
        registry=REG,
        options=replace(FAST, max_deliveries=1),
    )
    bus = EventBus(REG, MemoryFailureStore(), durable=streams)
    bus.on(OrderPaid, fragile, durable=True, name="fragile")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with bus:
            async with streams.engine.begin() as conn:
                await bus.publish(OrderPaid(order_id=1), conn)
            yield

    console = Console(bus_pages(bus), secret=TOKEN)
    with LiveServer(Starlette(routes=[Mount("/ops", console)], lifespan=lifespan)) as live:
        yield live


def test_replay_a_dead_letter_on_the_streams_page(
    browser: Any, durable_server: LiveServer, fragile: Fragile
) -> None:
    person = Operator(browser, durable_server)
    browser.set_window_size(1280, 900)
    person.errors()
    person.login()
    deadline = time.monotonic() + 10
    while True:  # the relay publishes the order, the listener fails once: dead
        person.open("/ops/streams")
        rows = person.find_all("table.dead tbody tr")
        if rows or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    [row] = rows
    assert "RuntimeError: cannot handle order 1" in row.text
    assert person.text("tr[data-group='shop:fragile'] td.dead") == "1"
    person.shot("streams")
    fragile.broken = False  # the listener was fixed
    person.submit(row.find_element(person.by.CSS_SELECTOR, "form[action$='/replay'] button"))
    assert person.text("#result").startswith("Replayed dead letter ")
    deadline = time.monotonic() + 10
    while fragile.handled != [1] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert fragile.handled == [1]
    person.driver.set_window_size(400, 900)
    person.open("/ops/streams")
    assert person.find_all("table.dead") == []
    assert person.text("tr[data-group='shop:fragile'] td.dead") == "0"
    overflow = person.driver.execute_script(
        "return document.documentElement.scrollWidth - window.innerWidth"
    )
    assert overflow <= 0


PAGES = [
    ("overview", "/ops/"),
    ("failures", "/ops/failures"),
    ("bus", "/ops/bus"),
    ("jobs", "/ops/jobs"),
    ("runs", "/ops/runs"),
    ("links", "/ops/links"),
    ("articles", "/ops/articles"),
    ("actions", "/ops/actions"),
]


@pytest.mark.parametrize("width", [1280, 400])
def test_every_page_fits_the_width_and_logs_no_error(person: Operator, width: int) -> None:
    person.login()
    person.driver.set_window_size(width, 900)
    person.open("/ops/failures?event=user.registered")
    person.submit(person.find("table.failures tbody tr a"))
    pages = [*PAGES, ("failure", person.driver.current_url.split(person.server.url)[1])]
    for name, path in pages:
        person.open(path)
        assert person.find("h1").is_displayed(), name
        overflow = person.driver.execute_script(
            "return document.documentElement.scrollWidth - window.innerWidth"
        )
        assert overflow <= 0, f"{name} is {overflow} px wider than the window at {width} px"
        for nav in person.find_all("header nav a"):
            assert nav.is_displayed(), (name, nav.text)
        # the script ran (the CSP let it): it gave each timestamp its local time as a title
        stamps = person.find_all("time[datetime]")
        assert all(t.get_attribute("title") for t in stamps), name
        if width == 1280 or name == "failures":
            person.shot(name if width == 1280 else f"{name}-narrow")
            person.driver.set_window_size(width, 900)


def test_the_pages_work_without_javascript(person: Operator, server: LiveServer) -> None:
    person.login()
    person.driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    person.open("/ops/failures?listener=mail:welcome&status=pending")
    stamps = person.find_all("time[datetime]")
    assert stamps and not any(t.get_attribute("title") for t in stamps)  # no script ran
    person.submit(person.find("table.failures tbody tr a"))
    person.find("textarea[name=note]").send_keys("bounced address, nothing to resend")
    person.submit(person.find("form[action$='/resolve'] button"))
    assert person.text("#result").startswith("Marked failure")
    assert person.text("#failure-status") == "resolved"

    person.open("/ops/links")
    person.find("#create-link input[name=url]").send_keys("https://example.com/no-js")
    person.find("#create-link input[name=alias]").send_keys("nojs")
    person.submit(person.find("#create-link button"))
    assert person.text("#result").startswith(f"Created {server.url}/nojs")

    person.open("/ops/failures/purge?status=resolved&older_than_days=0")
    person.find("input[name=confirm]").click()
    person.submit(person.find("form[method=post][action$='/purge'] button"))
    assert re.match(r"Purged \d+ resolved failure\(s\)\.", person.text("#result"))
