"""Nothing cut off in a language 40% longer than English: every page in the pseudo-locale
(tests/support/pseudo.py) at 390 px and at 1280 px.

Each page must fit its width (no sideways scroll of the document), show each text whole (no element that
hides or clips its overflow, or ends it with an ellipsis, has content wider than itself; no button's label
sticks out of the button) and log no JavaScript error. The pages are those of tests/web/test_pseudo_locale.py
(tests/support/pseudo_pages.py); a form's confirmation page and the notice after an action are reached
with JavaScript off, as the server asks then. The failure names the page, the width and the element.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from pgbus_flask import engine as engine_module
from tests.support.browser import Browsing, by_testid, overflow, serve
from tests.support.pseudo import OPEN, extract, install, pseudo_catalog
from tests.support.pseudo_pages import app_with, page_urls, seed_pages
from tests.support.schedule_helpers import Declare

pytestmark = pytest.mark.browser

WIDTHS = ({"width": 390, "height": 844}, {"width": 1280, "height": 900})

#: What Chromium logs for a page that answers with an error status (the error pages are loaded on purpose).
ERROR_STATUS = "Failed to load resource: the server responded with a status of"

# Each element whose text does not fit, described for the failure message.
CUT_JS = """
() => {
  const width = window.innerWidth;
  const describe = (el, why) => {
    const id = el.closest("[data-testid]");
    const cls = el.getAttribute("class");
    const text = (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 70);
    return `<${el.tagName.toLowerCase()}${cls ? ` class="${cls}"` : ""}>`
      + (id && id !== el ? ` in [data-testid="${id.getAttribute("data-testid")}"]` : "")
      + `: ${why}: "${text}"`;
  };
  const clipping = (v) => v === "hidden" || v === "clip";
  // The box the visible text of a control is drawn in (its screen-reader-only words left out).
  const label = (el) => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    const range = document.createRange();
    let box = null;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (!node.textContent.trim() || node.parentElement.closest(".visually-hidden")) continue;
      range.selectNodeContents(node);
      for (const q of range.getClientRects()) {
        if (q.width === 0) continue;
        box = box ? {left: Math.min(box.left, q.left), right: Math.max(box.right, q.right),
                     top: Math.min(box.top, q.top), bottom: Math.max(box.bottom, q.bottom)}
                  : {left: q.left, right: q.right, top: q.top, bottom: q.bottom};
      }
    }
    return box;
  };
  const cut = [];
  for (const el of document.body.querySelectorAll("*")) {
    if (!(el instanceof HTMLElement)) continue;  // SVG draws its own text at set positions
    if (el.closest(".skip, .visually-hidden, template")) continue;  // hidden on purpose
    const cs = getComputedStyle(el);
    if (cs.display === "none" || cs.visibility === "hidden") continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;  // not drawn (a closed <details>' content)
    const ellipsis = cs.textOverflow === "ellipsis";
    if (clipping(cs.overflowX) || ellipsis) {
      if (el.scrollWidth > el.clientWidth + 1) {
        cut.push(describe(el, `${ellipsis ? "ellipsis" : "overflow " + cs.overflowX}, content ${el.scrollWidth} px`
                              + ` wide in ${el.clientWidth} px`));
      }
    }
    if (clipping(cs.overflowY) && el.scrollHeight > el.clientHeight + 1) {
      cut.push(describe(el, `overflow-y ${cs.overflowY}, content ${el.scrollHeight} px tall in ${el.clientHeight} px`));
    }
    if (el.matches("button, .btn, summary, .pgbus-badge, input[type=submit]")) {
      const t = label(el);
      if (t && (t.left < r.left - 1 || t.right > r.right + 1 || t.top < r.top - 1 || t.bottom > r.bottom + 1)) {
        cut.push(describe(el, `label ${Math.round(t.right - t.left)}x${Math.round(t.bottom - t.top)} px sticks out`
                              + ` of ${Math.round(r.width)}x${Math.round(r.height)} px`));
      }
    }
  }
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: width, cut};
}
"""


def cut_off(page: Any, where: str) -> list[str]:
    """What does not fit on ``page``: a sideways scroll, and each element whose text is cut."""
    found = page.evaluate(CUT_JS)
    problems = [f"{where}: {item}" for item in found["cut"]]
    if found["scrollWidth"] > found["innerWidth"]:
        problems.insert(0, f"{where}: the page scrolls sideways (scrollWidth {found['scrollWidth']} > innerWidth "
                           f"{found['innerWidth']})")
        problems[1:1] = overflow(page, where)[1:]  # and what sticks out, so a failure names its element
    return problems


@pytest.fixture
def pseudo_browsing(clean: None, pg_url: str, redis_url: str, browser: Any, tmp_path: Path,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Flask, Browsing]]:
    """The app in the pseudo-locale (as ``en``), served, and a browser on it."""
    folder = install(tmp_path / "pseudo", pseudo_catalog(extract(tmp_path_factory.mktemp("pot"))))
    app = app_with(folder, pg_url, redis_url)
    try:
        with serve(app) as base_url:
            session = Browsing(browser, base_url)
            try:
                yield app, session
            finally:
                session.close()
    finally:
        app.extensions["pgbus"].close()
        engine_module._default = None


def test_nothing_is_cut_off_in_a_longer_language(pseudo_browsing: tuple[Flask, Browsing], declare: Declare) -> None:
    from playwright.sync_api import expect

    app, browsing = pseudo_browsing
    ids = seed_pages(app, declare)
    urls = page_urls(app.test_client(), ids)
    problems: list[str] = []
    for viewport, paused in zip(WIDTHS, (ids["paused_error"], ids["stalled"]), strict=True):
        page, _ = browsing.page(viewport=viewport)
        failing, watch = browsing.page(viewport=viewport)
        watch.allowed.append(ERROR_STATUS)
        at = f"at {viewport['width']} px"
        for name, url in urls.items():
            tab = failing if name[:1].isdigit() else page  # "404 run", "400 unknown status"...
            tab.goto(url + ("&" if "?" in url else "?") + "locale=en")
            if name != "404 page":  # Werkzeug's own page (KNOWN_ENGLISH in tests/web/test_pseudo_locale.py)
                assert OPEN in tab.content(), f"{name} is in the pseudo-locale"
            problems += cut_off(tab, f"{name} {at}")
        # The language menu open, on the overview.
        page.goto("/pgbus/?locale=en")
        by_testid(page, "locale-menu").click()
        expect(by_testid(page, "locale-switch")).to_have_attribute("open", "")
        problems += cut_off(page, f"overview, language menu open {at}")

        # Without JavaScript the server asks first: the confirmation page, then the notice after the action.
        quiet, watch = browsing.page(viewport=viewport, java_script_enabled=False)
        watch.allowed.append(ERROR_STATUS)  # the refused signal answers 400
        for name, form, reason in (("cancel", "action-cancel", "run"), ("pause", "schedule-pause", "schedule")):
            url = f"/pgbus/runs/{paused}" if reason == "run" else "/pgbus/schedules/Nightly"
            quiet.goto(url + "?locale=en")
            by_testid(quiet, f"{form}-submit").first.click()
            expect(by_testid(quiet, "confirm-form")).to_be_visible()
            problems += cut_off(quiet, f"confirm {name} {at}")
            by_testid(quiet, "confirm-submit").click()
            expect(by_testid(quiet, "notice")).to_be_visible()
            problems += cut_off(quiet, f"after {name} {at}")
            if reason == "schedule":
                by_testid(quiet, "schedule-resume-submit").first.click()
                by_testid(quiet, "confirm-submit").click()
        quiet.goto(f"/pgbus/runs/{ids['waiting_signal']}?locale=en")
        by_testid(quiet, "signal-name").fill("payment_confirmed")
        by_testid(quiet, "signal-payload").fill("{nope")
        by_testid(quiet, "signal-submit").click()
        expect(by_testid(quiet, "error-message")).to_be_visible()
        problems += cut_off(quiet, f"signal refused {at}")
    assert not problems, f"{len(problems)} cut off:\n" + "\n".join(problems)
    browsing.assert_no_errors()


def test_the_check_finds_what_is_cut_off(pseudo_browsing: tuple[Flask, Browsing]) -> None:
    """The heading made to clip its text, a button narrower than its label, an ellipsis and a page wider
    than the window: each is named."""
    _, browsing = pseudo_browsing
    page, _ = browsing.page(viewport=WIDTHS[0])
    page.goto("/pgbus/limits?locale=en")
    assert cut_off(page, "limits") == []
    page.evaluate("""() => {
      document.querySelector("h1").style.cssText = "overflow: hidden; white-space: nowrap; width: 40px";
      const note = document.querySelector("p.muted");
      note.style.cssText = "text-overflow: ellipsis; overflow: hidden; white-space: nowrap";
      const button = document.createElement("button");
      button.textContent = "⟦Ŕéšûɱééöá⟧";
      button.style.cssText = "width: 20px; white-space: nowrap";
      document.querySelector("main").append(button);
      const wide = document.createElement("div");
      wide.style.cssText = "width: 600px; height: 10px";
      document.querySelector("main").append(wide);
    }""")
    found = cut_off(page, "limits")
    assert found[0].startswith("limits: the page scrolls sideways"), found
    assert any("<h1>" in f and "overflow hidden" in f for f in found), found
    assert any('<p class="muted small">' in f and "ellipsis" in f for f in found), found
    assert any("<button>" in f and "sticks out" in f for f in found), found
