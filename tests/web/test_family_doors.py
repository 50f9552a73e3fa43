"""Child workflows and runs of an older definition through every door: the Python API, the CLI,
the dashboard and the JSON API (tests/db/test_mcp.py drives MCP)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from flask import Flask

from pgbus_flask import runner
from pgbus_flask.errors import ActionNotAllowed
from pgbus_flask.handle import Run
from tests.child_workflows import Fulfilment
from tests.support import work
from tests.support.doors import invoke
from tests.support.webtools import csrf, engine_of, sql, text_of
from tests.workflows import FailsUntil, ThreeSteps

ALICE = pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: "alice")


def waiting_parent(app: Flask) -> tuple[Run, list[Run]]:
    """A Fulfilment run waiting at ship_all on two children, one of them paused on an error."""
    engine = engine_of(app)
    with app.app_context():
        run = Fulfilment.start(parcels=[1, 2], failing=[2])
    work(engine)
    run.refresh()
    assert run.status == "waiting"
    return run, [Run(engine, c["workflow_id"]) for c in run.children()]


@ALICE
def test_the_dashboard_links_parent_and_children(app: Flask) -> None:
    run, kids = waiting_parent(app)
    client = app.test_client()
    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    text = text_of(page)
    assert "Waiting at ship_all for 2 child runs to end" in text
    assert page.count('data-testid="child-row"') == 2
    for kid in kids:
        assert f'href="/pgbus/runs/{kid.workflow_id}"' in page
    assert 'data-status="paused"' in page and "Child runs started" in text
    child_page = client.get(f"/pgbus/runs/{kids[1].workflow_id}").get_data(as_text=True)
    assert f'href="/pgbus/runs/{run.workflow_id}"' in child_page
    assert "started by its step ship_all" in text_of(child_page)
    listed = text_of(client.get("/pgbus/runs?status=waiting").get_data(as_text=True))
    assert "Waiting at ship_all for 2 child runs to end" in listed


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: "alice", PGBUS_WAITING_THRESHOLD=timedelta(hours=1))
def test_the_attention_view_shows_the_child_and_the_parent(app: Flask) -> None:
    run, kids = waiting_parent(app)
    # The parent has waited longer than the threshold (moved back instead of waiting).
    sql(app, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '2 hours'"
             " WHERE workflow_id = %s AND status = 'waiting'", run.workflow_id)
    page = app.test_client().get("/pgbus/attention").get_data(as_text=True)
    groups = set(re.findall(r'data-testid="attention-group" data-class="([^"]+)" data-step="([^"]+)"'
                            r' data-reason="([^"]+)"', page))
    assert groups == {("Shipment", "ship", "paused_error"), ("Fulfilment", "ship_all", "waiting_overdue")}
    assert sorted(k.status for k in kids) == ["finished", "paused"]


def test_the_json_api_and_the_cli_show_the_family(app: Flask) -> None:
    run, kids = waiting_parent(app)
    client = app.test_client()
    body = client.get(f"/pgbus/api/runs/{run.workflow_id}").get_json()
    assert [c["workflow_id"] for c in body["children"]] == [str(k.workflow_id) for k in kids]
    assert body["presentation"]["key"] == "waiting_children" and body["presentation"]["args"]["total"] == 2
    child = client.get(f"/pgbus/api/runs/{kids[0].workflow_id}").get_json()
    assert child["parent"] == {"workflow_id": str(run.workflow_id), "step": "ship_all"}
    code, out = invoke(app, "show", str(run.workflow_id))
    assert code == 0 and "child runs:" in out and str(kids[1].workflow_id) in out and "paused at ship" in out
    code, out = invoke(app, "show", str(kids[0].workflow_id))
    assert code == 0 and f"parent: {run.workflow_id} (step ship_all)" in out


def outdated(app: Flask, run: Run) -> None:
    sql(app, "UPDATE pgbus_workflows SET definition_digest = 'older' WHERE workflow_id = %s", run.workflow_id)


def test_upgrade_from_the_python_api(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    with pytest.raises(ActionNotAllowed, match="already runs on the current definition"):
        run.upgrade(reason="nothing to do")
    outdated(app, run)
    run.refresh()
    assert run.definition_outdated and "upgrade" in run.available_actions
    run.upgrade(actor="ops", reason="new options are fine")
    assert not run.definition_outdated and "upgrade" not in run.available_actions
    event = run.events()[-1]
    assert (event["event"], event["actor"], event["reason"]) == ("definition_upgraded", "ops", "new options are fine")
    assert event["details"]["from"] == "older" and event["details"]["to"] == ThreeSteps.definition_digest
    work(engine_of(app))
    assert run.refresh().status == "finished"


def test_a_run_whose_step_no_longer_exists(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=1)
    work(engine_of(app))
    assert run.refresh().status == "paused"
    outdated(app, run)
    sql(app, "UPDATE pgbus_workflow_steps SET step_name = 'legacy_capture' WHERE workflow_id = %s", run.workflow_id)
    sql(app, "UPDATE pgbus_workflows SET current_step = 'legacy_capture' WHERE workflow_id = %s", run.workflow_id)
    run.refresh()
    assert run.resume_plan() == runner.ResumePlan("step_gone", "legacy_capture")
    assert "resume" not in run.available_actions and "upgrade" not in run.available_actions
    assert {"resume_at", "cancel"} <= set(run.available_actions)
    with pytest.raises(ActionNotAllowed, match="its step legacy_capture no longer exists in FailsUntil; resume it at"):
        run.resume(reason="try")
    with pytest.raises(ActionNotAllowed, match="no longer exists"):
        run.upgrade(reason="try")
    code, out = invoke(app, "upgrade", str(run.workflow_id), "--reason", "try")
    assert code != 0 and "legacy_capture no longer exists" in out
    run.resume_at("capture", actor="ops", reason="the step was renamed")
    assert not run.definition_outdated
    assert [e["event"] for e in run.events()][-3:] == ["definition_upgraded", "resumed", "step_scheduled"]


def test_upgrade_from_the_cli(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=2)
    outdated(app, run)
    code, out = invoke(app, "show", str(run.workflow_id))
    assert "older definition" in out and "upgrade" in out
    code, out = invoke(app, "upgrade", str(run.workflow_id), "--reason", "reviewed the change")
    assert code == 0, out
    event = Run(engine_of(app), run.workflow_id).events()[-1]
    assert event["event"] == "definition_upgraded" and event["actor"].startswith("cli:")


@ALICE
def test_upgrade_from_the_dashboard(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=3)
    outdated(app, run)
    client = app.test_client()
    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert 'data-testid="action-upgrade"' in page
    assert "Continue it on the current definition at" in text_of(page)
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    done = client.post(f"/pgbus/runs/{run.workflow_id}/actions/upgrade",
                       data={"csrf_token": token, "confirmed": "1", "reason": "checked"})
    assert done.status_code == 303
    run = Run(engine_of(app), run.workflow_id)
    assert not run.definition_outdated
    event = run.events()[-1]
    assert (event["event"], event["actor"], event["reason"]) == ("definition_upgraded", "dashboard:alice", "checked")
    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert "Moved to the current definition by dashboard:alice" in text_of(page)
    assert 'data-testid="action-upgrade"' not in page and 'data-testid="outdated-notice"' not in page
    refused = client.post(f"/pgbus/runs/{run.workflow_id}/actions/upgrade",
                          data={"csrf_token": token, "confirmed": "1", "reason": "again"})
    assert refused.status_code == 409
    assert "Continue on the current definition is not possible now" in text_of(refused.get_data(as_text=True))


@ALICE
def test_verbs_through_the_json_api(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=4)
    outdated(app, run)
    client = app.test_client()
    view = client.get(f"/pgbus/api/runs/{run.workflow_id}").get_json()
    assert view["definition_outdated"] and "upgrade" in view["available_actions"]
    token = view["csrf_token"]
    done = client.post(f"/pgbus/api/runs/{run.workflow_id}/actions/upgrade",
                       data={"csrf_token": token, "reason": "checked"})
    assert done.status_code == 200, done.get_json()
    body = done.get_json()
    assert body["definition_outdated"] is False and "upgrade" not in body["available_actions"]
    assert Run(engine_of(app), run.workflow_id).events()[-1]["actor"] == "dashboard:alice"
    again = client.post(f"/pgbus/api/runs/{run.workflow_id}/actions/upgrade", data={"csrf_token": token})
    assert again.status_code == 409
    assert "already runs on the current definition" in again.get_json()["error"]
    assert "cancel" in again.get_json()["available_actions"]
    bad = client.post(f"/pgbus/api/runs/{run.workflow_id}/actions/reschedule", data={"csrf_token": token,
                                                                                    "at": "tomorrow"})
    assert bad.status_code == 400 and "must be a datetime with a timezone" in bad.get_json()["error"]
    nope = client.post(f"/pgbus/api/runs/{run.workflow_id}/actions/explode", data={"csrf_token": token})
    assert nope.status_code == 404 and nope.get_json()["status"] == 404
    forged = client.post(f"/pgbus/api/runs/{run.workflow_id}/actions/cancel", data={"reason": "no token"})
    assert forged.status_code == 400
    assert Run(engine_of(app), run.workflow_id).status == "ready"
    cancelled = client.post(f"/pgbus/api/runs/{run.workflow_id}/actions/cancel",
                            data={"csrf_token": token, "reason": "<script>x</script>"})
    assert cancelled.status_code == 200 and cancelled.get_json()["run"]["status"] == "cancelled"


@ALICE
def test_the_confirm_questions_say_what_becomes_of_ongoing_children(app: Flask) -> None:
    run, _kids = waiting_parent(app)  # one child finished, one paused: one ongoing
    client = app.test_client()
    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    confirms = dict(re.findall(r'data-testid="action-([a-z_]+)" data-confirm="([^"]*)"', page))
    assert confirms["cancel"].endswith("Its ongoing child run is cancelled too.")
    assert confirms["skip"].endswith("Its ongoing child run keeps running.")
    assert confirms["resume_at"].endswith("Its ongoing child run keeps running.")
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    asked = client.post(f"/pgbus/runs/{run.workflow_id}/actions/skip", data={"csrf_token": token, "reason": "x"})
    assert asked.status_code == 200 and "Its ongoing child run keeps running." in text_of(asked.get_data(as_text=True))
    assert Run(engine_of(app), run.workflow_id).status == "waiting"
