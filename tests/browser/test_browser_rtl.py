"""Arabic and Hebrew: every page is the mirror of its English self, from one stylesheet (issue 24).

The stylesheet speaks in logical properties (inset-inline, margin-inline, text-align: start/end), so
in ``<html dir="rtl">`` the page mirrors: the reading starts at the right, the primary action is the
rightmost, the language menu (at the inline end: the left) opens towards the page, the error under an
attempt is pinned to the wrapper's right edge while a phone scrolls the table. The charts keep time
running left to right (docs/decisions.md, "Charts in a right-to-left page"): their drawing is a
``dir="ltr"`` box, so axis labels sit on their side and step labels stay in their column.

These tests do not read the Arabic or Hebrew catalogs (they are being translated as this is written):
nothing here depends on a translated word but the languages' own names in the language menu. What they
look at is geometry (bounding boxes), ``dir``, and names that mix Arabic or Hebrew with Latin (a class
``Billing.חשבונית``, a step ``charge_فاتورة``): such a name keeps its own order, and the sentence
around it keeps its own. Each check fails if the stylesheet goes back to physical left and right:
the first test reads the stylesheet itself, the others see a menu opening off the screen, a document
that scrolls sideways (the skip link parked at ``left: -999px`` is on the side a right-to-left page
scrolls to), an error row pinned to the wrong edge.
"""

from __future__ import annotations

import itertools
import re
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from pgbus_flask import Workflow, step
from pgbus_flask.handle import Run
from tests.child_workflows import Shipment
from tests.support import work
from tests.support.axe import SCHEMES, axe_violations, blocking, open_confirm_page, svg_text_contrast
from tests.support.browser import DESKTOP, PHONE, Browsing, by_testid, overflow
from tests.support.schedule_helpers import Declare
from tests.support.seeds import in_line, seed_insights
from tests.support.webhooks import with_a_delivery
from tests.support.webtools import engine_of, seed_every_state

pytestmark = pytest.mark.browser

RTL = ("ar", "he")
CSS = Path(__file__).resolve().parents[2] / "templates" / "pgbus" / "static" / "pgbus.css"
#: A workflow name and a step name that mix Hebrew or Arabic with Latin, as an Israeli or Arab team names them.
CLASS = "Billing.חשבונית"
STEP = "charge_فاتورة"
LONG_STEP = "reconcile_with_payment_provider_settlement_report"
LRI, PDI = "\u2066", "\u2069"  # a name from code is isolated left to right


class BillingRtl(Workflow):
    """Ships two parcels as child runs, reconciles, then fails charging: paused on an error."""

    workflow_name = CLASS

    @step
    def ship_all(self) -> Any:
        return [self.start_child(Shipment, parcel=p) for p in (1, 2)]

    @step
    def reconcile_with_payment_provider_settlement_report(self) -> None:
        return None

    @step
    def charge_فاتورة(self) -> None:
        raise ValueError("the card issuer declined the charge: insufficient funds on the account")


def test_the_stylesheet_names_no_physical_side() -> None:
    """Left and right are said as inline start and end (so one stylesheet serves both directions)."""
    css = re.sub(r"/\*.*?\*/", "", CSS.read_text(), flags=re.S)
    physical = re.findall(r"(?<![\w-])(?:(?:margin|padding|border|inset)-(?:left|right)[\w-]*|left|right|float|clear)"
                          r"\s*:[^;}]*", css)
    physical += re.findall(r"text-align\s*:\s*(?:left|right)\b[^;}]*", css)
    physical += re.findall(r"translateX\([^)]*\)", css)
    assert physical == [], physical


def seed(app: Flask, page: Any) -> dict[str, str]:
    """Every page to look at, as ``{name: path}``: the run page of a paused run with steps, a timeline,
    signals and child runs (the mixed-direction class and step), and every other page with something on it."""
    engine = engine_of(app)
    seed_insights(app)
    ids = seed_every_state(app)
    with app.app_context():
        billing = BillingRtl.start(subject=("Order", 4711))
    work(engine)
    run = Run(engine, billing.workflow_id)
    assert run.refresh().status == "paused", run.refresh().status
    run.signal("note", {"from": "support", "text": "customer called"}, actor="cli:dana")
    run.signal("payment", {"paid": False}, actor="cli:dana")
    line = in_line(app)
    with_a_delivery(engine)
    page.goto(f"/pgbus/runs/{ids['waiting_batch']}")
    batch = by_testid(page, "batch-link").locator("a").get_attribute("href")
    assert batch
    return {
        "overview": "/pgbus/",
        "runs": "/pgbus/runs",
        "run": f"/pgbus/runs/{billing.workflow_id}",
        "run in line": f"/pgbus/runs/{line}",
        "attention": "/pgbus/attention",
        "limits": "/pgbus/limits",
        "notifications": "/pgbus/notifications",
        "insights": "/pgbus/classes/FailsUntil/insights?window=24h",
        "schedule": "/pgbus/schedules/NightlyReport",
        "batch": batch,
    }


