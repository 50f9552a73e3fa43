"""The dashboard in a real browser: Playwright driving Debian's Chromium against the app on a free port.

Each test serves its ``app`` from a thread, runs step jobs with ``work()`` in
the test's own thread between clicks, waits with Playwright's expectations
(never sleeps) and ends by checking that no page logged a console error or
threw. Without /usr/bin/chromium the tests skip (fail with PGBUS_REQUIRE_BROWSER=1).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from tests.support import work
from tests.support.browser import IMG, SCRIPT, XSS, BrowserHostile, Browsing, by_testid, contrast, drain, run_of
from tests.support.webtools import engine_of
from tests.workflows import FailsUntil, FansOut, PausesItself, ThreeSteps, WaitsForPayment

pytestmark = pytest.mark.browser

ALICE = pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: "alice")


# -- helpers ------------------------------------------------------------------------------


def pick_locale(page: Any, locale: str) -> None:
    """Open the language menu and choose ``locale``, as an operator does."""
    page.get_by_test_id("locale-menu").click()
    page.get_by_test_id(f"locale-{locale}").click()


# -- 1. filter, open, resume ---------------------------------------------------------------


@ALICE
def test_filter_open_a_paused_run_and_resume_it(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        paused = FailsUntil.start(fail_until=1, subject=("Order", 1042))
        FailsUntil.start(fail_until=0, subject=("Order", 1043))  # finishes
        other = PausesItself.start()  # paused too, another class
        work(engine_of(app))
    page, watch = browsing.page()
    page.goto("/pgbus/runs")
    expect(by_testid(page, "actor")).to_have_text("dashboard:alice")
    expect(by_testid(page, "run-row")).to_have_count(3)

    by_testid(page, "filter-status").select_option("paused")
    by_testid(page, "filter-submit").click()
    expect(page).to_have_url(re.compile(r"/pgbus/runs\?.*status=paused"))
    rows = by_testid(page, "run-row")
    expect(rows).to_have_count(2)
    expect(rows.and_(page.locator(f'[data-workflow-id="{other.workflow_id}"]'))).to_have_count(1)

    by_testid(page, "filter-class").select_option("FailsUntil")
    by_testid(page, "filter-submit").click()
    expect(page).to_have_url(re.compile(r"workflow_class=FailsUntil"))
    expect(page).to_have_url(re.compile(r"status=paused"))
    expect(rows).to_have_count(1)
    expect(rows).to_have_attribute("data-workflow-id", str(paused.workflow_id))
    page.reload()
    expect(by_testid(page, "filter-status")).to_have_value("paused")
    expect(by_testid(page, "filter-class")).to_have_value("FailsUntil")
    expect(rows).to_have_count(1)

    rows.get_by_test_id("run-link").click()
    expect(page).to_have_url(re.compile(rf"/pgbus/runs/{paused.workflow_id}$"))
    expect(by_testid(page, "run-header")).to_have_attribute("data-workflow-id", str(paused.workflow_id))
    badge = by_testid(page, "run-header").get_by_test_id("status-badge")
    expect(badge).to_have_attribute("data-value", "paused_error")
    expect(by_testid(page, "subject")).to_have_text("Order 1042")

    question = by_testid(page, "action-resume").get_attribute("data-confirm")
    assert question == "Resume this FailsUntil run?"
    by_testid(page, "action-resume-reason").fill("gateway fixed")
    watch.accept = False
    by_testid(page, "action-resume-submit").click()
    assert watch.dialogs == [question], "the button asks first, with the form's question"
    expect(by_testid(page, "action-resume-reason")).to_have_value("gateway fixed")
    expect(by_testid(page, "notice")).to_have_count(0)
    assert run_of(app, paused.workflow_id).status == "paused", "saying no to the question changes nothing"
    watch.accept = True
    by_testid(page, "action-resume-submit").click()
    expect(by_testid(page, "notice")).to_have_text("Done: Resume.")
    assert watch.dialogs == [question, question]
    entry = page.locator('[data-testid="audit-entry"][data-event="resumed"]')
    expect(entry).to_have_count(1)
    expect(entry.locator(".audit-sentence")).to_have_text("Resumed by dashboard:alice (capture #1): gateway fixed")
    expect(badge).to_have_attribute("data-value", "queued")
    resumed = next(e for e in run_of(app, paused.workflow_id).events() if e["event"] == "resumed")
    assert (resumed["actor"], resumed["reason"]) == ("dashboard:alice", "gateway fixed")

    drain(app)
    page.reload()
    expect(badge).to_have_attribute("data-value", "finished")
    expect(by_testid(page, "run-status-badge")).to_have_attribute("data-value", "finished")
    assert run_of(app, paused.workflow_id).status == "finished"
    browsing.assert_no_errors()


# -- 2. bulk resume ------------------------------------------------------------------------


def test_bulk_resume_an_attention_group(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        runs = [FailsUntil.start(fail_until=9, subject=("Order", n)) for n in (1, 2, 3)]
        manual = PausesItself.start()
        work(engine_of(app))
    page, watch = browsing.page()
    page.goto("/pgbus/attention")
    groups = by_testid(page, "attention-group")
    expect(groups).to_have_count(2)
    group = page.locator('[data-testid="attention-group"][data-class="FailsUntil"][data-step="capture"]'
                         '[data-reason="paused_error"]')
    expect(group.get_by_test_id("group-count")).to_have_text("3")
    expect(group.get_by_test_id("group-message")).to_contain_text("gateway timed out on attempt 1")
    sentence = "Resume all 3 runs paused at capture on TimeoutError?"
    form = group.get_by_test_id("bulk-resume")
    expect(form.get_by_test_id("bulk-confirm-sentence")).to_have_text(sentence)

    form.get_by_test_id("bulk-resume-reason").fill("gateway fixed")
    form.get_by_test_id("bulk-resume-submit").click()
    expect(by_testid(page, "bulk-result")).to_have_text("Resume: 3 moved, 0 refused.")
    assert watch.dialogs == [sentence]
    expect(groups).to_have_count(1)
    expect(groups).to_have_attribute("data-class", "PausesItself")
    for run in runs:
        after = run_of(app, run.workflow_id)
        assert after.status == "ready", after.status
        resumed = [e for e in after.events() if e["event"] == "resumed"]
        assert [(e["actor"], e["reason"]) for e in resumed] == [("dashboard:anonymous", "gateway fixed")]
    assert run_of(app, manual.workflow_id).status == "paused", "the other group was left alone"
    browsing.assert_no_errors()


# -- 3. send a signal ----------------------------------------------------------------------


def test_send_a_signal_and_a_bad_payload(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        run = WaitsForPayment.start(subject=("Order", 7))
        work(engine_of(app))
    assert (run_of(app, run.workflow_id).status, run_of(app, run.workflow_id).current_step) == ("waiting", "confirm")
    page, watch = browsing.page()
    page.goto(f"/pgbus/runs/{run.workflow_id}")
    badge = by_testid(page, "run-header").get_by_test_id("status-badge")
    expect(badge).to_have_attribute("data-value", "waiting")
    expect(by_testid(page, "signals-table")).to_have_count(0)

    by_testid(page, "signal-name").fill("payment_confirmed")
    by_testid(page, "signal-payload").fill("{not json")
    by_testid(page, "signal-key").fill("pi_1")
    # Chromium reports the 400 answer itself as a console error: that one is expected here.
    watch.allowed.append("the server responded with a status of 400")
    with page.expect_response(lambda r: r.url.endswith("/signals") and r.request.method == "POST") as answer:
        by_testid(page, "signal-submit").click()
    assert answer.value.status == 400
    expect(by_testid(page, "error-message")).to_contain_text("The payload is not valid JSON")
    expect(by_testid(page, "signal-payload")).to_have_value("{not json")
    expect(by_testid(page, "signal-name")).to_have_value("payment_confirmed")
    expect(by_testid(page, "signal-key")).to_have_value("pi_1")
    assert run_of(app, run.workflow_id).signals() == []
    assert run_of(app, run.workflow_id).status == "waiting"
    watch.allowed.clear()

    by_testid(page, "signal-payload").fill('{"amount": 12.5}')
    by_testid(page, "signal-reason").fill("bank says paid")
    by_testid(page, "signal-submit").click()
    expect(by_testid(page, "notice")).to_have_text("The signal was sent.")
    rows = by_testid(page, "signal-row")
    expect(rows).to_have_count(1)
    expect(rows).to_contain_text("payment_confirmed")
    expect(rows).to_contain_text("pi_1")
    expect(rows).to_contain_text('"amount": 12.5')
    expect(rows).to_contain_text("dashboard:anonymous")
    expect(rows).to_have_attribute("data-status", re.compile("pending|claimed"))
    assert run_of(app, run.workflow_id).status in ("ready", "claimed")
    stored = run_of(app, run.workflow_id).signals()
    assert [(s["name"], s["payload"], s["idempotency_key"]) for s in stored] == [
        ("payment_confirmed", {"amount": 12.5}, "pi_1")]
    assert watch.dialogs == [], "sending a signal asks nothing"

    drain(app)
    page.reload()
    expect(badge).to_have_attribute("data-value", "finished")
    expect(rows).to_have_attribute("data-status", "consumed")
    expect(by_testid(page, "outputs")).to_contain_text("12.5")
    browsing.assert_no_errors()


# -- 4. languages --------------------------------------------------------------------------


def test_switch_to_german_and_japanese(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    page, _ = browsing.page()
    page.goto("/pgbus/runs?status=paused")
    html = page.locator("html")
    nav = by_testid(page, "nav")
    expect(html).to_have_attribute("lang", "en")
    expect(page.locator("h1")).to_have_text("Runs")

    pick_locale(page, "de")
    expect(html).to_have_attribute("lang", "de")
    expect(page).to_have_url(re.compile(r"status=paused"))
    expect(page.locator("h1")).to_have_text("Läufe")
    expect(page.locator("label[for=f-class]")).to_have_text("Workflow-Klasse")
    expect(by_testid(page, "filter-submit")).to_have_text("Filtern")
    expect(by_testid(page, "empty")).to_have_text("Keine Läufe passen zu diesen Filtern.")
    expect(by_testid(page, "locale-de")).to_have_attribute("aria-current", "true")
    nav.get_by_role("link", name="Handlungsbedarf").click()
    expect(page).to_have_url(re.compile(r"/pgbus/attention$"))
    expect(html).to_have_attribute("lang", "de")
    expect(page.locator("h1")).to_have_text("Handlungsbedarf")

    pick_locale(page, "ja")
    expect(html).to_have_attribute("lang", "ja")
    expect(page.locator("h1")).to_have_text("要対応")
    nav.get_by_role("link", name="実行一覧").click()
    expect(page).to_have_url(re.compile(r"/pgbus/runs$"))
    expect(html).to_have_attribute("lang", "ja")
    expect(page.locator("h1")).to_have_text("実行一覧")
    expect(by_testid(page, "filter-submit")).to_have_text("絞り込む")
    nav.get_by_role("link", name="概要").click()
    expect(html).to_have_attribute("lang", "ja")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    assert cookies.get("pgbus_locale") == "ja"

    pick_locale(page, "en")
    expect(html).to_have_attribute("lang", "en")
    page.goto("/pgbus/attention")
    expect(page.locator("h1")).to_have_text("Needs attention")
    browsing.assert_no_errors()


def test_switching_language_on_the_answer_to_a_post(app: Flask, browsing: Browsing) -> None:
    """A 409 or 400 answer is shown at the POST's URL: its language links must still lead to a page."""
    from playwright.sync_api import expect

    with app.app_context():
        waiting = WaitsForPayment.start()
        work(engine_of(app))
        late = ThreeSteps.start(order_id=2)
    page, watch = browsing.page()
    watch.allowed += ["status of 409", "status of 400"]  # Chromium logs the expected answers themselves
    html = page.locator("html")

    page.goto(f"/pgbus/runs/{late.workflow_id}")
    with app.app_context():
        run_of(app, late.workflow_id).cancel(actor="cli:bob", reason="meanwhile")
    by_testid(page, "action-cancel-submit").click()
    expect(by_testid(page, "error-message")).to_have_text(
        "Cancel run is not possible now: the run is Cancelled. Nothing was changed. Possible now: Rerun.")
    pick_locale(page, "de")
    expect(html).to_have_attribute("lang", "de")
    expect(by_testid(page, "error-page")).to_have_count(0)
    expect(by_testid(page, "run-header")).to_have_attribute("data-workflow-id", str(late.workflow_id))

    page.goto(f"/pgbus/runs/{waiting.workflow_id}?locale=en")
    by_testid(page, "signal-name").fill("payment_confirmed")
    by_testid(page, "signal-payload").fill("{not json")
    by_testid(page, "signal-submit").click()
    expect(by_testid(page, "error-message")).to_contain_text("The payload is not valid JSON")
    pick_locale(page, "ja")
    expect(html).to_have_attribute("lang", "ja")
    expect(by_testid(page, "error-page")).to_have_count(0)
    expect(by_testid(page, "run-header")).to_have_attribute("data-workflow-id", str(waiting.workflow_id))
    assert run_of(app, waiting.workflow_id).signals() == []
    browsing.assert_no_errors()


