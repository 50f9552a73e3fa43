"""Accessibility of every dashboard page: axe-core's rules in light and dark, and the actions by keyboard.

axe-core (bundled in the ``axe-playwright-python`` wheel: nothing is fetched) checks each page in a
light and a dark Chromium (``color_scheme``): the overview, the runs list with filters, a run page in
each state that shows different parts (paused on an error with its action forms, waiting for a
signal with the signal form, finished, waiting on a batch, with more signals than a page and cut
payloads), the attention page with its groups, a
batch page, the confirmation page, a 404, the insights page and a schedule's page (the overview
lists two schedules, one paused). Any violation of impact "serious" or
"critical" fails the test, named with its rule, impact, help text and the elements' selectors.

The keyboard test tabs through the run page and the attention page as an operator without a mouse
does: every field and button of the action forms must be reached and show a visible focus
indicator, and the language menu and the live-updates switch must work with Enter and Space.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from flask import Flask

from pgbus_flask.handle import Run
from tests.support.axe import COLORS_JS, SCHEMES, axe_violations, blocking, open_confirm_page, svg_text_contrast
from tests.support.browser import Browsing, by_testid
from tests.support.schedule_helpers import Declare
from tests.support.seeds import seed_insights
from tests.support.webhooks import with_a_delivery
from tests.support.webtools import seed_every_state

pytestmark = pytest.mark.browser

def pages_to_check(app: Flask, page: Any) -> list[tuple[str, str]]:
    """(name, path) of every page to check, seeded with a run in every state and insights to show."""
    from tests.child_workflows import Fulfilment
    from tests.support import work

    seed_insights(app)
    ids = seed_every_state(app)
    with app.app_context():
        parent = Fulfilment.start(parcels=[1, 2], failing=[2])  # waits on a finished and a paused child
    work(app.extensions["pgbus"])
    child = next(c for c in parent.refresh().children() if c["status"] == "paused")
    line = in_line(app)
    with_a_delivery(app.extensions["pgbus"])
    # a run with more signals than a page shows, a payload cut with the rest in a disclosure and one
    # behind a link
    noisy = Run(app.extensions["pgbus"], ids["waiting_signal"])
    for i in range(30):
        noisy.signal("noise", {"i": i})
    noisy.signal("noise", {"note": "m" * 600})
    noisy.signal("noise", {"blob": uuid.uuid4().hex * 1_000})
    page.goto(f"/pgbus/runs/{ids['waiting_batch']}")
    batch = by_testid(page, "batch-link").locator("a").get_attribute("href")
    assert batch
    return [
        ("overview", "/pgbus/"),
        ("runs", "/pgbus/runs?workflow_class=FailsUntil&status=paused&reason=paused_error"),
        ("run paused on an error", f"/pgbus/runs/{ids['paused_error']}"),
        ("run waiting for a signal", f"/pgbus/runs/{ids['waiting_signal_deadline']}"),
        ("run with more signals than a page", f"/pgbus/runs/{ids['waiting_signal']}"),
        ("run finished", f"/pgbus/runs/{ids['finished']}"),
        ("run cancelled", f"/pgbus/runs/{ids['cancelled']}"),
        ("run waiting on a batch", f"/pgbus/runs/{ids['waiting_batch']}"),
        ("run waiting on child runs", f"/pgbus/runs/{parent.workflow_id}"),
        ("child run paused on an error", f"/pgbus/runs/{child['workflow_id']}"),
        ("attention", "/pgbus/attention"),
        ("batch", batch),
        ("404", f"/pgbus/runs/{uuid.uuid4()}"),
        ("insights", "/pgbus/classes/FailsUntil/insights"),
        ("insights of a class that ran", "/pgbus/classes/ThreeSteps/insights?window=24h"),
        ("limits", "/pgbus/limits"),
        ("notifications", "/pgbus/notifications"),
        ("run waiting in line for a slot", f"/pgbus/runs/{line}"),
    ]


def in_line(app: Flask) -> Any:
    """Two runs of a tenant holding TenantSync's two slots and a third in line (docs/flow-control.md);
    the id of the one in line."""
    from pgbus_flask import runner
    from tests.flow_workflows import TenantSync

    engine = app.extensions["pgbus"]
    runs = [TenantSync.start(tenant="acme", bus=engine) for _ in range(3)]
    for run in runs:
        runner.claim_attempt(engine, run.refresh().steps()[-1]["id"], None)
    assert runs[2].refresh().status == "waiting"
    return runs[2].workflow_id


def test_every_page_passes_axe_in_light_and_dark(app: Flask, browsing: Browsing, declare: Declare) -> None:
    from playwright.sync_api import expect

    from pgbus_flask import PgBus

    declare("NightlyReport", "0 2 * * *", schedule_timezone="Europe/Berlin")
    declare("Heartbeat", timedelta(minutes=5))  # the overview lists both, one paused: both forms show
    with app.app_context():
        PgBus().pause_schedule("NightlyReport", actor="cli:alice", reason="warehouse migration")
    setup, _ = browsing.page()
    pages = [*pages_to_check(app, setup), ("schedule", "/pgbus/schedules/NightlyReport")]
    paused_run = pages[2][1]
    found: list[str] = []
    for scheme in SCHEMES:
        page, watch = browsing.page(color_scheme=scheme)
        watch.allowed.append("404 (NOT FOUND)")  # the 404 page's own status
        for name, path in pages:
            response = page.goto(path)
            assert response is not None and response.status == (404 if name == "404" else 200), (name, path)
            expect(page.locator("main h1")).to_be_visible()
            found += blocking(axe_violations(page), f"{name} ({scheme}) {path}")
            found += svg_text_contrast(page, f"{name} ({scheme}) {path}")
        open_confirm_page(page, paused_run)
        found += blocking(axe_violations(page), f"confirm page ({scheme})")
        found += svg_text_contrast(page, f"confirm page ({scheme})")
    assert found == [], f"{len(found)} serious or critical accessibility violations:\n" + "\n".join(found)
    browsing.assert_no_errors()


def test_axe_reports_a_field_without_a_label(app: Flask, browsing: Browsing) -> None:
    """The check above can fail: a field nobody labelled is a critical violation with its selector."""
    page, _ = browsing.page()
    page.goto("/pgbus/")
    page.locator("main").evaluate("m => m.insertAdjacentHTML('beforeend', '<input id=\"unnamed\" type=\"text\">')")
    found = blocking(axe_violations(page), "overview")
    assert any(" label (critical) " in line and "#unnamed" in line for line in found), found


# What has the focus, and whether it shows: an outline or a box-shadow drawn by the page's styles.
FOCUSED_JS = """
() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const s = getComputedStyle(el);
  const outline = s.outlineStyle !== "none" && parseFloat(s.outlineWidth) > 0;
  ${COLORS}
  let bg = {r: 255, g: 255, b: 255};  // what the outline, drawn outside the element, is seen against
  for (let n = el.parentElement; n; n = n.parentElement) {
    const c = rgb(getComputedStyle(n).backgroundColor);
    if (c.a >= 1) { bg = c; break; }
  }
  const [hi, lo] = [lum(rgb(s.outlineColor)), lum(bg)].sort((x, y) => y - x);
  return {key: el.getAttribute("data-a11y-key"), testid: el.getAttribute("data-testid"),
          tag: el.tagName.toLowerCase(), visible: outline || s.boxShadow !== "none",
          outline_contrast: outline ? (hi + 0.05) / (lo + 0.05) : null,
          style: `outline: ${s.outlineStyle} ${s.outlineWidth} ${s.outlineColor}; box-shadow: ${s.boxShadow}`};
}
""".replace("${COLORS}", COLORS_JS.strip())
#: WCAG 1.4.11: a focus indicator is a part of the interface, 3:1 against the colours next to it.
FOCUS_CONTRAST = 3.0

#: Every control of the action forms (and the signal form) an operator must reach by keyboard.
CONTROLS = ("form.action-form, form[data-testid=signal-form]",
            "button, a[href], select, textarea, input:not([type=hidden])")


def mark_controls(page: Any) -> dict[str, str]:
    """Number every control of the page's action forms; ``{key: its data-testid}``."""
    forms, controls = CONTROLS
    marked = page.locator(forms).locator(controls).evaluate_all(
        "(els) => els.map((el, i) => { el.setAttribute('data-a11y-key', String(i));"
        " return [String(i), el.getAttribute('data-testid') || el.outerHTML.slice(0, 80)]; })")
    return dict(marked)