def declare_schedules(app: Flask, declare: Declare) -> None:
    from pgbus_flask import PgBus

    declare("NightlyReport", "0 2 * * *", schedule_timezone="Europe/Berlin")
    declare("Heartbeat", timedelta(minutes=5))
    with app.app_context():
        PgBus().pause_schedule("NightlyReport", actor="cli:alice", reason="warehouse migration")


def goto(page: Any, path: str, locale: str) -> None:
    response = page.goto(path + ("&" if "?" in path else "?") + f"locale={locale}")
    assert response is not None and response.status == 200, (path, locale, response and response.status)


def rect(locator: Any) -> dict[str, float]:
    return locator.evaluate("el => { const r = el.getBoundingClientRect();"
                            " return {left: r.left, right: r.right, top: r.top, bottom: r.bottom,"
                            " width: r.width, height: r.height}; }")  # type: ignore[no-any-return]


# The rectangles of the document's focus as Tab moves it from the top of the page to the language menu.
FOCUS_WALK_JS = """
() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const r = el.getBoundingClientRect();
  return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, testid: el.getAttribute("data-testid"),
          what: el.outerHTML.slice(0, 80)};
}
"""


def top_bar_focus_order(page: Any) -> list[dict[str, Any]]:
    """What Tab focuses, in order, from the top of the page to the language menu's summary."""
    page.locator("body").focus()
    seen: list[dict[str, Any]] = []
    for _ in range(20):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUS_WALK_JS)
        if focused is None:
            continue
        seen.append(focused)
        if focused["testid"] == "locale-menu":
            return seen
    raise AssertionError(f"Tab never reached the language menu: {[f['what'] for f in seen]}")


def out_of_reading_order(seen: list[dict[str, Any]], rtl: bool) -> list[str]:
    """Each focused element must start at or past the previous one's start in the reading direction
    (further left in right-to-left), or on a later line."""
    wrong = []
    for before, after in itertools.pairwise(seen):
        later_line = after["top"] >= before["bottom"] - 1
        onwards = after["right"] <= before["right"] + 1 if rtl else after["left"] >= before["left"] - 1
        if not (later_line or onwards):
            wrong.append(f"{after['what']} ({after['left']:.0f}-{after['right']:.0f}, top {after['top']:.0f})"
                         f" after {before['what']} ({before['left']:.0f}-{before['right']:.0f},"
                         f" top {before['top']:.0f})")
    return wrong


def menu_problems(page: Any, where: str) -> list[str]:
    """Open the language menu: its list must open inside the viewport; closed again after."""
    from playwright.sync_api import expect

    problems = []
    by_testid(page, "locale-menu").click()
    expect(by_testid(page, "locale-switch")).to_have_attribute("open", "")
    box = rect(page.locator(".locales > ul"))
    width = page.evaluate("window.innerWidth")
    if box["left"] < -0.5 or box["right"] > width + 0.5:
        problems.append(f"{where}: the language menu opens outside the viewport ({box['left']:.0f}-"
                        f"{box['right']:.0f} of {width})")
    problems += overflow(page, f"{where}, language menu open")
    by_testid(page, "locale-menu").click()
    return problems


