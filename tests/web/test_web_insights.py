"""The insights page and its JSON: what ran, per step, in the viewer's language, counted the moment it
commits; what of the class needs attention; live refresh; bad windows are 400s."""

from __future__ import annotations

import html
import re

import pytest
from flask import Flask

from pgbus_flask import queries
from pgbus_flask.web.live import HEADER
from tests.support import work
from tests.support.seeds import seed_insights as seed
from tests.support.webtools import count_testid, engine_of, text_of
from tests.workflows import FailsUntil, ThreeSteps


def test_the_page_shows_what_ran(app: Flask) -> None:
    seed(app)
    client = app.test_client()
    overview = client.get("/pgbus/").get_data(as_text=True)
    assert 'href="/pgbus/classes/ThreeSteps/insights"' in overview
    page = client.get("/pgbus/classes/FailsUntil/insights?window=1h").get_data(as_text=True)
    text = text_of(page)
    assert "Insights · FailsUntil" in text and 'aria-current="page" data-testid="window-1h"' in page
    assert count_testid(page, "insight-step") == 2
    capture = re.search(r'data-testid="insight-step" data-step="capture".*?</tr>', page, re.S)
    assert capture
    row = text_of(capture.group(0))
    assert re.search(r"Paused 3 3 3 0 5", row), row  # now: 3 paused; reached 3, stopped 3, 0 ok, 5 failed
    assert 'data-testid="insight-error" data-step="capture" data-error="TimeoutError"' in page
    runs = "/pgbus/runs?workflow_class=FailsUntil&amp;step=capture&amp;reason=paused_error&amp;error_class=TimeoutError"
    assert runs in page
    assert 'data-testid="throughput-chart"' in page and "<script" not in page.split("</header>")[1]

    german = text_of(client.get("/pgbus/classes/ThreeSteps/insights?window=24h&locale=de").get_data(as_text=True))
    assert "Letzte 24 Stunden" in german and "Gestartete Läufe" in german


def test_the_json(app: Flask) -> None:
    seed(app)
    data = app.test_client().get("/pgbus/api/classes/ThreeSteps/insights?window=1h").get_json()
    assert (data["started"], data["finished"], data["cancelled"], data["failed"]) == (5, 4, 1, 0)
    assert [s["step"] for s in data["steps"]] == ["reserve", "charge", "ship"]
    first = data["steps"][0]
    for key in ("now_by_status", "reached", "p50_ms", "p95_ms", "max_ms", "queue_p50_ms", "failed_attempts"):
        assert key in first, key
    assert first["reached"] == 5 and isinstance(first["p50_ms"], float)
    assert sum(b["started"] for b in data["buckets"]) == 5 and data["bucket_seconds"] == 300


def test_a_bad_window_is_a_400_naming_it(app: Flask) -> None:
    client = app.test_client()
    page = client.get("/pgbus/classes/ThreeSteps/insights?window=2y")
    assert page.status_code == 400 and "Unknown window 2y: choose one of 1h, 24h, 7d, 30d." in text_of(
        page.get_data(as_text=True))
    api = client.get("/pgbus/api/classes/ThreeSteps/insights?window=<b>")
    assert api.status_code == 400 and "Unknown window" in api.get_json()["error"]


def test_a_class_nobody_ran_is_empty_not_an_error(app: Flask) -> None:
    page = app.test_client().get("/pgbus/classes/NoSuchClass/insights")
    assert page.status_code == 200 and "Nothing ran in this window." in text_of(page.get_data(as_text=True))


def cards(page: str) -> dict[str, str]:
    """The insights page's cards: ``{testid: the number shown}``."""
    return {name: text_of(body) for name, body in re.findall(
        r'data-testid="(insight-[a-z]+)"><span class="card-title">[^<]*</span><span class="card-number">([^<]*)<',
        page)}


def test_the_page_and_the_json_count_a_run_the_moment_it_commits(app: Flask) -> None:
    """No sweep between the runs and the reads: the page and the JSON count them already, and the page no
    longer says insights may trail the runs."""
    seed(app)
    client = app.test_client()
    with app.app_context():
        ThreeSteps.start(order_id=50)
        FailsUntil.start(fail_until=9)
        work(engine_of(app))
    page = client.get("/pgbus/classes/ThreeSteps/insights?window=1h").get_data(as_text=True)
    assert cards(page) == {"insight-started": "6", "insight-finished": "5", "insight-cancelled": "1",
                           "insight-failed": "0"}
    assert "sweep" not in text_of(page)
    data = client.get("/pgbus/api/classes/FailsUntil/insights?window=1h").get_json()
    assert (data["started"], data["failed"], data["steps"][0]["failed_attempts"]) == (4, 6, 6)
    assert data["steps"][0]["now_by_status"] == {"paused": 4}


