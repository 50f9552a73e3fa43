"""Live refresh in a real browser: pages follow the runs without a reload and keep the operator's place.

The app refreshes every second (``PGBUS_LIVE_REFRESH=1``, the shortest allowed);
the test changes runs from its own thread (the Python API, and ``work()``: the
in-process worker) and waits, with deadlines, on what an operator sees. "N
refresh cycles" are counted on the wire: the script asks again only after it
applied the last answer, so the (N+1)th request carrying ``X-Pgbus-Live: 1``
means N answers were applied. "Nothing is fetched" is a deadline too: no such
request within 2.5 refresh intervals. Nothing sleeps.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from babel.dates import format_time
from flask import Flask, redirect, request
from werkzeug.serving import make_server

from pgbus_flask.handle import Run
from tests.support import work
from tests.support.browser import IMG, SCRIPT, XSS, BrowserHostile, Browsing, Watch, by_testid, contrast, drain, run_of
from tests.support.webtools import engine_of, work_some
from tests.workflows import FailsUntil, FansOut, PausesItself, ThreeSteps, WaitsForPayment

pytestmark = [pytest.mark.browser, pytest.mark.settings(PGBUS_LIVE_REFRESH=1)]

SOON = 10_000  # ms: a handful of 1-second refresh cycles, with room for a slow machine
QUIET = 2_500  # ms without a live request: 2.5 refresh intervals
# Chromium logs a failed request as a console error itself; the page's own code logs nothing.
# What the browser logs while the test's server is stopped: a refused connection, or one the stopping
# server reset under a request already in flight; and the 503 the test answers on purpose.
NETWORK_LOG = ("net::ERR_CONNECTION_REFUSED", "net::ERR_CONNECTION_RESET", "status of 503")
HIDE = """() => {
  Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"});
  document.dispatchEvent(new Event("visibilitychange"));
}"""
SHOW = HIDE.replace('"hidden"', '"visible"')
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def is_live(request: Any) -> bool:
    return request.headers.get("x-pgbus-live") == "1"


def cycles(page: Any, n: int = 3) -> None:
    """Wait until ``n`` live refreshes were answered and applied."""
    for _ in range(n + 1):
        with page.expect_request(is_live, timeout=SOON):
            pass


def no_refresh(page: Any, within: int = QUIET) -> None:
    """Fail if the page sends a live refresh ``within`` milliseconds."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        with page.expect_request(is_live, timeout=within) as sent:
            pass
    except PlaywrightTimeout:
        return
    raise AssertionError(f"a live refresh was sent: {sent.value.url}")


def row(page: Any, run: Run) -> Any:
    return page.locator(f'[data-testid="run-row"][data-workflow-id="{run.workflow_id}"]')


class Server:
    """The app on one port, which can be stopped like a crashed process (the listening socket and
    every open connection closed) and started again on the same port."""

    def __init__(self, app: Flask) -> None:
        self.app, self.port = app, 0
        self.connections: list[socket.socket] = []
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.server = make_server("127.0.0.1", self.port, self.app, threaded=True)
        self.port = self.server.server_port
        accept = self.server.get_request

        def get_request() -> tuple[socket.socket, Any]:
            connection, address = accept()
            self.connections.append(connection)
            return connection, address

        self.server.get_request = get_request  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.server.serve_forever, name="pgbus-live-server", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
        for connection in self.connections:  # a keep-alive connection would still be served
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.connections.clear()


@pytest.fixture
def server(app: Flask) -> Iterator[Server]:
    served = Server(app)
    yield served
    served.stop()


@pytest.fixture
def live(server: Server, browser: Any) -> Iterator[Browsing]:
    session = Browsing(browser, server.url)
    try:
        yield session
    finally:
        session.close()


# -- the pages follow the runs -----------------------------------------------------------


