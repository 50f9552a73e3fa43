"""Every shipped locale fits a phone and a desktop: no horizontal scroll, no JavaScript error.

One seed for the module: a run paused on an error with a long class and a long message (a German
and a Finnish compound, ``pgbus_flask.errors.ChildJobFailed``) at a step with a long name, a run the
sweep declared stalled and one whose signal wait ran out (engine messages said through the catalogs),
which with the first make three groups on the attention page. Each page is loaded in every locale in
one browser at 390 px and at 1280 px, and at 390 px again with the language menu open: long words and
identifiers must wrap, tables may scroll inside their ``.scroll`` wrapper but never the page, and no
element may stick out of the viewport on either side (the failure names each one).

With ``PGBUS_SCREENSHOTS=1`` the test also writes full-page 390 px screenshots of the run page and the
attention page of each locale to ``docs/screenshots/locales/`` (nothing is written otherwise); the seed
is kept small so that each PNG stays near 250 KB.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flask import Flask

from pgbus_flask import Workflow, step
from pgbus_flask.config import SHIPPED_LOCALES
from tests.support import ROOT, work
from tests.support.browser import DESKTOP, PHONE, Browsing, by_testid, overflow
from tests.support.seeds import stall_and_time_out
from tests.support.webtools import engine_of

pytestmark = pytest.mark.browser

SCREENSHOTS = Path(ROOT) / "docs" / "screenshots" / "locales"

#: Words with no break opportunity wider than a phone: a German and a Finnish compound, a code identifier.
GERMAN = "Zahlungsdienstleisterschnittstellenzeitüberschreitung"
FINNISH = "maksupalveluntarjoajarajapinnanaikakatkaisuvirhe"
IDENTIFIER = "pgbus_flask.errors.ChildJobFailed"
LONG_MESSAGE = f"{GERMAN}: {FINNISH} while calling {IDENTIFIER}"
#: A signed-in operator with a long name: the header's actor, next to the language menu.
LONG_ACTOR = pytest.mark.settings(
    PGBUS_DASHBOARD_AUTH=lambda request: "kirsi.lehtomaki-virtanen@maksuliikennepalvelut.example.fi")


class ZahlungsschnittstellenZeitueberschreitungsfehler(Exception):
    """An error class whose dotted name (module and class) is long."""


class InvoiceReconciliationWorkflow(Workflow):
    """Fails with a long error class and message at a step with a long name."""

    @step
    def reconcile_with_payment_provider_settlement_report(self) -> None:
        raise ZahlungsschnittstellenZeitueberschreitungsfehler(LONG_MESSAGE)


def seed(app: Flask) -> dict[str, str]:
    """The runs the pages show; ``{name: workflow_id}``."""
    with app.app_context():
        long_error = InvoiceReconciliationWorkflow.start(subject=("Order", 4711))
        work(engine_of(app))
        assert long_error.refresh().status == "paused"
    return {"long_error": str(long_error.workflow_id), **stall_and_time_out(app)}


@LONG_ACTOR
def test_every_locale_fits_a_phone_and_a_desktop(app: Flask, browsing: Browsing) -> None:
    from playwright.sync_api import expect

    ids = seed(app)
    pages = {"run": f"/pgbus/runs/{ids['long_error']}", "stalled": f"/pgbus/runs/{ids['swept_stalled']}",
             "attention": "/pgbus/attention"}
    shoot = os.environ.get("PGBUS_SCREENSHOTS") == "1"
    if shoot:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems: list[str] = []
    for viewport in (PHONE, DESKTOP):
        page, _ = browsing.page(viewport=viewport)
        for locale in SHIPPED_LOCALES:
            for name, url in pages.items():
                where = f"{locale} {name} page at {viewport['width']} px"
                page.goto(f"{url}?locale={locale}")
                expect(page.locator("html")).to_have_attribute("lang", locale.replace("_", "-"))
                if name == "attention":
                    expect(by_testid(page, "attention-group")).to_have_count(3)
                else:
                    expect(by_testid(page, "attempt-error").first).to_be_visible()
                problems += overflow(page, where)
                if viewport is not PHONE:
                    continue
                if shoot and name in ("run", "attention"):
                    page.screenshot(path=str(SCREENSHOTS / f"{locale}-{name}.png"), full_page=True, type="png")
                menu = by_testid(page, "locale-switch")
                by_testid(page, "locale-menu").click()
                expect(menu).to_have_attribute("open", "")
                expect(by_testid(page, f"locale-{locale}")).to_be_visible()
                problems += overflow(page, f"{where}, language menu open")
                by_testid(page, "locale-menu").click()
                expect(menu).not_to_have_attribute("open", "")
    assert not problems, "\n".join(problems)
    browsing.assert_no_errors()
