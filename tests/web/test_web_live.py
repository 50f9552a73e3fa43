"""Live refresh, server side: which pages are live, and what a refresh request leaves alone.

The browser side (regions swapped in place, typed text kept, the stale notice)
is in test_browser_live.py.
"""

from __future__ import annotations

import re
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
from babel.dates import format_time
from flask import Flask
from flask.testing import FlaskClient

from pgbus_flask.web.live import HEADER
from tests.support import work
from tests.support.webtools import csrf, engine_of, text_of
from tests.workflows import FailsUntil, FansOut, ThreeSteps

LIVE = {HEADER: "1"}
#: The regions each live page marks, top to bottom.
REGIONS = {
    "overview": ["cards", "counts", "stuck", "schedules"],
    "runs": ["runs"],
    "run": ["header", "warnings", "actions", "signal", "timeline", "steps", "batches", "signals", "audit", "data"],
    "attention": ["groups"],
    "batch": ["batch", "children"],
}


def regions(page: str) -> list[str]:
    return re.findall(r'data-live="([a-z]+)"', page)


def live_pages(app: Flask) -> dict[str, str]:
    """One URL of each live page, with something on it."""
    with app.app_context():
        paused = FailsUntil.start(fail_until=9, subject=("Order", 1))
        fan = FansOut.start(n=2, subject=("Order", 2))
        work(engine_of(app))
    from pgbus_flask.handle import Run

    batch = Run(engine_of(app), fan.workflow_id).batches()[0]["id"]
    return {"overview": "/pgbus/", "runs": "/pgbus/runs?status=paused", "run": f"/pgbus/runs/{paused.workflow_id}",
            "attention": "/pgbus/attention", "batch": f"/pgbus/batches/{batch}"}


def test_the_five_pages_are_live_and_a_refresh_answers_the_same_regions(app: Flask) -> None:
    client = app.test_client()
    for name, url in live_pages(app).items():
        page = client.get(url).get_data(as_text=True)
        assert '<body data-live-interval="5000">' in page, name  # PGBUS_LIVE_REFRESH's default, in ms
        assert '/pgbus/static/live.js" defer></script>' in page, name
        assert 'data-testid="live-toggle"' in page and "Live updates" in page, name
        assert re.search(r'<div class="live-status" role="status"[^>]*></div>', page), name
        assert regions(page) == REGIONS[name], name
        refresh = client.get(url, headers=LIVE)
        assert refresh.status_code == 200
        assert regions(refresh.get_data(as_text=True)) == REGIONS[name], name
        assert HEADER in refresh.headers["Vary"] and refresh.headers["Cache-Control"] == "no-store"


@pytest.mark.settings(PGBUS_LIVE_REFRESH=0)
def test_off_no_page_is_live(app: Flask) -> None:
    client = app.test_client()
    for name, url in live_pages(app).items():
        page = client.get(url).get_data(as_text=True)
        assert "data-live-interval" not in page and "live.js" not in page, name
        assert "live-toggle" not in page and "data-live-message" not in page, name


def test_pages_that_answer_a_post_or_an_error_are_not_live(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    asked = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel", data={"csrf_token": token})
    assert asked.status_code == 200 and 'data-testid="confirm-form"' in asked.get_data(as_text=True)
    refused = client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume",
                          data={"csrf_token": token, "confirmed": "1"})
    assert refused.status_code == 409  # the run page, at the post's URL: nothing there to ask for again
    missing = client.get("/pgbus/runs/00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404
    for answer in (asked, refused, missing):
        page = answer.get_data(as_text=True)
        assert "data-live-interval" not in page and "live.js" not in page


def test_a_refresh_leaves_the_notice_of_a_post_for_the_page_after_it(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    url = f"/pgbus/runs/{run.workflow_id}"
    client = app.test_client()
    token = csrf(client, url)
    done = client.post(f"{url}/actions/cancel", data={"csrf_token": token, "confirmed": "1"})
    assert done.status_code == 303
    # Another tab of the same browser refreshes between the post and the page its redirect opens.
    assert "Done:" not in text_of(client.get(url, headers=LIVE).get_data(as_text=True))
    assert "Done: Cancel run." in text_of(client.get(url).get_data(as_text=True))
    assert "Done:" not in text_of(client.get(url).get_data(as_text=True)), "shown once"


def test_a_refresh_never_sets_the_language_cookie(app: Flask) -> None:
    client: FlaskClient = app.test_client()
    client.set_cookie("pgbus_locale", "ja", path="/pgbus")  # chosen in another tab since this one opened
    refresh = client.get("/pgbus/runs?locale=de", headers=LIVE)
    assert refresh.status_code == 200 and '<html lang="de" dir="ltr">' in refresh.get_data(as_text=True)
    assert not [c for c in refresh.headers.getlist("Set-Cookie") if c.startswith("pgbus_locale=")]
    assert client.get_cookie("pgbus_locale", path="/pgbus").value == "ja"  # type: ignore[union-attr]
    page = client.get("/pgbus/runs?locale=de")  # a page the operator opens does
    assert [c for c in page.headers.getlist("Set-Cookie") if c.startswith("pgbus_locale=de")]


@pytest.mark.settings(PGBUS_TIMEZONE="Asia/Tokyo", PGBUS_LIVE_REFRESH=90)
def test_the_stale_notices_say_when_the_page_was_read_in_the_dashboards_timezone(app: Flask) -> None:
    client = app.test_client()
    page = client.get("/pgbus/?locale=de").get_data(as_text=True)
    assert '<body data-live-interval="90000">' in page
    templates = dict(re.findall(r'<template data-live-message="(\w+)">(.*?)</template>', page))
    assert set(templates) == {"unreachable", "error"}
    found = re.search(r'<time datetime="([^"]+)">([^<]+)</time>', templates["unreachable"])
    assert found is not None
    moment, shown = found.groups()
    read = datetime.fromisoformat(moment)
    assert abs((datetime.now(read.tzinfo) - read).total_seconds()) < 60
    assert shown == format_time(read, "short", tzinfo=ZoneInfo("Asia/Tokyo"), locale="de")
    assert f'<time datetime="{moment}">{shown}</time>' in templates["error"]
    assert "90 Sekunden" in page  # the toggle's tooltip: how often, in the viewer's language
