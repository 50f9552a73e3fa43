"""axe-core on a dashboard page, for the accessibility tests (light and dark, left to right and right to left).

``axe_violations`` runs axe-core (bundled in the ``axe-playwright-python`` wheel: nothing is fetched) on a
Playwright page with the WCAG 2.x A and AA rules and axe's best practices; ``blocking`` keeps the serious and
critical findings, one line each; ``svg_text_contrast`` measures the contrast of SVG text, which axe leaves
undecided; ``open_confirm_page`` reaches the confirmation page the server shows when no script asked.
"""

from __future__ import annotations

from typing import Any

from tests.support.browser import by_testid

SCHEMES = ("light", "dark")
#: What fails the test; "moderate" and "minor" findings are best practices, not barriers.
BLOCKING = ("serious", "critical")
#: The WCAG 2.x A and AA rules and axe's best practices (region, landmarks, heading order).
AXE_OPTIONS = {"resultTypes": ["violations"],
               "runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa",
                                                     "best-practice"]}}


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's violations on ``page`` as it is now, with the findings it could not decide alone.

    axe files some checks as "incomplete" rather than violated (ids repeated across forms, text on
    an SVG): those count too, except the contrast of SVG text, which ``svg_text_contrast`` measures.
    """
    from axe_playwright_python.sync_playwright import Axe

    response = Axe().run(page, options=AXE_OPTIONS).response
    undecided = [v for v in response["incomplete"] if v["id"] != "color-contrast"]
    return [*response["violations"], *undecided]


def blocking(violations: list[dict[str, Any]], where: str) -> list[str]:
    """One line per serious or critical violation: rule, impact, help and the elements it found."""
    return [f"{where}: {v['id']} ({v['impact']}) {v['help']} -> "
            + "; ".join(" ".join(node["target"]) for node in v["nodes"])
            for v in violations if v["impact"] in BLOCKING]


# The fill of each SVG text (the timeline's labels and ticks, the insights chart's axes) against the
# first opaque background of the HTML around its drawing: WCAG AA for small text is 4.5:1.
# WCAG 2.x relative luminance of a computed "rgb(...)" colour; shared with the focus measurement of
# tests/browser/test_browser_a11y.py.
COLORS_JS = """
  const rgb = (c) => {
    const p = c.match(/[\\d.]+/g).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
  };
  const lum = (c) => { const ch = [c.r, c.g, c.b].map((v) => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
    return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2]; };
"""
SVG_TEXT_JS = """
() => {
  ${COLORS}
  const out = [];
  for (const text of document.querySelectorAll("svg text")) {
    if (!text.textContent.trim()) continue;
    let bg = null;
    for (let n = text.closest("svg").parentElement; n && !bg; n = n.parentElement) {
      const c = rgb(getComputedStyle(n).backgroundColor);
      if (c.a >= 1) bg = c;
    }
    const fg = rgb(getComputedStyle(text).fill);
    const [hi, lo] = [lum(fg), lum(bg || {r: 255, g: 255, b: 255})].sort((x, y) => y - x);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const name = `${text.getAttribute("class") || "text"} "${text.textContent.trim()}"`;
    if (ratio < 4.5) out.push(`${name}: ${ratio.toFixed(2)}:1`);
  }
  return out;
}
""".replace("${COLORS}", COLORS_JS.strip())


def svg_text_contrast(page: Any, where: str) -> list[str]:
    """SVG texts under WCAG AA contrast, which axe leaves undecided ("contains an image node")."""
    return [f"{where}: svg text contrast (serious) {text}" for text in page.evaluate(SVG_TEXT_JS)]


def open_confirm_page(page: Any, run_path: str) -> None:
    """The confirmation page the server shows when no script asked (``submit()`` skips pgbus.js)."""
    from playwright.sync_api import expect

    page.goto(run_path)
    by_testid(page, "action-cancel-reason").fill("duplicate order")
    with page.expect_navigation():
        by_testid(page, "action-cancel").evaluate("form => form.submit()")
    expect(by_testid(page, "confirm-form")).to_be_visible()