@pytest.mark.parametrize("locale", RTL)
def test_every_page_mirrors_on_a_phone_and_a_desktop(app: Flask, browsing: Browsing, declare: Declare,
                                                     locale: str) -> None:
    """``dir="rtl"``, nothing sideways, the language menu inside the viewport, the top bar's focus order
    from right to left, and the confirmation page's primary button on the right."""
    from playwright.sync_api import expect

    declare_schedules(app, declare)
    setup, _ = browsing.page()
    pages = seed(app, setup)
    problems: list[str] = []
    for viewport in (PHONE, DESKTOP):
        page, _ = browsing.page(viewport=viewport)
        for name, path in pages.items():
            where = f"{locale} {name} at {viewport['width']} px"
            goto(page, path, locale)
            html = page.locator("html")
            expect(html).to_have_attribute("dir", "rtl")
            expect(html).to_have_attribute("lang", locale)
            expect(page.locator("main h1")).to_be_visible()
            problems += overflow(page, where)
            problems += [f"{where}: focus out of reading order: {line}"
                         for line in out_of_reading_order(top_bar_focus_order(page), rtl=True)]
            problems += menu_problems(page, where)
        open_confirm_page(page, pages["run"] + f"?locale={locale}")
        expect(page.locator("html")).to_have_attribute("dir", "rtl")
        where = f"{locale} confirm page at {viewport['width']} px"
        problems += overflow(page, where)
        problems += menu_problems(page, where)
        submit, back = rect(by_testid(page, "confirm-submit")), rect(page.locator(".confirm-form .buttons a.btn"))
        if not submit["left"] >= back["right"] - 1:
            problems.append(f"{where}: the primary button is not right of 'go back' ({submit}, {back})")
    assert not problems, "\n".join(problems)
    browsing.assert_no_errors()


def test_the_reading_order_check_holds_in_english(app: Flask, browsing: Browsing) -> None:
    """The focus-order check above means something: in English it finds left to right, and it calls the
    English order wrong when asked for right to left."""
    page, _ = browsing.page(viewport=DESKTOP)
    goto(page, "/pgbus/", "en")
    expect_ltr = top_bar_focus_order(page)
    assert out_of_reading_order(expect_ltr, rtl=False) == []
    assert out_of_reading_order(expect_ltr, rtl=True) != []


def action_boxes(page: Any) -> tuple[dict[str, float], list[dict[str, float]]]:
    """The run page's primary action form and its other action forms."""
    forms = page.locator("[data-live=actions] form.action-form")
    boxes = [(f.locator("button").get_attribute("class") or "", rect(f)) for f in forms.all()]
    primary = [box for cls, box in boxes if "primary" in cls.split()]
    assert len(primary) == 1 and len(boxes) > 1, boxes
    return primary[0], [box for cls, box in boxes if "primary" not in cls.split()]


@pytest.mark.parametrize("locale", RTL)
def test_the_run_page_reads_from_the_right(app: Flask, browsing: Browsing, declare: Declare, locale: str) -> None:
    """The run page of a paused run: the primary action at the right (first on a phone), the error under
    the failed attempt pinned to the table's right edge however far a phone scrolls it, the timeline
    and legend, and the mixed-direction names in their own order."""
    from playwright.sync_api import expect

    declare_schedules(app, declare)
    setup, _ = browsing.page()
    pages = seed(app, setup)
    problems: list[str] = []
    for viewport in (PHONE, DESKTOP):
        page, _ = browsing.page(viewport=viewport)
        goto(page, pages["run"], locale)
        by_testid(page, "live-toggle").uncheck()  # nothing swapped while we measure
        expect(by_testid(page, "child-row")).to_have_count(2)
        expect(by_testid(page, "signal-row")).to_have_count(2)
        where = f"{locale} run page at {viewport['width']} px"

        primary, others = action_boxes(page)
        for other in others:
            same_row = abs(other["top"] - primary["top"]) < 2
            if same_row and not primary["left"] >= other["right"] - 1:
                problems.append(f"{where}: the primary action is not right of another on its row ({primary}, {other})")
            if not same_row and not other["top"] > primary["top"]:
                problems.append(f"{where}: an action comes before the primary one ({primary}, {other})")
            if abs(primary["right"] - max(o["right"] for o in [primary, *others])) > 1:
                problems.append(f"{where}: the primary action does not start at the right edge")

        problems += live_status_problems(page, where)
        problems += error_row_problems(page, where, phone=viewport is PHONE)
        problems += timeline_problems(page, where)
        problems += mixed_name_problems(page, where)
    assert not problems, "\n".join(problems)

    # English, for contrast: the same boxes the other way round.
    page, _ = browsing.page(viewport=DESKTOP)
    goto(page, pages["run"], "en")
    primary, others = action_boxes(page)
    assert all(primary["right"] <= o["left"] + 1 for o in others if abs(o["top"] - primary["top"]) < 2)
    browsing.assert_no_errors()


