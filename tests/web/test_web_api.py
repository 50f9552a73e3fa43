"""The JSON reads under the dashboard prefix."""

from __future__ import annotations

import json

import pytest
from flask import Flask

from tests.support import work
from tests.support.webtools import engine_of, seed_every_state
from tests.workflows import FailsUntil, FansOut


def test_overview_and_runs(app: Flask) -> None:
    ids = seed_every_state(app)
    client = app.test_client()
    overview = client.get("/pgbus/api/overview").get_json()
    assert overview["paused"] == 3 and overview["attention"] >= 3
    runs = client.get("/pgbus/api/runs?status=paused").get_json()
    assert {r["workflow_id"] for r in runs["runs"]} == {ids["paused_error"], ids["stalled"], ids["paused_manual"]}
    stalled = next(r for r in runs["runs"] if r["workflow_id"] == ids["stalled"])
    assert stalled["presentation"]["badge"] == "stalled"
    assert stalled["presentation"]["sentence"].startswith("Paused for ")
    assert stalled["presentation"]["attention"] == "stalled"  # what the runs list marks
    ready = client.get("/pgbus/api/runs?status=ready").get_json()["runs"]
    assert {r["workflow_id"]: r["presentation"]["attention"] for r in ready} == {
        ids["queued"]: None, ids["overdue"]: "overdue", ids["scheduled"]: None}
    assert stalled["latest_step"]["error_class"] == "pgbus_flask.errors.StepStalled"
    assert runs["next_before"] is None


def test_one_run(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9, subject=("Order", 1))
        work(engine_of(app))
    data = app.test_client().get(f"/pgbus/api/runs/{run.workflow_id}?locale=de").get_json()
    assert data["run"]["status"] == "paused" and data["run"]["arguments"] == {"args": [], "kwargs": {"fail_until": 9}}
    assert data["available_actions"] == ["resume", "resume_at", "skip", "cancel", "signal"]
    assert data["resume_plan"] == {"action": "retry", "step": "capture"}
    # The engine's own events name no actor ("by system" said nothing an operator needs).
    assert data["events"][-1]["sentence"].startswith("Pausiert (capture #1)")
    assert data["steps"][0]["error_class"] == "TimeoutError"


def test_attention_and_batch(app: Flask) -> None:
    with app.app_context():
        FailsUntil.start(fail_until=9)
        FailsUntil.start(fail_until=9)
        fan = FansOut.start(n=2)
        work(engine_of(app))
    client = app.test_client()
    groups = client.get("/pgbus/api/attention").get_json()["groups"]
    assert groups[0]["count"] == 2
    assert groups[0]["confirm"]["resume"] == "Resume all 2 runs paused at capture on TimeoutError?"
    batches = client.get(f"/pgbus/api/runs/{fan.workflow_id}").get_json()["batches"]
    batch = client.get(f"/pgbus/api/batches/{batches[0]['id']}").get_json()
    assert batch["batch"]["done"] == 2 and [c["result"] for c in batch["children"]] == [
        "vendor 0 notified", "vendor 1 notified"]


@pytest.mark.parametrize(("url", "status"), [
    ("/pgbus/api/runs/not-a-uuid", 404), ("/pgbus/api/batches/12345", 404), ("/pgbus/api/runs?status=nope", 400),
])
def test_errors_are_json(app: Flask, url: str, status: int) -> None:
    response = app.test_client().get(url)
    assert response.status_code == status and response.get_json()["status"] == status


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: None)
def test_the_api_needs_the_same_auth(app: Flask) -> None:
    response = app.test_client().get("/pgbus/api/overview")
    assert response.status_code == 401 and "error" in response.get_json()


@pytest.mark.parametrize(("method", "url", "status"), [
    ("GET", "/pgbus/api/nope", 404), ("POST", "/pgbus/api", 405), ("GET", "/pgbus/api/nope/", 404),
    ("GET", "/pgbus/api/runs/x/y", 404), ("GET", "/pgbus/api/batches/abc", 400), ("GET", "/pgbus/api/batches/-1", 400),
    ("GET", "/pgbus/api/batches/0", 400), ("GET", "/pgbus/api/runs?before=%C2%B2", 400),
    ("GET", "/pgbus/api/runs?before=0", 400), ("GET", "/pgbus/api/runs?text=%00", 400),
    ("GET", "/pgbus/api/attention?workflow_class=%00", 400),
    ("POST", "/pgbus/api/overview", 405), ("DELETE", "/pgbus/api/runs", 405), ("POST", "/pgbus/api/nope", 405),
])
def test_every_api_error_is_json_of_the_same_shape(app: Flask, method: str, url: str, status: int) -> None:
    response = app.test_client().open(url, method=method)
    assert response.status_code == status and response.is_json, response.get_data(as_text=True)[:200]
    data = response.get_json()
    assert set(data) == {"error", "status"} and data["status"] == status and data["error"]
    assert "<" not in data["error"], "plain text, no HTML"


def test_a_bad_parameter_is_named_in_the_api_error(app: Flask) -> None:
    client = app.test_client()
    assert client.get("/pgbus/api/runs?before=%C2%B2").get_json()["error"] == (
        "before must be a whole number from 1 to 9223372036854775807, not ².")
    assert client.get("/pgbus/api/batches/abc").get_json()["error"].startswith("batch_id must be a whole number")
    assert "The value of step contains a control character" in client.get(
        "/pgbus/api/runs?step=%00").get_json()["error"]


def test_the_pages_outside_the_api_keep_html(app: Flask) -> None:
    response = app.test_client().post("/pgbus/runs")
    assert response.status_code == 405 and not response.is_json


def test_lone_surrogates_in_stored_json_go_out_as_escapes(app: Flask) -> None:
    from pgbus_flask.web import api, views

    with app.test_request_context():
        body = api.reply({"payload": "a\ud800b", "list": ["\udcff"]}).get_data()
    assert body == b'{"payload": "a\\ud800b", "list": ["\\udcff"]}'
    assert json.loads(body) == {"payload": "a\ud800b", "list": ["\udcff"]}, "the same value, losslessly"
    assert views.pretty({"k": "\ud800"}) == '{\n  "k": "\\ud800"\n}'