# -- 5. without JavaScript -----------------------------------------------------------------


def test_actions_and_filters_work_without_javascript(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        paused = [FailsUntil.start(fail_until=9, subject=("Order", n)) for n in (1, 2)]
        work(engine_of(app))
        queued = ThreeSteps.start(order_id=5, subject=("Order", 5))
    page, watch = browsing.page(java_script_enabled=False)
    page.goto("/pgbus/runs")
    expect(by_testid(page, "run-row")).to_have_count(3)
    by_testid(page, "filter-status").select_option("ready")
    by_testid(page, "filter-submit").click()
    expect(page).to_have_url(re.compile(r"status=ready"))
    expect(by_testid(page, "run-row")).to_have_count(1)
    expect(by_testid(page, "run-row")).to_have_attribute("data-workflow-id", str(queued.workflow_id))
    by_testid(page, "run-link").click()
    expect(by_testid(page, "timeline-bar").first).to_be_visible()  # drawn by the server
    expect(by_testid(page, "timeline-legend")).to_contain_text("Queued")

    by_testid(page, "action-cancel-reason").fill("duplicate order")
    by_testid(page, "action-cancel-submit").click()
    expect(by_testid(page, "confirm-sentence")).to_have_text(
        "Cancel this ThreeSteps run? Its open step is cancelled and nothing else runs.")
    expect(by_testid(page, "confirm-reason")).to_have_value("duplicate order")
    assert run_of(app, queued.workflow_id).status == "ready", "asking changes nothing"
    by_testid(page, "confirm-submit").click()
    expect(by_testid(page, "notice")).to_have_text("Done: Cancel run.")
    expect(by_testid(page, "run-header").get_by_test_id("status-badge")).to_have_attribute("data-value", "cancelled")
    cancelled = run_of(app, queued.workflow_id)
    assert cancelled.status == "cancelled"
    assert (cancelled.events()[-1]["actor"], cancelled.events()[-1]["reason"]) == (
        "dashboard:anonymous", "duplicate order")

    page.goto("/pgbus/attention")
    group = by_testid(page, "attention-group")
    group.get_by_test_id("bulk-resume-submit").click()
    expect(by_testid(page, "confirm-sentence")).to_have_text("Resume all 2 runs paused at capture on TimeoutError?")
    by_testid(page, "confirm-reason").fill("gateway fixed")
    by_testid(page, "confirm-submit").click()
    expect(by_testid(page, "bulk-result")).to_have_text("Resume: 2 moved, 0 refused.")
    assert {run_of(app, r.workflow_id).status for r in paused} == {"ready"}
    assert watch.dialogs == [], "nothing asked in a dialog without JavaScript"
    browsing.assert_no_errors()


# -- 6. light and dark ---------------------------------------------------------------------

# Text whose contrast must reach WCAG AA (4.5:1) on the run page and the attention page.
RUN_PAGE_TEXT = {
    "body text": "body",
    "next-step sentence": '[data-testid="run-header"] [data-testid="next-step"]',
    "run badge": '[data-testid="run-header"] [data-testid="status-badge"]',
    "status badge": '[data-testid="run-status-badge"]',
    "step badge": '[data-testid="step-badge"]',
    "muted label": ".facts dt",
    "link": ".crumbs a",
    "attempt error": '[data-testid="attempt-error"] .error-text',
    "audit error": ".audit .error-text",
    "primary button": '[data-testid="action-resume-submit"]',
    "attention marker": '[data-testid="run-header"] [data-testid="attention-badge"]',
    "danger button": '[data-testid="action-cancel-submit"]',
    "code": '[data-testid="steps-table"] .pgbus-code',
    "arguments": '[data-testid="arguments"]',
}
ATTENTION_PAGE_TEXT = {
    "heading": "h1",
    "reason badge": '[data-testid="reason-badge"]',
    "newest message": '[data-testid="group-message"]',
    "confirm sentence": '[data-testid="bulk-confirm-sentence"]',
    "runs link": '[data-testid="group-runs-link"]',
    "actor": '[data-testid="actor"]',
    "bulk result": '[data-testid="bulk-result"]',
}


def bulk_on_a_group_that_is_gone(page: Any) -> None:
    """Post a bulk cancel for a group with no runs (0 moved), as the page's own form would."""
    token = page.locator('meta[name="csrf-token"]').get_attribute("content")
    done = page.request.post("/pgbus/attention/bulk", max_redirects=0, form={
        "csrf_token": token, "confirmed": "1", "action": "cancel", "workflow_class": "NoSuchWorkflow",
        "step_name": "nothing", "stuck_reason": "paused_manual", "error_class": "", "reason": ""})
    assert done.status == 303, done.text()


def test_light_and_dark_mode_are_legible(app: Flask, browsing: Browsing, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        run = FailsUntil.start(fail_until=9, subject=("Order", 1))
        work(engine_of(app))
    page, _ = browsing.page(viewport={"width": 1280, "height": 900})
    low: list[str] = []
    backgrounds = {}
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        for url, checks, shot in ((f"/pgbus/runs/{run.workflow_id}", RUN_PAGE_TEXT, "run"),
                                  ("/pgbus/attention", ATTENTION_PAGE_TEXT, "attention")):
            if shot == "attention":
                bulk_on_a_group_that_is_gone(page)  # the result box comes from the server, not the URL
            page.goto(url)
            for name, selector in checks.items():
                target = page.locator(selector)
                expect(target.first).to_be_visible()
                found = contrast(target)
                if found["ratio"] < 4.5:
                    low.append(f"{scheme} {shot} page, {name} ({selector}): {found['ratio']:.2f}:1,"
                               f" {found['fg']} on {found['bg']}")
            backgrounds[(scheme, shot)] = contrast(page.locator("body"))["bg"]
            page.screenshot(path=str(tmp_path / f"{shot}-{scheme}.png"), full_page=True)
    assert backgrounds[("light", "run")] != backgrounds[("dark", "run")], "dark mode changes the colours"
    assert all((tmp_path / f"{s}-{m}.png").stat().st_size > 0 for s in ("run", "attention")
               for m in ("light", "dark"))
    assert low == [], "text below WCAG AA contrast:\n" + "\n".join(low)
    browsing.assert_no_errors()


# -- 7. escaping ---------------------------------------------------------------------------


def test_hostile_text_shows_literally_and_never_runs(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        run = BrowserHostile.start(XSS, note=XSS, msg=f"refused {XSS}", subject=(f"Order{IMG}", SCRIPT))
        work(engine_of(app))
    page, watch = browsing.page()
    page.goto(f"/pgbus/runs/{run.workflow_id}")
    by_testid(page, "action-resume-reason").fill(f"retry {XSS}")
    by_testid(page, "action-resume-submit").click()
    expect(by_testid(page, "notice")).to_have_text("Done: Resume.")
    assert watch.dialogs == ["Resume this BrowserHostile run?"]
    drain(app)  # fails again with the same message
    assert run_of(app, run.workflow_id).status == "paused"

    def untouched() -> None:
        assert page.evaluate("typeof window.__xss") == "undefined", page.url
        assert page.locator("main img").count() == 0 and page.locator("main script").count() == 0, page.url

    page.goto("/pgbus/runs")
    row = page.locator(f'[data-testid="run-row"][data-workflow-id="{run.workflow_id}"]')
    expect(row.get_by_test_id("subject")).to_have_text(f"Order{IMG} {SCRIPT}")
    expect(row.get_by_test_id("next-step")).to_contain_text("ValueError")
    untouched()

    page.goto(f"/pgbus/runs/{run.workflow_id}")
    expect(by_testid(page, "run-header").get_by_test_id("subject")).to_have_text(f"Order{IMG} {SCRIPT}")
    expect(by_testid(page, "attempt-error").first.locator(".error-text")).to_have_text(f"refused {XSS}")
    resumed = page.locator('[data-testid="audit-entry"][data-event="resumed"] .audit-sentence')
    expect(resumed).to_have_text(f"Resumed by dashboard:anonymous (hostile #1): retry {XSS}")
    expect(by_testid(page, "arguments")).to_contain_text(XSS)
    untouched()

    page.goto("/pgbus/attention")
    group = page.locator('[data-testid="attention-group"][data-class="BrowserHostile"]')
    expect(group.get_by_test_id("group-message")).to_have_text(f"refused {XSS}")
    untouched()
    browsing.assert_no_errors()


# -- 8. layout: a phone, rows of buttons, the confirmation page, number columns -----------------------------

PHONE = {"width": 390, "height": 844}


def child_job_failures(app: Flask, runs: int) -> None:
    """``runs`` fan-outs paused on pgbus_flask.errors.ChildJobFailed (one attention group), and three
    runs paused on TimeoutError."""
    with app.app_context():
        for _ in range(runs):
            FansOut.start(n=2, fail_at=0)
        for _ in range(3):
            FailsUntil.start(fail_until=9)
        work(engine_of(app))


def box(locator: Any) -> dict[str, float]:
    found = locator.bounding_box()
    assert found is not None
    return found  # type: ignore[no-any-return]


def test_the_attention_page_fits_a_phone(app: Flask, browsing: Browsing) -> None:
    """pgbus_flask.errors.ChildJobFailed is one long word: it wraps inside its group instead of
    widening the page to 466 px (and the no-JS confirmation of its bulk action wraps it too)."""
    from playwright.sync_api import expect

    child_job_failures(app, 2)
    page, _ = browsing.page(viewport=PHONE)
    page.goto("/pgbus/attention")
    group = page.locator('[data-testid="attention-group"][data-class="FansOut"]')
    expect(group.locator(".facts code").first).to_have_text("pgbus_flask.errors.ChildJobFailed")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    inner = page.evaluate("(el) => { const r = el.getBoundingClientRect(); return r.right; }", group.element_handle())
    for name in (".facts code", '[data-testid="bulk-confirm-sentence"]', "h2"):
        for item in group.locator(name).all():
            assert box(item)["x"] + box(item)["width"] <= inner + 0.5, name

    page, _ = browsing.page(viewport=PHONE, java_script_enabled=False)
    page.goto("/pgbus/attention")
    page.locator('[data-testid="attention-group"][data-class="FansOut"]').get_by_test_id("bulk-cancel-submit").click()
    question = by_testid(page, "confirm-sentence")
    expect(question).to_contain_text("pgbus_flask.errors.ChildJobFailed")
    form = box(by_testid(page, "confirm-form"))
    assert box(question)["x"] + box(question)["width"] <= form["x"] + form["width"] + 0.5
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    browsing.assert_no_errors()


def test_the_confirmation_buttons_stand_clear_of_the_reason_field(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    for viewport in (PHONE, {"width": 1280, "height": 900}):
        page, _ = browsing.page(viewport=viewport, java_script_enabled=False)
        page.goto(f"/pgbus/runs/{run.workflow_id}")
        by_testid(page, "action-cancel-submit").click()
        expect(by_testid(page, "confirm-sentence")).to_be_visible()
        reason, submit = box(by_testid(page, "confirm-reason")), box(by_testid(page, "confirm-submit"))
        gap = submit["y"] - (reason["y"] + reason["height"])
        assert gap >= 8, f"{viewport['width']} px: the button is {gap:.1f} px below the reason field"
    browsing.assert_no_errors()


# The width of each line of an element's text (line boxes by their top).
LINE_WIDTHS_JS = """(el) => {
  const range = document.createRange(); range.selectNodeContents(el);
  const widths = {};
  for (const r of range.getClientRects()) widths[Math.round(r.top)] = (widths[Math.round(r.top)] || 0) + r.width;
  return Object.values(widths);
}"""


def test_bulk_buttons_line_up_and_wrap_into_even_lines(app: Flask, browsing: Browsing) -> None:
    """At a width where the three bulk forms of a group share a row and long labels wrap: the buttons
    end on one line, and a wrapped label does not leave one word alone on its last line."""
    child_job_failures(app, 12)
    page, _ = browsing.page(viewport={"width": 800, "height": 900})
    page.goto("/pgbus/attention")
    wrapped = 0
    for group in by_testid(page, "attention-group").all():
        buttons = [group.get_by_test_id(f"bulk-{a}-submit") for a in ("resume", "skip", "cancel")]
        bottoms = [box(b)["y"] + box(b)["height"] for b in buttons]
        assert max(bottoms) - min(bottoms) <= 1, f"buttons end at {bottoms}"
        for button in buttons:
            lines = button.evaluate(LINE_WIDTHS_JS)
            if len(lines) > 1:
                wrapped += 1
                assert min(lines) >= 0.45 * max(lines), f"{button.inner_text()!r} wraps into lines of {lines} px"
    assert wrapped >= 2, "at 800 px some labels wrap (the test would prove nothing otherwise)"
    browsing.assert_no_errors()


def test_overview_numbers_line_up_with_their_headers(app: Flask, browsing: Browsing) -> None:
    child_job_failures(app, 1)
    page, _ = browsing.page(viewport={"width": 1280, "height": 900})
    page.goto("/pgbus/")
    for table in ("counts-table", "stuck-table"):
        headers = by_testid(page, table).locator("thead th")
        cells = by_testid(page, table).locator("tbody tr").first.locator("td")
        assert cells.count() == headers.count() - 1
        for i in range(cells.count()):
            header, cell = headers.nth(i + 1), cells.nth(i)
            right = [page.evaluate("""(el) => { const r = document.createRange(); r.selectNodeContents(el);
                                     const b = r.getBoundingClientRect(); return b.right; }""", e.element_handle())
                     for e in (header, cell)]
            assert abs(right[0] - right[1]) <= 2, (table, i + 1, right)
    browsing.assert_no_errors()


# -- 9. a fan-out stuck for days, from the overview to cancelled --------------------------------------------


@pytest.mark.settings(PGBUS_WAITING_THRESHOLD=3600)
def test_a_stuck_fan_out_from_the_overview_to_cancelled(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    from tests.support.webtools import sql, work_some

    with app.app_context():
        stuck = FansOut.start(n=3, subject=("Order", 7))
        work_some(engine_of(app), 1)  # the batch opens; its children never run
    sql(app, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '3 days' WHERE workflow_id = %s",
        stuck.workflow_id)
    page, watch = browsing.page()
    page.goto("/pgbus/")
    expect(by_testid(page, "card-attention").locator(".card-number")).to_have_text("1")
    marker = by_testid(page, "count-attention-waiting")
    expect(marker).to_have_text("⚠ 1 needs attention")
    marker.click()
    expect(page).to_have_url(re.compile(r"reason=waiting_overdue"))
    row = by_testid(page, "run-row")
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("status-badge")).to_have_text("Waiting")
    expect(row.get_by_test_id("attention-badge")).to_have_text("⚠ Waiting too long")
    expect(row.get_by_test_id("next-step")).to_have_text(
        "Waiting for batch FansOut#notify_vendors (0 of 3 jobs done).")
    row.get_by_test_id("run-link").click()

    expect(by_testid(page, "run-header").get_by_test_id("attention-badge")).to_be_visible()
    expect(by_testid(page, "signal-form")).to_have_count(0)  # no signal ends a wait on a batch
    expect(page.locator(".btn.primary")).to_have_count(0)  # nothing to push on with: no plan
    cancel = by_testid(page, "action-cancel-submit")
    expect(cancel).to_have_text("Cancel the run and its open step notify_vendors")
    by_testid(page, "action-cancel-reason").fill("vendors never answer")
    cancel.click()
    expect(by_testid(page, "notice")).to_have_text("Done: Cancel run.")
    assert watch.dialogs == ["Cancel this FansOut run? Its open step is cancelled and nothing else runs."]
    expect(by_testid(page, "run-header").get_by_test_id("attention-badge")).to_have_count(0)
    entries = page.locator('[data-testid="audit-entry"]')
    expect(entries.first).to_have_attribute("data-event", "started")  # oldest first
    expect(entries.last).to_have_attribute("data-event", "cancelled")
    page.goto("/pgbus/attention")
    expect(by_testid(page, "empty")).to_have_text("No run needs attention.")
    browsing.assert_no_errors()