def live_status_problems(page: Any, where: str) -> list[str]:
    """"Not updated since ...", centred at the bottom of the viewport in either direction."""
    status = by_testid(page, "live-status")
    status.evaluate("el => { el.innerHTML = '<p class=\"flash warn\">' + '\u0644\u0645 '.repeat(12) + '</p>'; }")
    box, width = rect(status), page.evaluate("window.innerWidth")
    status.evaluate("el => { el.innerHTML = ''; }")
    if abs((box["left"] + box["right"]) / 2 - width / 2) > 1 or box["left"] < 0 or box["right"] > width:
        return [f"{where}: the live status is not centred ({box['left']:.0f}-{box['right']:.0f} of {width})"]
    return []


def error_row_problems(page: Any, where: str, phone: bool) -> list[str]:
    """The failed attempt's error class, pinned to the wrapper's right edge (8 px in) at either end of its scroll."""
    wrapper = page.locator(".scroll").filter(has=by_testid(page, "steps-table"))
    error = by_testid(page, "attempt-error").first.locator("td > code")
    assert error.get_attribute("dir") is None  # its inset would then be resolved left to right
    problems = []
    scroll = wrapper.evaluate("w => ({width: w.scrollWidth, client: w.clientWidth})")
    if phone and scroll["width"] <= scroll["client"]:
        return [f"{where}: the steps table does not scroll on a phone (nothing to check the error row against)"]
    for end in ("start", "end"):
        # A right-to-left scroller starts at 0 and scrolls to negative offsets.
        wrapper.evaluate("(w, end) => { w.scrollLeft = end === 'start' ? 0 : -(w.scrollWidth - w.clientWidth); }",
                         end)
        box, frame = rect(error), rect(wrapper)
        if phone and abs(box["right"] - (frame["right"] - 8)) > 2:
            problems.append(f"{where}: scrolled to its {end}, the error sits at {box['left']:.0f}-{box['right']:.0f},"
                            f" not at the wrapper's right edge ({frame['left']:.0f}-{frame['right']:.0f})")
        if not phone and box["right"] < frame["right"] - 40:
            problems.append(f"{where}: the error does not start at the right ({box}, {frame})")
    wrapper.evaluate("w => { w.scrollLeft = 0; }")
    return problems


def timeline_problems(page: Any, where: str) -> list[str]:
    """Time runs left to right; labels in their column, neither clipped by the drawing nor over a bar."""
    problems = []
    svg = by_testid(page, "timeline")
    if svg.evaluate("el => getComputedStyle(el).direction") != "ltr":
        problems.append(f"{where}: the timeline is not drawn left to right")
    box = rect(svg)
    scale = box["width"] / 760  # timeline.WIDTH: the viewBox's width
    plot_left = box["left"] + 170 * scale  # timeline.LABEL_W: where the bars begin
    for label in page.locator(".pgbus-timeline .tl-label").all():
        lb = rect(label)
        text = label.text_content()
        if lb["left"] < box["left"] - 0.5 or lb["right"] > plot_left:
            problems.append(f"{where}: the label {text!r} ({lb['left']:.0f}-{lb['right']:.0f}) is not within its"
                            f" column ({box['left']:.0f}-{plot_left:.0f})")
    ticks = [rect(t) for t in page.locator(".pgbus-timeline .tl-tick").all()]
    if ticks[0]["left"] < box["left"] - 0.5 or ticks[-1]["right"] > box["right"] + 0.5:
        problems.append(f"{where}: the time axis's end labels stick out of the drawing")
    if not ticks[0]["right"] < ticks[-1]["left"]:
        problems.append(f"{where}: the first time is not left of the last")
    legend = [rect(li) for li in by_testid(page, "timeline-legend").locator("li").all()]
    if not legend[0]["right"] >= legend[1]["right"] - 1:  # right of it, or starting the next line at the right
        problems.append(f"{where}: the legend does not read from the right")
    return problems


# Where a range of a text node's characters is drawn: the first and last matches of ``part`` in ``el``.
PART_JS = """
([el, part]) => {
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf(part);
    if (at < 0) continue;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + part.length);
    const r = range.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  }
  return null;
}
"""


def part(locator: Any, text: str) -> dict[str, float]:
    found = locator.evaluate(f"(el) => ({PART_JS})([el, {text!r}])")
    assert found is not None, (text, locator)
    return found  # type: ignore[no-any-return]


