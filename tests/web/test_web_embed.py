"""A host app's own layout shows pgbus's stats card and nav link: counts from one query, words in
the viewer's language from pgbus's catalogs, the attention link only when runs need a person."""

from __future__ import annotations

from flask import Flask, render_template_string

from tests.support import work
from tests.support.webtools import count_testid, engine_of, text_of
from tests.workflows import FailsUntil, ThreeSteps

LAYOUT = """{% from "pgbus/embed.html" import pgbus_nav_link, pgbus_stats_card %}
<nav>{{ pgbus_nav_link() }}</nav><main>{{ pgbus_stats_card() }}</main>"""


def host(app: Flask) -> None:
    @app.get("/host")
    def page() -> str:
        return render_template_string(LAYOUT)


def test_the_card_and_the_link(app: Flask) -> None:
    host(app)
    client = app.test_client()
    quiet = client.get("/host").get_data(as_text=True)
    assert "0 ongoing runs" in text_of(quiet) and "paused: 0" in text_of(quiet)
    assert count_testid(quiet, "pgbus-stats-attention") == 0, "no attention link while nobody is needed"
    assert 'href="/pgbus/"' in quiet and "pgbus-nav-count" not in quiet
    with app.app_context():
        FailsUntil.start(fail_until=9)
        FailsUntil.start(fail_until=9)
        work(engine_of(app))  # both pause on their error: they need a person
        ThreeSteps.start(order_id=1)  # left queued: ongoing, not stuck
    page = client.get("/host").get_data(as_text=True)
    text = text_of(page)
    assert "3 ongoing runs" in text and "paused: 2" in text and "2 need attention" in text, text
    assert 'href="/pgbus/attention"' in page and '<span class="pgbus-nav-count"' in page


def test_in_the_viewers_language(app: Flask) -> None:
    host(app)
    page = app.test_client().get("/host", headers={"Accept-Language": "de"}).get_data(as_text=True)
    assert "0 aktive Läufe" in text_of(page) and "pausiert: 0" in text_of(page), text_of(page)