def test_a_run_page_follows_the_run_to_its_end_without_a_reload(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    csp_seen: list[str] = []

    @app.after_request
    def strict_csp(response: Any) -> Any:  # a host app's policy: scripts and fetches from this site only
        response.headers["Content-Security-Policy"] = CSP
        csp_seen.append(response.headers["Content-Security-Policy"])
        return response

    with app.app_context():
        run = FailsUntil.start(fail_until=1, subject=("Order", 1042))
        work(engine_of(app))
    page, _ = live.page(viewport={"width": 600, "height": 800})  # the steps table scrolls sideways
    page.add_init_script("window.__blocked = [];"
                         "document.addEventListener('securitypolicyviolation', (e) => window.__blocked.push("
                         "e.violatedDirective + ' ' + e.blockedURI));")
    page.goto(f"/pgbus/runs/{run.workflow_id}")
    badge = by_testid(page, "run-header").get_by_test_id("status-badge")
    expect(badge).to_have_attribute("data-value", "paused_error")
    expect(by_testid(page, "action-resume")).to_have_count(1)
    page.get_by_text("Backtrace").click()  # an open <details> in a region that will change
    expect(by_testid(page, "backtrace")).to_be_visible()
    page.evaluate("document.activeElement.blur()")  # while it has the focus, its region waits
    table = page.locator('[data-live="steps"] .scroll')
    table.evaluate("(el) => { el.scrollLeft = 150; }")
    page.evaluate("window.__sameDocument = true")

    run_of(app, run.workflow_id).resume(actor="cli:bob", reason="gateway fixed")
    drain(app)  # the in-process worker retries capture, then runs notify: finished
    expect(badge).to_have_attribute("data-value", "finished", timeout=SOON)
    expect(page.locator('[data-testid="attempt-row"][data-step="notify"]')).to_have_attribute(
        "data-status", "completed")
    resumed = page.locator('[data-testid="audit-entry"][data-event="resumed"] .audit-sentence')
    expect(resumed).to_have_text("Resumed by cli:bob (capture #1): gateway fixed")
    expect(by_testid(page, "action-rerun")).to_have_count(1)  # the actions follow the run too
    expect(by_testid(page, "action-resume")).to_have_count(0)
    expect(by_testid(page, "outputs")).to_contain_text("notified")
    expect(by_testid(page, "backtrace")).to_be_visible()  # still open in the new steps table
    assert table.evaluate("(el) => el.scrollLeft") == 150, "and still scrolled to the same columns"
    assert page.evaluate("window.__sameDocument") is True, "updated in place, not reloaded"
    assert csp_seen and page.evaluate("window.__blocked") == [], "nothing the policy blocks"
    live.assert_no_errors()


def test_the_insights_page_follows_the_runs_without_a_reload_or_a_sweep(app: Flask, live: Browsing) -> None:
    """What an operator watching a class's insights sees: runs that end show up in the cards, the steps'
    failure rates and the class's attention groups within a few refreshes, with no sweep in between."""
    from playwright.sync_api import expect

    with app.app_context():
        FailsUntil.start(fail_until=9)
        work(engine_of(app))
    page, _ = live.page()
    page.goto("/pgbus/classes/FailsUntil/insights?window=1h")
    started = by_testid(page, "insight-started").locator(".card-number")
    rate = page.locator('[data-testid="insight-step"][data-step="capture"] [data-testid="failure-rate"]')
    group = page.locator('[data-testid="insight-group"][data-reason="paused_error"] [data-testid="group-runs-link"]')
    expect(started).to_have_text("1")
    expect(rate).to_have_text("100%")
    expect(group).to_have_text("Show the run")
    page.evaluate("window.__sameDocument = true")

    with app.app_context():
        FailsUntil.start(fail_until=0)  # captures at once
        FailsUntil.start(fail_until=9)  # pauses on TimeoutError like the first
    drain(app)
    expect(started).to_have_text("3", timeout=SOON)
    expect(rate).to_have_text("66.7%")
    expect(group).to_have_text("Show the 2 runs")
    expect(by_testid(page, "insight-failed").locator(".card-number")).to_have_text("2")
    assert page.evaluate("window.__sameDocument") is True, "updated in place, not reloaded"
    live.assert_no_errors()


def test_typed_text_survives_refreshes_and_the_forms_still_post_it(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        run = WaitsForPayment.start(subject=("Order", 7))
        work(engine_of(app))  # waiting for payment_confirmed
    page, watch = live.page()
    page.goto(f"/pgbus/runs/{run.workflow_id}")
    badge = by_testid(page, "run-header").get_by_test_id("status-badge")
    payload, reason = by_testid(page, "signal-payload"), by_testid(page, "action-cancel-reason")
    payload.fill('{"amount": "42.00"}')
    reason.fill("customer called")
    reason.evaluate("(el) => el.setSelectionRange(3, 3)")

    # The caret is in a field: nothing is fetched, the caret stays where it was.
    no_refresh(page)
    assert page.evaluate("document.activeElement.dataset.testid") == "action-cancel-reason"
    assert reason.evaluate("(el) => [el.selectionStart, el.selectionEnd]") == [3, 3]

    # Out of the field, the page follows the run again, around the two forms holding typed text.
    page.evaluate("document.activeElement.blur()")
    run_of(app, run.workflow_id).pause(actor="cli:bob", reason="checking the payment")
    expect(badge).to_have_attribute("data-value", "paused", timeout=SOON)
    expect(page.locator('[data-testid="audit-entry"][data-event="paused"]')).to_have_count(1)
    cycles(page, 3)
    expect(payload).to_have_value('{"amount": "42.00"}')
    expect(reason).to_have_value("customer called")
    expect(by_testid(page, "action-resume")).to_have_count(0)  # its form's region waits for the typing

    by_testid(page, "action-cancel-submit").click()  # the kept form's token is still good
    expect(by_testid(page, "notice")).to_have_text("Done: Cancel run.")
    assert watch.dialogs == ["Cancel this WaitsForPayment run? Its open step is cancelled and nothing else runs."]
    cancelled = run_of(app, run.workflow_id)
    assert cancelled.status == "cancelled"
    assert (cancelled.events()[-1]["actor"], cancelled.events()[-1]["reason"]) == (
        "dashboard:anonymous", "customer called")
    live.assert_no_errors()


def test_a_changed_select_holds_its_region_until_it_is_set_back(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        run = WaitsForPayment.start(subject=("Order", 8))
        work(engine_of(app))
    page, _ = live.page()
    page.goto(f"/pgbus/runs/{run.workflow_id}")
    badge = by_testid(page, "run-header").get_by_test_id("status-badge")
    step = by_testid(page, "action-resume_at-step")
    expect(step).to_have_value("confirm")
    step.select_option("invoice")
    page.evaluate("document.activeElement.blur()")
    run_of(app, run.workflow_id).pause(actor="cli:bob")
    expect(badge).to_have_attribute("data-value", "paused", timeout=SOON)
    cycles(page, 2)
    expect(step).to_have_value("invoice")
    expect(by_testid(page, "action-resume")).to_have_count(0)
    step.select_option("confirm")  # back to what the server sent: the actions follow the run again
    page.evaluate("document.activeElement.blur()")
    expect(by_testid(page, "action-resume")).to_have_count(1, timeout=SOON)
    live.assert_no_errors()


def test_the_runs_list_keeps_filters_scroll_and_the_open_language_menu(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        for n in range(60):
            ThreeSteps.start(order_id=n, subject=("Order", n))
    page, _ = live.page(viewport={"width": 1280, "height": 600})
    page.goto("/pgbus/runs?workflow_class=ThreeSteps&status=ready")
    rows = by_testid(page, "run-row")
    expect(rows).to_have_count(50)
    by_testid(page, "filter-text").fill("not sent yet")  # typed, not submitted: outside every region
    by_testid(page, "locale-menu").click()
    expect(by_testid(page, "locale-switch")).to_have_attribute("open", "")
    page.mouse.wheel(0, 700)
    page.wait_for_function("window.scrollY === 700")

    with app.app_context():
        newest = ThreeSteps.start(order_id=100, subject=("Order", 100))
        other = FailsUntil.start(subject=("Order", 101))
    expect(rows.first).to_have_attribute("data-workflow-id", str(newest.workflow_id), timeout=SOON)
    cycles(page, 2)
    expect(row(page, other)).to_have_count(0)  # the filters hold
    expect(page).to_have_url(re.compile(r"workflow_class=ThreeSteps&status=ready$"))
    expect(by_testid(page, "filter-class")).to_have_value("ThreeSteps")
    expect(by_testid(page, "filter-status")).to_have_value("ready")
    expect(by_testid(page, "filter-text")).to_have_value("not sent yet")
    assert page.evaluate("window.scrollY") == 700
    expect(by_testid(page, "locale-switch")).to_have_attribute("open", "")

    # A keyboard user on a run's link: that region waits while the focus is in it.
    link = rows.first.get_by_test_id("run-link")
    link.focus()
    with app.app_context():
        later = ThreeSteps.start(order_id=102, subject=("Order", 102))
    cycles(page, 2)
    expect(row(page, later)).to_have_count(0)
    assert page.evaluate("document.activeElement.closest('[data-testid=run-row]').dataset.workflowId") == str(
        newest.workflow_id)
    page.evaluate("document.activeElement.blur()")
    expect(rows.first).to_have_attribute("data-workflow-id", str(later.workflow_id), timeout=SOON)
    live.assert_no_errors()


def test_the_overview_a_batch_and_the_attention_view_follow_the_runs(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        FailsUntil.start(fail_until=9, subject=("Order", 1))
        work(engine_of(app))  # paused: needs attention
        fan = FansOut.start(n=4, subject=("Order", 2))
        work_some(engine_of(app), 1)  # the batch is open, its 4 children queued
    page, _ = live.page()
    page.goto("/pgbus/")
    ongoing = by_testid(page, "card-ongoing").locator(".card-number")
    expect(ongoing).to_have_text("2")
    with app.app_context():
        ThreeSteps.start(order_id=3, subject=("Order", 3))
    expect(ongoing).to_have_text("3", timeout=SOON)
    expect(page.locator('[data-testid="counts-row"][data-class="ThreeSteps"]')).to_have_count(1)

    batch = run_of(app, fan.workflow_id).batches()[0]
    page.goto(f"/pgbus/batches/{batch['id']}")
    progress = by_testid(page, "batch-progress")
    expect(progress).to_have_attribute("data-done", "0")
    drain(app)  # the children, then summarize (and ThreeSteps)
    expect(progress).to_have_attribute("data-done", "4", timeout=SOON)
    expect(progress).to_have_text("4 of 4 jobs done")
    expect(page.locator('[data-testid="batch-child"][data-status="done"]')).to_have_count(4)

    page.goto("/pgbus/attention")
    groups = by_testid(page, "attention-group")
    expect(groups).to_have_count(1)
    with app.app_context():
        PausesItself.start()
        work(engine_of(app))
    expect(groups).to_have_count(2, timeout=SOON)
    expect(page.locator('[data-testid="attention-group"][data-reason="paused_manual"]')).to_have_count(1)
    live.assert_no_errors()


def test_hostile_text_arriving_by_refresh_shows_literally_and_never_runs(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        run = BrowserHostile.start(XSS, msg=f"refused {XSS}", subject=(f"Order{IMG}", SCRIPT))
        work(engine_of(app))  # paused on the ValueError
    page, _ = live.page()
    page.goto(f"/pgbus/runs/{run.workflow_id}")
    attempts = by_testid(page, "attempt-row")
    expect(attempts).to_have_count(1)
    run_of(app, run.workflow_id).resume(actor="cli:bob", reason=f"retry {XSS}")
    drain(app)  # fails again: a second attempt, its error and the audit entries arrive by refresh
    expect(attempts).to_have_count(2, timeout=SOON)
    expect(by_testid(page, "attempt-error").last.locator(".error-text")).to_have_text(f"refused {XSS}")
    resumed = page.locator('[data-testid="audit-entry"][data-event="resumed"] .audit-sentence')
    expect(resumed).to_have_text(f"Resumed by cli:bob (hostile #1): retry {XSS}")
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("main img").count() == 0 and page.locator("main script").count() == 0
    live.assert_no_errors()


def test_a_language_chosen_in_another_tab_reloads_this_one_unless_text_is_typed(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect

    page, _ = live.page()
    page.goto("/pgbus/runs")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    by_testid(page, "filter-text").fill("Order 12")
    page.evaluate("document.activeElement.blur()")
    other = page.context.new_page()
    watch = Watch()
    watch.attach(other)
    live.watches.append(watch)
    other.goto("/pgbus/?locale=de")  # the cookie now says German
    expect(other.locator("html")).to_have_attribute("lang", "de")
    cycles(page, 2)  # German answers: nothing swapped into the English page, nothing typed lost
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(by_testid(page, "filter-text")).to_have_value("Order 12")
    by_testid(page, "filter-text").fill("")  # nothing typed now: the next answer reloads the page
    try:  # (a refresh in flight may reload it before the blur: the page then has no focus to leave)
        page.evaluate("document.activeElement.blur()")
    except PlaywrightError as error:
        if "Execution context was destroyed" not in str(error):
            raise
    expect(page.locator("html")).to_have_attribute("lang", "de", timeout=SOON)  # reloaded, in German
    expect(by_testid(page, "live-toggle")).to_be_checked()
    live.assert_no_errors()


# -- when it does not refresh ------------------------------------------------------------


def test_a_hidden_tab_fetches_nothing_until_it_is_shown_again(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    page, _ = live.page()
    page.goto("/pgbus/runs")
    cycles(page, 1)
    page.evaluate(HIDE)
    no_refresh(page)
    with app.app_context():
        run = ThreeSteps.start(order_id=1, subject=("Order", 1))
    expect(row(page, run)).to_have_count(0)
    with page.expect_request(is_live, timeout=SOON):
        page.evaluate(SHOW)
    expect(row(page, run)).to_have_count(1, timeout=SOON)
    live.assert_no_errors()


def test_the_header_toggle_turns_live_refresh_off_and_is_remembered(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    page, _ = live.page()
    page.goto("/pgbus/runs")
    toggle = by_testid(page, "live-toggle")
    expect(page.get_by_label("Live updates")).to_be_checked()
    for _ in range(10):  # reached from the top of the page with Tab, like every control
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.testid") == "live-toggle":
            break
    else:
        raise AssertionError("Tab never reaches the live toggle")
    page.keyboard.press("Space")
    expect(toggle).not_to_be_checked()
    assert page.evaluate("localStorage.getItem('pgbus-live')") == "off"
    page.evaluate("document.activeElement.blur()")
    no_refresh(page)

    page.goto("/pgbus/")
    page.goto("/pgbus/runs")  # another page, then this one: still off
    expect(toggle).not_to_be_checked()
    with app.app_context():
        run = ThreeSteps.start(order_id=1, subject=("Order", 1))
    no_refresh(page)
    expect(row(page, run)).to_have_count(0)
    toggle.focus()
    page.keyboard.press("Space")
    expect(toggle).to_be_checked()
    expect(row(page, run)).to_have_count(1, timeout=SOON)
    assert page.evaluate("localStorage.getItem('pgbus-live')") is None
    live.assert_no_errors()


def test_the_page_says_when_it_is_stale_and_clears_it_when_the_server_answers(
        app: Flask, server: Server, browser: Any) -> None:
    from playwright.sync_api import expect

    trouble: dict[str, str | None] = {"now": None}
    sign_in = "<!doctype html><html lang=en><body><form method=post><input name=user></form></body></html>"

    @app.before_request
    def in_front_of_the_dashboard() -> Any:  # what a proxy or the host app may answer instead
        if request.path != "/pgbus/runs":
            return None
        return {None: None, "503": ("Service Unavailable", 503), "sign-in": sign_in,
                "redirect": redirect("/pgbus/attention")}[trouble["now"]]

    with app.app_context():
        for n in range(60):
            ThreeSteps.start(order_id=n, subject=("Order", n))
    session = Browsing(browser, server.url)
    try:
        page, watch = session.page(viewport={"width": 1280, "height": 600})
        watch.allowed.extend(NETWORK_LOG)
        page.goto("/pgbus/runs")
        status = by_testid(page, "live-status")
        expect(status).to_have_attribute("role", "status")
        expect(status).to_have_text("")
        page.mouse.wheel(0, 1500)
        page.wait_for_function("window.scrollY === 1500")

        server.stop()
        expect(status).to_have_text(re.compile(r"^Not updated since \S+\s[AP]M: the server cannot be reached\.$"),
                                    timeout=SOON)
        expect(status.locator(".flash")).to_be_in_viewport()  # however far down the operator is
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            assert contrast(status.locator(".flash"))["ratio"] >= 4.5, scheme  # WCAG AA
        since = status.locator("time")
        shown = datetime.fromisoformat(since.get_attribute("datetime") or "")
        assert since.inner_text() == format_time(shown, "short", tzinfo=timezone.utc, locale="en")  # PGBUS_TIMEZONE
        assert (datetime.now(timezone.utc) - shown).total_seconds() < 60, "the time of the last answer"

        server.start()
        expect(status).to_have_text("", timeout=SOON)
        # An error page, a sign-in page in place of this one, a redirect (even to another live page).
        for answer in ("503", "sign-in", "redirect"):
            trouble["now"] = answer
            expect(status).to_have_text(re.compile(
                r"^Not updated since \S+\s[AP]M: the server answered with an error\. Reload the page to see it\.$"),
                timeout=SOON)
            later = datetime.fromisoformat(since.get_attribute("datetime") or "")
            assert later > shown, "since the last answer, not since the page was opened"
            trouble["now"] = None
            expect(status).to_have_text("", timeout=SOON)
        with app.app_context():
            run = ThreeSteps.start(order_id=100, subject=("Order", 100))
        expect(row(page, run)).to_have_count(1, timeout=SOON)
        expect(status).to_have_text("")
        assert page.evaluate("window.scrollY") == 1500
        session.assert_no_errors()
    finally:
        session.close()


# -- without it ----------------------------------------------------------------------------


def test_without_javascript_live_pages_render_and_actions_work(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        run = FailsUntil.start(fail_until=9, subject=("Order", 1))
        work(engine_of(app))
    page, watch = live.page(java_script_enabled=False)
    page.goto("/pgbus/")
    expect(by_testid(page, "card-paused").locator(".card-number")).to_have_text("1")
    expect(by_testid(page, "live-toggle")).to_be_hidden()  # a switch for a script that does not run
    page.goto(f"/pgbus/runs/{run.workflow_id}")
    expect(by_testid(page, "run-header").get_by_test_id("status-badge")).to_have_attribute("data-value",
                                                                                           "paused_error")
    expect(by_testid(page, "live-status")).to_have_text("")
    by_testid(page, "action-cancel-reason").fill("duplicate order")
    by_testid(page, "action-cancel-submit").click()
    by_testid(page, "confirm-submit").click()
    expect(by_testid(page, "notice")).to_have_text("Done: Cancel run.")
    expect(by_testid(page, "run-header").get_by_test_id("status-badge")).to_have_attribute("data-value",
                                                                                           "cancelled")
    assert run_of(app, run.workflow_id).status == "cancelled"
    assert watch.dialogs == []
    live.assert_no_errors()


@pytest.mark.settings(PGBUS_LIVE_REFRESH=0)
def test_live_refresh_off_loads_no_refresh_behaviour(app: Flask, live: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        fan = FansOut.start(n=2, subject=("Order", 1))
        work(engine_of(app))
    batch = run_of(app, fan.workflow_id).batches()[0]
    page, _ = live.page()
    scripts: list[str] = []
    page.on("request", lambda request: scripts.append(request.url) if request.resource_type == "script" else None)
    for url in ("/pgbus/", "/pgbus/runs", f"/pgbus/runs/{fan.workflow_id}", "/pgbus/attention",
                f"/pgbus/batches/{batch['id']}"):
        page.goto(url)
        expect(page.locator("body")).not_to_have_attribute("data-live-interval", re.compile(".*"))
        expect(by_testid(page, "live-toggle")).to_have_count(0)
        expect(by_testid(page, "live-status")).to_have_count(0)
    assert scripts and all(u.endswith("/pgbus/static/pgbus.js") for u in scripts), scripts
    no_refresh(page)
    live.assert_no_errors()