def reads_left_to_right(locator: Any, first: str, then: str) -> bool:
    return part(locator, first)["right"] <= part(locator, then)["left"] + 1


# The values of the attributes a reader is shown (tooltips, confirm dialogs, labels) that hold one of the names.
SHOWN_ATTRIBUTES_JS = """
(names) => {
  const out = [];
  for (const el of document.querySelectorAll("[title], [data-confirm], [aria-label], [placeholder], [alt]")) {
    for (const attr of ["title", "data-confirm", "aria-label", "placeholder", "alt"]) {
      const value = el.getAttribute(attr);
      if (value && names.some((name) => value.includes(name))) out.push(value);
    }
  }
  return out;
}
"""


def mixed_name_problems(page: Any, where: str) -> list[str]:
    """``Billing.חשבונית`` and ``charge_فاتورة`` keep their order (Latin first, at the left), and the
    sentences around them keep theirs; ``<title>`` and tooltips isolate them left to right with LRI ... PDI."""
    problems = []
    heading = page.locator("main h1 bdi").first
    if not reads_left_to_right(heading, "Billing.", "חשבונית"):
        problems.append(f"{where}: the class name in the heading is reordered")
    badge = page.locator("main h1 .pgbus-badge").first
    if not rect(badge)["right"] <= rect(heading)["left"] + 1:
        problems.append(f"{where}: the heading's badge is not after (left of) the class name")
    step_cell = page.locator("[data-testid=attempt-row][data-step='" + STEP + "'] code")
    if not reads_left_to_right(step_cell, "charge_", "فاتورة"):
        problems.append(f"{where}: the step name in the steps table is reordered")
    title = page.title()
    if not title.startswith(f"{LRI}{CLASS}{PDI}"):
        problems.append(f"{where}: the page title does not isolate the class name: {title!r}")
    tips = page.locator(".pgbus-timeline .tl-row > title").all_text_contents()
    if f"{LRI}{STEP}{PDI} #1" not in tips:
        problems.append(f"{where}: the timeline's tooltip does not isolate the step name: {tips!r}")
    label = page.locator(".pgbus-timeline .tl-label").filter(has_text="charge_")
    if not reads_left_to_right(label, "charge_", "فاتورة"):
        problems.append(f"{where}: the step name on the timeline is reordered")
    for value in page.evaluate(SHOWN_ATTRIBUTES_JS, [CLASS, STEP]):
        if not any(f"{LRI}{name}{PDI}" in value for name in (CLASS, STEP) if name in value):
            problems.append(f"{where}: an attribute shown to the reader does not isolate the name: {value!r}")
    shortened = [t for t in page.locator(".pgbus-timeline .tl-label").all_text_contents() if t.startswith("reconcile")]
    if not (len(shortened) == 1 and "…" in shortened[0] and LONG_STEP not in shortened[0]):
        problems.append(f"{where}: the long step name is not shortened on the timeline: {shortened!r}")
    return problems