def tab_until(page: Any, wanted: str, limit: int = 40) -> dict[str, Any]:
    """Press Tab until the element with ``data-testid=wanted`` has the focus; what has it then."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED_JS)
        if focused and focused["testid"] == wanted:
            return focused  # type: ignore[no-any-return]
    raise AssertionError(f"{limit} presses of Tab never reached {wanted}")


def assert_focus_shows(focused: dict[str, Any], what: str) -> None:
    contrast = focused["outline_contrast"]
    assert focused["visible"] and (contrast is None or contrast >= FOCUS_CONTRAST), (
        f"{what} shows no focus ({focused['style']}, outline contrast {contrast or 0:.2f}:1)")


def tab_through(page: Any, wanted: dict[str, str], limit: int = 400) -> None:
    """Tab from the top of the page until every control in ``wanted`` was focused, each visibly."""
    reached: dict[str, bool] = {}
    hidden_focus: list[str] = []
    page.locator("body").focus()
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED_JS)
        if focused is None:
            continue
        faint = focused["outline_contrast"] is not None and focused["outline_contrast"] < FOCUS_CONTRAST
        if not focused["visible"] or faint:
            hidden_focus.append(f"{focused['testid'] or focused['tag']} ({focused['style']},"
                                f" outline contrast {focused['outline_contrast'] or 0:.2f}:1)")
        if focused["key"] is not None:
            reached[focused["key"]] = focused["visible"]
        if len(reached) == len(wanted):
            break
    missing = [wanted[k] for k in wanted if k not in reached]
    assert missing == [], f"Tab never reaches {missing}"
    assert hidden_focus == [], f"focus is not visible (or under {FOCUS_CONTRAST}:1) on {hidden_focus}"


def test_every_action_is_reached_by_keyboard_with_a_visible_focus(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    ids = seed_every_state(app)
    page, _ = browsing.page()

    page.goto(f"/pgbus/runs/{ids['paused_error']}")
    toggle = by_testid(page, "live-toggle")
    expect(toggle).to_be_checked()
    focused = tab_until(page, "live-toggle")
    assert_focus_shows(focused, "the live-updates switch")
    page.keyboard.press("Space")
    expect(toggle).not_to_be_checked()  # and the page no longer changes under the keyboard
    page.keyboard.press("Space")
    expect(toggle).to_be_checked()
    page.keyboard.press("Space")
    expect(toggle).not_to_be_checked()

    for scheme in SCHEMES:  # the focus colour is the theme's: measured in both
        page, _ = browsing.page(color_scheme=scheme)
        page.goto(f"/pgbus/runs/{ids['paused_error']}")
        by_testid(page, "live-toggle").uncheck()  # no region is swapped (with its marks) while we tab
        controls = mark_controls(page)
        assert {"action-resume-submit", "action-resume_at-step", "action-cancel-reason"} <= set(controls.values()), \
            controls
        tab_through(page, controls)

        # The signal form shows where a signal can matter: a run waiting for one.
        page.goto(f"/pgbus/runs/{ids['waiting_signal_deadline']}")
        by_testid(page, "live-toggle").uncheck()
        controls = mark_controls(page)
        assert {"signal-name", "signal-payload", "signal-submit"} <= set(controls.values()), controls
        tab_through(page, controls)

        page.goto("/pgbus/attention")
        expect(by_testid(page, "attention-group")).to_have_count(4)  # paused on an error, stalled, paused, timed out
        controls = mark_controls(page)
        assert sum(name.endswith("-submit") for name in controls.values()) >= 4, controls  # a button a group at least
        tab_through(page, controls)

    # The language menu: Enter opens it, Space closes it, and a language is chosen with Enter.
    menu = by_testid(page, "locale-switch")
    page.locator("body").focus()
    focused = tab_until(page, "locale-menu")
    assert_focus_shows(focused, "the language menu")
    page.keyboard.press("Enter")
    expect(menu).to_have_attribute("open", "")
    page.keyboard.press("Space")
    expect(menu).not_to_have_attribute("open", "")
    page.keyboard.press("Enter")
    expect(menu).to_have_attribute("open", "")
    focused = tab_until(page, "locale-de", limit=len(app.extensions["pgbus"].settings.locales) + 1)
    assert_focus_shows(focused, "the language menu's links")
    page.keyboard.press("Enter")
    expect(page.locator("html")).to_have_attribute("lang", "de")
    browsing.assert_no_errors()