def test_each_step_has_its_failure_rate_in_the_viewers_language(app: Flask) -> None:
    seed(app)
    with app.app_context():
        FailsUntil.start(fail_until=0)  # captures at once: 1 completed attempt beside the 5 failed
        work(engine_of(app))
    client = app.test_client()

    def rates(locale: str) -> dict[str, str]:
        page = client.get(f"/pgbus/classes/FailsUntil/insights?window=1h&locale={locale}").get_data(as_text=True)
        return dict(re.findall(r'data-testid="insight-step" data-step="([a-z]+)".*?'
                               r'data-testid="failure-rate">([^<]*)<', page, re.S))

    assert rates("en") == {"capture": "83.3%", "notify": "0%"}
    assert rates("de") == {"capture": "83,3\xa0%", "notify": "0\xa0%"}
    assert rates("ja") == {"capture": "83.3%", "notify": "0%"}
    steps = client.get("/pgbus/api/classes/FailsUntil/insights?window=1h").get_json()["steps"]
    assert [(s["step"], s["failure_rate"]) for s in steps] == [("capture", 0.8333), ("notify", 0.0)]
    nothing = client.get("/pgbus/classes/NoSuchClass/insights").get_data(as_text=True)
    assert 'data-testid="failure-rate"' not in nothing


def test_the_class_stuck_reasons_and_attention_groups_link_where_the_attention_page_does(app: Flask) -> None:
    seed(app)  # three FailsUntil runs paused on TimeoutError at capture
    with app.app_context():
        by_hand = FailsUntil.start(fail_until=0)
        by_hand.pause(actor="cli:bob", reason="hold it")
    client = app.test_client()
    page = client.get("/pgbus/classes/FailsUntil/insights").get_data(as_text=True)
    reasons = re.findall(r'data-testid="insight-reason" data-value="([a-z_]+)">(.*?)</a>', page, re.S)
    assert [(reason, text_of(body)) for reason, body in reasons] == [
        ("paused_error", "Paused on an error 3"), ("paused_manual", "Paused by hand 1")]
    assert ('href="/pgbus/runs?workflow_class=FailsUntil&amp;reason=paused_error" data-testid="insight-reason"'
            in page)
    groups = dict(re.findall(r'data-testid="insight-group" data-step="capture" data-reason="([a-z_]+)".*?'
                             r'<a href="([^"]+)" data-testid="group-runs-link">', page, re.S))
    attention = client.get("/pgbus/attention?workflow_class=FailsUntil").get_data(as_text=True)
    linked = dict(re.findall(r'data-testid="attention-group" data-class="FailsUntil" data-step="capture" '
                             r'data-reason="([a-z_]+)".*?<a href="([^"]+)" data-testid="group-runs-link">',
                             attention, re.S))
    assert groups == linked and set(groups) == {"paused_error", "paused_manual"}
    shown = re.findall(r'data-testid="group-runs-link">([^<]*)<', page)
    assert shown == ["Show the 3 runs", "Show the run"], "the biggest group first, said as the attention page says it"
    runs = client.get(html.unescape(groups["paused_error"])).get_data(as_text=True)
    assert count_testid(runs, "run-row") == 3
    assert 'href="/pgbus/attention?workflow_class=FailsUntil" data-testid="attention-link"' in page

    calm = client.get("/pgbus/classes/ThreeSteps/insights").get_data(as_text=True)
    assert "No run of this class needs attention." in text_of(calm) and "insight-group" not in calm


def test_the_page_is_live_and_a_refresh_shows_what_ran_since(app: Flask) -> None:
    seed(app)
    client = app.test_client()
    url = "/pgbus/classes/FailsUntil/insights?window=1h"
    page = client.get(url).get_data(as_text=True)
    assert '<body data-live-interval="5000">' in page and 'data-testid="live-toggle"' in page
    assert re.findall(r'data-live="([a-z]+)"', page) == ["cards", "throughput", "steps", "attention", "failures"]
    assert cards(page)["insight-started"] == "3"
    with app.app_context():
        FailsUntil.start(fail_until=9)
        work(engine_of(app))
    refresh = client.get(url, headers={HEADER: "1"})
    assert refresh.status_code == 200 and refresh.headers["Cache-Control"] == "no-store"
    fresh = refresh.get_data(as_text=True)
    assert re.findall(r'data-live="([a-z]+)"', fresh) == ["cards", "throughput", "steps", "attention", "failures"]
    assert cards(fresh)["insight-started"] == "4" and cards(fresh)["insight-failed"] == "6"
    group = re.search(r'data-testid="insight-group".*?data-testid="group-runs-link">([^<]*)<', fresh, re.S)
    assert group and group.group(1) == "Show the 4 runs"


def test_a_class_with_more_groups_than_a_page_shows_still_counts_every_reason(
        app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the groups a read lists (queries.GROUP_LIMIT), the reasons' counts are read apart: they still
    count every run of the class that needs attention."""
    seed(app)
    with app.app_context():
        FailsUntil.start(fail_until=0).pause(actor="cli:bob", reason="hold it")
    monkeypatch.setattr(queries, "GROUP_LIMIT", 1)
    page = app.test_client().get("/pgbus/classes/FailsUntil/insights").get_data(as_text=True)
    assert count_testid(page, "insight-group") == 1, "the biggest group only"
    reasons = re.findall(r'data-testid="insight-reason" data-value="([a-z_]+)">(.*?)</a>', page, re.S)
    assert [(reason, text_of(body)) for reason, body in reasons] == [
        ("paused_error", "Paused on an error 3"), ("paused_manual", "Paused by hand 1")]