@pytest.mark.parametrize("locale", RTL)
def test_attention_and_insights_read_from_the_right(app: Flask, browsing: Browsing, declare: Declare,
                                                    locale: str) -> None:
    """The attention group's heading reads class, step, reason from the right with each name in its own
    order, its primary bulk action is on the right; the insights chart's axis labels sit on their sides."""
    declare_schedules(app, declare)
    setup, _ = browsing.page()
    pages = seed(app, setup)
    problems: list[str] = []
    for viewport in (PHONE, DESKTOP):
        page, _ = browsing.page(viewport=viewport)
        where = f"{locale} attention at {viewport['width']} px"
        goto(page, pages["attention"], locale)
        group = page.locator(f"[data-testid=attention-group][data-class='{CLASS}']")
        name, code = group.locator("h2 bdi").first, group.locator("h2 code")
        if not reads_left_to_right(name, "Billing.", "חשבונית"):
            problems.append(f"{where}: the class name is reordered")
        if not reads_left_to_right(code, "charge_", "فاتورة"):
            problems.append(f"{where}: the step name is reordered")
        if not rect(code)["right"] <= rect(name)["left"] + 1 and rect(code)["top"] < rect(name)["bottom"] - 1:
            problems.append(f"{where}: the step is not after (left of) the class in the group's heading")
        forms = [rect(f) for f in group.locator("form.action-form").all()]
        if len(forms) > 1 and abs(forms[0]["top"] - forms[1]["top"]) < 2 and not forms[0]["left"] > forms[1]["left"]:
            problems.append(f"{where}: the group's first action is not on the right")

        where = f"{locale} insights at {viewport['width']} px"
        goto(page, pages["insights"], locale)
        chart = by_testid(page, "throughput-chart")
        box = rect(chart)
        scale = box["width"] / 720  # insights.chart's viewBox
        axis = box["left"] + 40 * scale  # where its plot begins: the counts end there
        texts = [(t.text_content(), rect(t)) for t in chart.locator("text.axis").all()]
        counts, times = texts[:2], texts[2:]
        for text, tb in counts:
            if tb["right"] > axis + 0.5 or tb["left"] < box["left"] - 0.5:
                problems.append(f"{where}: the count {text!r} is not left of the plot ({tb}, axis at {axis:.0f})")
        if not (times[0][1]["left"] >= axis - 0.5 and times[1][1]["right"] <= box["right"] + 0.5
                and times[0][1]["right"] < times[1][1]["left"]):
            problems.append(f"{where}: the times are not first at the left and last at the right: {times}")
        legend = [rect(li) for li in page.locator("ul.legend li").all()]
        if not legend[0]["right"] >= legend[1]["right"] - 1:
            problems.append(f"{where}: the chart's legend does not read from the right")
    assert not problems, "\n".join(problems)
    browsing.assert_no_errors()


def test_every_page_passes_axe_in_arabic_and_hebrew(app: Flask, browsing: Browsing, declare: Declare) -> None:
    """axe-core finds nothing serious or critical in ar and he, light and dark (as in English:
    tests/browser/test_browser_a11y.py), on every page and the confirmation page."""
    declare_schedules(app, declare)
    setup, _ = browsing.page()
    pages = seed(app, setup)
    found: list[str] = []
    for scheme in SCHEMES:
        page, _ = browsing.page(color_scheme=scheme)
        for locale in RTL:
            for name, path in pages.items():
                where = f"{name} ({locale}, {scheme})"
                goto(page, path, locale)
                found += blocking(axe_violations(page), where)
                found += svg_text_contrast(page, where)
            open_confirm_page(page, pages["run"] + f"?locale={locale}")
            found += blocking(axe_violations(page), f"confirm page ({locale}, {scheme})")
    assert found == [], f"{len(found)} serious or critical accessibility violations:\n" + "\n".join(found)
    browsing.assert_no_errors()


#: The languages issue 24 adds, by their own names.
OWN_NAMES = {"ar": ("العربية", "ar", "rtl"), "he": ("עברית", "he", "rtl"), "pl": ("polski", "pl", "ltr"),
             "zh_Hans": ("简体中文", "zh-Hans", "ltr")}


def test_the_language_menu_names_each_language_in_itself(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    page, _ = browsing.page(viewport=PHONE)
    for current in ("en", "ar"):
        goto(page, "/pgbus/", current)
        by_testid(page, "locale-menu").click()
        for locale, (name, tag, direction) in OWN_NAMES.items():
            link = by_testid(page, f"locale-{locale}")
            expect(link).to_be_visible()
            expect(link).to_have_text(name)
            expect(link).to_have_attribute("lang", tag)
            expect(link).to_have_attribute("hreflang", tag)
            expect(link).to_have_attribute("dir", direction)
    by_testid(page, "locale-he").click()
    expect(page.locator("html")).to_have_attribute("lang", "he")
    expect(page.locator("html")).to_have_attribute("dir", "rtl")
    expect(by_testid(page, "locale-menu")).to_contain_text("עברית")
    browsing.assert_no_errors()


def test_a_404_mirrors_too(app: Flask, browsing: Browsing) -> None:
    """An error page is the dashboard's too: ``dir="rtl"`` and nothing sideways."""
    from playwright.sync_api import expect

    page, watch = browsing.page(viewport=PHONE)
    watch.allowed.append("404 (NOT FOUND)")
    response = page.goto(f"/pgbus/runs/{uuid.uuid4()}?locale=he")
    assert response is not None and response.status == 404
    expect(page.locator("html")).to_have_attribute("dir", "rtl")
    assert overflow(page, "he 404 at 390 px") == []
    browsing.assert_no_errors()
