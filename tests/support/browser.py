"""Helpers for the browser tests: Debian's Chromium through Playwright, the app served on a free port.

Nothing is downloaded: Playwright drives ``/usr/bin/chromium``. Without it the
browser tests skip, unless ``PGBUS_REQUIRE_BROWSER=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from flask import Flask
from werkzeug.serving import make_server

from pgbus_flask import Workflow, step
from pgbus_flask.handle import Run
from tests.support import work
from tests.support.webtools import engine_of

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def require_chromium() -> None:
    """Skip (or, with ``PGBUS_REQUIRE_BROWSER=1``, fail) when Chromium or Playwright is missing."""
    problem = None
    if not os.access(CHROMIUM, os.X_OK):
        problem = f"{CHROMIUM} is missing (Debian's chromium package); the browser tests drive it through Playwright"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright Python package is not installed (pip install -e '.[test]')"
    if problem is None:
        return
    if os.environ.get("PGBUS_REQUIRE_BROWSER") == "1":
        pytest.fail(f"PGBUS_REQUIRE_BROWSER=1 but {problem}", pytrace=False)
    pytest.skip(problem)


@contextmanager
def serve(app: Flask) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port) in a thread; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="pgbus-browser-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


@dataclass
class Watch:
    """What one page reported: console errors, uncaught page errors, dialogs (accepted unless ``accept`` is off)."""

    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)
    accept: bool = True

    def attach(self, page: Any) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda exc: self.errors.append(f"page error at {page.url}: {exc}"))
        page.on("dialog", self._dialog)

    def _console(self, message: Any) -> None:
        if message.type != "error":
            return
        text = f"console error at {message.location.get('url', '?')}: {message.text}"
        if not any(fragment in message.text for fragment in self.allowed):
            self.errors.append(text)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        if self.accept:
            dialog.accept()
        else:
            dialog.dismiss()


# WCAG 2.x contrast of an element's text against the background it is drawn on
# (the first opaque background up the tree, with translucent ones blended over it).
CONTRAST_JS = """
(el) => {
  const parse = (c) => {
    const m = c.match(/^rgba?\\(([^)]+)\\)$/);
    if (!m) throw new Error("unexpected color " + c);
    const p = m[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
  };
  const over = (top, below) => ({
    r: top.r * top.a + below.r * (1 - top.a), g: top.g * top.a + below.g * (1 - top.a),
    b: top.b * top.a + below.b * (1 - top.a), a: 1});
  const layers = [];
  let base = {r: 255, g: 255, b: 255, a: 1};
  for (let n = el; n; n = n.parentElement) {
    const c = parse(getComputedStyle(n).backgroundColor);
    if (c.a >= 1) { base = c; break; }
    if (c.a > 0) layers.push(c);
  }
  let bg = base;
  for (let i = layers.length - 1; i >= 0; i--) bg = over(layers[i], bg);
  const fg = over(parse(getComputedStyle(el).color), bg);
  const lum = (c) => {
    const ch = [c.r, c.g, c.b].map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * ch[0] + 0.7152 * ch[1] + 0.0722 * ch[2];
  };
  const [hi, lo] = [lum(fg), lum(bg)].sort((x, y) => y - x);
  const rgb = (c) => `rgb(${Math.round(c.r)}, ${Math.round(c.g)}, ${Math.round(c.b)})`;
  return {ratio: (hi + 0.05) / (lo + 0.05), fg: rgb(fg), bg: rgb(bg)};
}
"""


def contrast(locator: Any) -> dict[str, Any]:
    """``{"ratio", "fg", "bg"}`` of the first element ``locator`` matches."""
    return locator.first.evaluate(CONTRAST_JS)  # type: ignore[no-any-return]


IMG = "<img src=x onerror=window.__xss=1>"


SCRIPT = "<script>window.__xss=1</script>"


XSS = f"{IMG}{SCRIPT}"


class BrowserHostile(Workflow):
    """Fails with the message it was started with."""

    @step
    def hostile(self) -> None:
        raise ValueError(self.kwargs["msg"])


class Browsing:
    """Pages on the served app; every page's console errors, page errors and dialogs are recorded."""

    def __init__(self, browser: Any, base_url: str) -> None:
        self.browser, self.base_url = browser, base_url
        self.contexts: list[Any] = []
        self.watches: list[Watch] = []

    def page(self, **context_options: Any) -> tuple[Any, Watch]:
        context = self.browser.new_context(base_url=self.base_url, **context_options)
        context.set_default_timeout(10_000)
        self.contexts.append(context)
        page = context.new_page()
        watch = Watch()
        watch.attach(page)
        self.watches.append(watch)
        return page, watch

    def assert_no_errors(self) -> None:
        errors = [e for w in self.watches for e in w.errors]
        assert errors == [], "\n".join(errors)

    def close(self) -> None:
        for context in self.contexts:
            context.close()


def run_of(app: Flask, workflow_id: Any) -> Run:
    return Run(engine_of(app), workflow_id)


def drain(app: Flask) -> None:
    with app.app_context():
        work(engine_of(app))


def by_testid(page: Any, name: str) -> Any:
    return page.get_by_test_id(name)


#: The viewports the layout tests load pages at: a phone and a desktop.
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}


# Elements (at most 8) drawn beyond the viewport's left or right edge, described for the failure
# message: only the outermost of a nest (its descendants stick out because it does), and nothing
# inside a box that clips or scrolls its overflow (that box is checked itself).
OVERFLOW_JS = """
() => {
  const width = window.innerWidth;
  const outside = (el) => {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) return false;
    return r.right > width + 0.5 || r.left < -0.5;
  };
  const clipped = (el) => {
    for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== "visible") return true;
    }
    return false;
  };
  const describe = (el) => {
    const r = el.getBoundingClientRect();
    const id = el.getAttribute("data-testid");
    const cls = el.getAttribute("class");
    const text = (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 60);
    return `<${el.tagName.toLowerCase()}${id ? ` data-testid="${id}"` : ""}${cls ? ` class="${cls}"` : ""}>`
      + ` left ${Math.round(r.left)} right ${Math.round(r.right)} (viewport ${width}): "${text}"`;
  };
  const culprits = [];
  for (const el of document.body.querySelectorAll("*")) {
    if (el.closest(".skip, .visually-hidden") || getComputedStyle(el).visibility === "hidden") continue;
    if (!outside(el) || clipped(el)) continue;
    if (el.parentElement && el.parentElement !== document.body && outside(el.parentElement)) continue;
    culprits.push(describe(el));
  }
  return {scrollWidth: document.documentElement.scrollWidth, innerWidth: width, culprits: culprits.slice(0, 8)};
}
"""


def overflow(page: Any, where: str) -> list[str]:
    """What sticks out of the viewport on ``page`` (empty when nothing does)."""
    found = page.evaluate(OVERFLOW_JS)
    problems = []
    if found["scrollWidth"] > found["innerWidth"]:
        problems.append(f"{where}: the page scrolls sideways (scrollWidth {found['scrollWidth']}"
                        f" > innerWidth {found['innerWidth']})")
    problems += [f"{where}: {culprit}" for culprit in found["culprits"]]
    return problems
