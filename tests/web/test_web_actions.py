"""Every action works from the dashboard's forms, records dashboard:NAME, and refuses what is not allowed now."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from flask import Flask

from pgbus_flask import payload as codec
from pgbus_flask.handle import Run
from tests.support import work
from tests.support.webtools import csrf, engine_of, form_fields, sql, text_of
from tests.workflows import FailsUntil, ThreeSteps, WaitsForPayment

ALICE = pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: "alice")


def refreshed(app: Flask, run: Run) -> Run:
    return Run(engine_of(app), run.workflow_id)


def last_event(run: Run) -> dict:
    return run.events()[-1]


@ALICE
def test_resume_with_a_reason_records_the_operator(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=1)
        work(engine_of(app))
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    response = client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume",
                           data={"csrf_token": token, "confirmed": "1", "reason": "gateway is back"})
    assert response.status_code == 303
    assert response.headers["Location"].endswith(f"/pgbus/runs/{run.workflow_id}")
    resumed = next(e for e in refreshed(app, run).events() if e["event"] == "resumed")
    assert (resumed["actor"], resumed["reason"]) == ("dashboard:alice", "gateway is back")
    page = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "Done: Resume." in text_of(page)
    assert "Resumed by dashboard:alice (capture #1): gateway is back" in text_of(page)
    assert 'data-testid="status-badge" data-value="queued"' in page
    with app.app_context():
        work(engine_of(app))
    assert refreshed(app, run).status == "finished"


@ALICE
def test_without_javascript_the_server_asks_to_confirm_first(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    asked = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel", data={"csrf_token": token,
                                                                              "reason": "duplicate order"})
    assert asked.status_code == 200
    page = asked.get_data(as_text=True)
    assert "Cancel this ThreeSteps run? Its open step is cancelled and nothing else runs." in text_of(page)
    assert refreshed(app, run).status == "ready", "asking changes nothing"
    form = re.search(r'<form method="post" action="([^"]+)" data-testid="confirm-form"[^>]*>(.*?)</form>', page, re.S)
    assert form
    fields = form_fields(form.group(2))
    assert fields["confirmed"] == "1" and fields["reason"] == "duplicate order"
    done = client.post(form.group(1), data=fields)
    assert done.status_code == 303
    assert refreshed(app, run).status == "cancelled"
    assert (last_event(refreshed(app, run))["actor"], last_event(refreshed(app, run))["reason"]) == (
        "dashboard:alice", "duplicate order")


@ALICE
def test_resume_at_a_chosen_step(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    response = client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume_at",
                           data={"csrf_token": token, "confirmed": "1", "step": "notify", "reason": "done by hand"})
    assert response.status_code == 303
    after = refreshed(app, run)
    assert (after.status, after.current_step) == ("ready", "notify")
    resumed = [e for e in after.events() if e["event"] == "resumed"][-1]
    assert resumed["actor"] == "dashboard:alice" and resumed["details"]["step"] == "notify"


@ALICE
def test_resume_at_a_step_the_class_lacks_changes_nothing(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    before = len(run.events())
    response = client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume_at",
                           data={"csrf_token": token, "confirmed": "1", "step": "nope"})
    assert response.status_code == 400
    assert "FailsUntil has no step 'nope'" in text_of(response.get_data(as_text=True))
    assert len(refreshed(app, run).events()) == before and refreshed(app, run).status == "paused"


@ALICE
def test_run_now_skip_and_rerun(app: Flask) -> None:
    with app.app_context():
        skipped = FailsUntil.start(fail_until=9)
        done = ThreeSteps.start(order_id=2, subject=("Order", 2))
        work(engine_of(app))
        later = ThreeSteps.start(order_id=3, subject=("Order", 3))
    sql(app, "UPDATE pgbus_workflow_steps SET scheduled_at = now() + interval '1 hour' WHERE workflow_id = %s",
        later.workflow_id)
    client = app.test_client()
    token = csrf(client)
    for run, action, event in ((later, "run_now", "run_now"), (skipped, "skip", "step_skipped"),
                               (done, "rerun", "rerun")):
        response = client.post(f"/pgbus/runs/{run.workflow_id}/actions/{action}",
                               data={"csrf_token": token, "confirmed": "1", "reason": f"{action} please"})
        assert response.status_code == 303, (action, text_of(response.get_data(as_text=True)))
        recorded = next(e for e in refreshed(app, run).events() if e["event"] == event)
        assert (recorded["actor"], recorded["reason"]) == ("dashboard:alice", f"{action} please"), action
    assert refreshed(app, skipped).current_step == "notify"
    assert refreshed(app, done).status == "ready"
    with app.app_context():
        work(engine_of(app))
    assert refreshed(app, later).status == "finished", "run now sent the step at once"


@ALICE
def test_a_verb_not_allowed_now_is_a_409_that_changes_nothing(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
        work(engine_of(app))
    before = refreshed(app, run).events()
    client = app.test_client()
    token = csrf(client)
    response = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel",
                           data={"csrf_token": token, "confirmed": "1", "reason": "too late"})
    assert response.status_code == 409
    text = text_of(response.get_data(as_text=True))
    assert "Cancel run is not possible now: the run is Finished. Nothing was changed. Possible now: Rerun." in text
    assert refreshed(app, run).events() == before and refreshed(app, run).status == "finished"


def test_an_action_without_a_button_is_a_404(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    client = app.test_client()
    token = csrf(client)
    response = client.post(f"/pgbus/runs/{run.workflow_id}/actions/pause", data={"csrf_token": token,
                                                                                "confirmed": "1"})
    assert response.status_code == 404 and refreshed(app, run).status == "ready"


def test_a_get_never_changes_anything(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}/actions/cancel?locale=de")
    assert page.status_code == 405 and "POST" in page.headers["Allow"]
    html = page.get_data(as_text=True)
    assert 'data-testid="error-page" data-code="405"' in html and 'lang="de"' in html
    assert refreshed(app, run).status == "ready"
    assert app.test_client().post("/elsewhere").status_code == 404  # the host app's own pages keep theirs


@ALICE
def test_send_a_signal_from_the_form(app: Flask) -> None:
    with app.app_context():
        run = WaitsForPayment.start()
        work(engine_of(app))
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    form = {"csrf_token": token, "name": "payment_confirmed", "payload": '{"amount": 12.5}',
            "idempotency_key": "pi_1", "reason": "bank says paid"}
    response = client.post(f"/pgbus/runs/{run.workflow_id}/signals", data=form)
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/runs/{run.workflow_id}")
    assert "The signal was sent." in text_of(client.get(response.headers["Location"]).get_data(as_text=True))
    again = client.post(f"/pgbus/runs/{run.workflow_id}/signals", data=form)
    page = client.get(again.headers["Location"]).get_data(as_text=True)
    assert "A signal with this idempotency key was already stored" in text_of(page)
    signals = refreshed(app, run).signals()
    assert len(signals) == 1 and signals[0]["payload"] == {"amount": 12.5}
    assert signals[0]["sent_by"] == "dashboard:alice"
    received = next(e for e in refreshed(app, run).events() if e["event"] == "signal_received")
    assert (received["actor"], received["reason"]) == ("dashboard:alice", "bank says paid")
    with app.app_context():
        work(engine_of(app))
    assert refreshed(app, run).status == "finished"


def test_a_bad_json_payload_is_a_400_and_stores_nothing(app: Flask) -> None:
    with app.app_context():
        run = WaitsForPayment.start()
    client = app.test_client()
    token = csrf(client)
    response = client.post(f"/pgbus/runs/{run.workflow_id}/signals",
                           data={"csrf_token": token, "name": "payment_confirmed", "payload": "{not json"})
    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert "The payload is not valid JSON" in text_of(page)
    assert "{not json</textarea>" in page, "the form keeps what was typed"
    assert refreshed(app, run).signals() == []


def test_a_signal_to_an_ended_run_is_refused(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
        run.cancel()
    client = app.test_client()
    token = csrf(client)
    response = client.post(f"/pgbus/runs/{run.workflow_id}/signals", data={"csrf_token": token, "name": "go"})
    assert response.status_code == 400
    assert "signals go only to ongoing runs" in text_of(response.get_data(as_text=True))
    assert refreshed(app, run).signals() == []


@ALICE
def test_bulk_resume_an_attention_group(app: Flask) -> None:
    with app.app_context():
        runs = [FailsUntil.start(fail_until=1) for _ in range(3)]
        work(engine_of(app))
    client = app.test_client()
    token = csrf(client, "/pgbus/attention")
    group = {"csrf_token": token, "action": "resume", "workflow_class": "FailsUntil", "step_name": "capture",
             "stuck_reason": "paused_error", "error_class": "TimeoutError", "reason": "gateway fixed"}
    asked = client.post("/pgbus/attention/bulk", data=group)
    assert asked.status_code == 200
    assert "Resume all 3 runs paused at capture on TimeoutError?" in text_of(asked.get_data(as_text=True))
    assert all(refreshed(app, r).status == "paused" for r in runs)
    done = client.post("/pgbus/attention/bulk", data={**group, "confirmed": "1"})
    assert done.status_code == 303
    page = client.get(done.headers["Location"]).get_data(as_text=True)
    assert "Resume: 3 moved, 0 refused." in text_of(page)
    for run in runs:
        resumed = next(e for e in refreshed(app, run).events() if e["event"] == "resumed")
        assert (resumed["actor"], resumed["reason"]) == ("dashboard:alice", "gateway fixed")
    with app.app_context():
        work(engine_of(app))
    assert all(refreshed(app, r).status == "finished" for r in runs)


@ALICE
def test_bulk_cancel_and_skip(app: Flask) -> None:
    with app.app_context():
        runs = [FailsUntil.start(fail_until=9) for _ in range(2)]
        work(engine_of(app))
    client = app.test_client()
    token = csrf(client, "/pgbus/attention")
    group = {"csrf_token": token, "workflow_class": "FailsUntil", "step_name": "capture",
             "stuck_reason": "paused_error", "error_class": "TimeoutError", "confirmed": "1"}
    assert client.post("/pgbus/attention/bulk", data={**group, "action": "skip"}).status_code == 303
    assert all(refreshed(app, r).current_step == "notify" for r in runs)
    # skipped runs are no longer stuck: a second bulk finds nothing and moves nothing
    again = client.post("/pgbus/attention/bulk", data={**group, "action": "cancel"})
    page = client.get(again.headers["Location"]).get_data(as_text=True)
    assert "Cancel run: 0 moved, 0 refused." in text_of(page)


def test_bulk_with_an_unknown_action_is_a_400(app: Flask) -> None:
    client = app.test_client()
    token = csrf(client)
    response = client.post("/pgbus/attention/bulk", data={"csrf_token": token, "action": "delete",
                                                          "stuck_reason": "stalled", "confirmed": "1"})
    assert response.status_code == 400


# -- hostile form values: a clear 400, nothing written ------------------------------------------------

def snapshot(run: Run, app: Flask) -> tuple[Any, ...]:
    after = refreshed(app, run)
    return after.status, after.current_step, after.signals(), len(after.events())


@pytest.mark.parametrize("field", ["name", "payload", "idempotency_key", "reason"])
def test_a_nul_in_a_signal_field_is_refused_naming_it(app: Flask, field: str) -> None:
    with app.app_context():
        run = WaitsForPayment.start()
        work(engine_of(app))
    before = snapshot(run, app)
    client = app.test_client()
    form = {"csrf_token": csrf(client), "name": "payment_confirmed", "payload": "{}", field: "a\x00b"}
    response = client.post(f"/pgbus/runs/{run.workflow_id}/signals", data=form)
    assert response.status_code == 400
    assert f"The value of {field} contains a control character" in text_of(response.get_data(as_text=True))
    assert snapshot(run, app) == before


def test_a_payload_nested_past_python_s_limit_is_a_400(app: Flask) -> None:
    with app.app_context():
        run = WaitsForPayment.start()
        work(engine_of(app))
    before = snapshot(run, app)
    client = app.test_client()
    response = client.post(f"/pgbus/runs/{run.workflow_id}/signals", data={
        "csrf_token": csrf(client), "name": "payment_confirmed", "payload": "[" * 100_000})
    assert response.status_code == 400
    assert "The payload is nested too deeply to be read." in text_of(response.get_data(as_text=True))
    assert snapshot(run, app) == before


@pytest.mark.parametrize("payload", ['{"a":"\\u0000"}', '"\\ud800"', '["\\udcff", {"k\\u0000": 1}]'])
def test_a_payload_postgresql_cannot_hold_as_is_is_stored_or_refused_never_a_500(app: Flask, payload: str) -> None:
    with app.app_context():
        run = WaitsForPayment.start()
        work(engine_of(app))
    before = snapshot(run, app)
    client = app.test_client()
    response = client.post(f"/pgbus/runs/{run.workflow_id}/signals", data={
        "csrf_token": csrf(client), "name": "unrelated", "payload": payload})
    assert response.status_code in (303, 400), response.get_data(as_text=True)[:500]
    if response.status_code == 400:
        assert snapshot(run, app) == before
        return
    stored = refreshed(app, run).signals()
    assert [codec.from_json(s["payload"]) for s in stored] == [json.loads(payload)], "kept exactly"
    page = client.get(f"/pgbus/runs/{run.workflow_id}")
    shown = page.get_data(as_text=True)
    assert page.status_code == 200 and ("\\u0000" in shown or "\\ud" in shown), "shown as JSON escapes"
    api = client.get(f"/pgbus/api/runs/{run.workflow_id}")
    assert api.status_code == 200 and api.get_json()["signals"][0]["payload"] == json.loads(payload)


@pytest.mark.parametrize("field", ["workflow_class", "step_name", "stuck_reason", "error_class", "reason", "action"])
@pytest.mark.parametrize("confirmed", ["", "1"])
def test_a_nul_in_a_bulk_field_is_refused_and_moves_nothing(app: Flask, field: str, confirmed: str) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    before = snapshot(run, app)
    client = app.test_client()
    group = {"csrf_token": csrf(client), "action": "cancel", "workflow_class": "FailsUntil", "step_name": "capture",
             "stuck_reason": "paused_error", "error_class": "TimeoutError", "confirmed": confirmed, field: "\x00"}
    response = client.post("/pgbus/attention/bulk", data=group)
    assert response.status_code == 400
    assert f"The value of {field} contains a control character" in text_of(response.get_data(as_text=True))
    assert snapshot(run, app) == before


@pytest.mark.parametrize(("field", "value", "says"), [
    ("reason", "a\x00b", "The value of reason contains a control character"),
    ("step", "\x00", "The value of step contains a control character"),
    ("reason", "x" * 5000, "Nothing was changed: reason"),
])
def test_a_bad_action_field_is_a_400_that_changes_nothing(app: Flask, field: str, value: str, says: str) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    before = snapshot(run, app)
    client = app.test_client()
    response = client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume_at", data={
        "csrf_token": csrf(client), "confirmed": "1", "step": "notify", field: value})
    assert response.status_code == 400
    assert says in text_of(response.get_data(as_text=True))
    assert snapshot(run, app) == before


def test_an_engine_refusal_is_a_400_on_the_run_page_keeping_the_form(app: Flask) -> None:
    with app.app_context():
        run = WaitsForPayment.start()
        work(engine_of(app))
    before = snapshot(run, app)
    client = app.test_client()
    form = {"csrf_token": csrf(client), "name": "n" * 300, "payload": '{"ok": 1}', "reason": "too long a name"}
    response = client.post(f"/pgbus/runs/{run.workflow_id}/signals", data=form)
    assert response.status_code == 400
    page = response.get_data(as_text=True)
    assert 'data-testid="error-message"' in page and "Nothing was changed:" in text_of(page)
    assert "too long a name" in page, "the form keeps what was typed"
    assert snapshot(run, app) == before


# -- what was done comes from the server, never from the URL ---------------------------------------------

def test_the_url_cannot_write_the_result_boxes(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    client = app.test_client()
    page = client.get("/pgbus/attention?done=resume&moved=5000&refused=0").get_data(as_text=True)
    assert 'data-testid="bulk-result"' not in page and "5000" not in text_of(page)
    page = client.get("/pgbus/attention?done=Payments+were+refunded&moved=5000").get_data(as_text=True)
    assert "Payments were refunded" not in page
    page = client.get(f"/pgbus/runs/{run.workflow_id}?notice=cancel").get_data(as_text=True)
    assert 'data-testid="notice"' not in page and "Done:" not in text_of(page)


@ALICE
def test_a_notice_shows_once_and_only_on_its_own_run(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        other = ThreeSteps.start(order_id=1)
        work(engine_of(app))
    client = app.test_client()
    done = client.post(f"/pgbus/runs/{run.workflow_id}/actions/skip",
                       data={"csrf_token": csrf(client), "confirmed": "1"})
    assert done.status_code == 303 and "?" not in done.headers["Location"]
    assert 'data-testid="notice"' not in client.get(f"/pgbus/runs/{other.workflow_id}").get_data(as_text=True)
    done = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel",
                       data={"csrf_token": csrf(client), "confirmed": "1"})
    assert "Done: Cancel run." in text_of(client.get(done.headers["Location"]).get_data(as_text=True))
    again = client.get(done.headers["Location"]).get_data(as_text=True)
    assert 'data-testid="notice"' not in again, "a reload does not say it again"
    assert 'data-testid="notice"' not in app.test_client().get(done.headers["Location"]).get_data(as_text=True), \
        "another browser never sees it"


def test_without_a_secret_key_the_action_works_and_shows_no_notice(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    app.secret_key = None
    app.config["SECRET_KEY"] = None
    client = app.test_client()
    done = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel",
                       data={"csrf_token": csrf(client), "confirmed": "1"})
    assert done.status_code == 303 and refreshed(app, run).status == "cancelled"
    assert 'data-testid="notice"' not in client.get(done.headers["Location"]).get_data(as_text=True)
