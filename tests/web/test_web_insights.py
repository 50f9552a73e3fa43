"""The insights page and its JSON: what ran, per step, in the viewer's language; bad windows are 400s."""

from __future__ import annotations

import re

from flask import Flask

from tests.support.seeds import seed_insights as seed
from tests.support.webtools import count_testid, text_of


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
