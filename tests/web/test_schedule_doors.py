"""Schedules through every door: the dashboard (overview, schedule page, pause/resume forms),
the JSON API, and the CLI; each verb audited with its actor and reason, each refusal clear."""

from __future__ import annotations

import getpass
import html
import re
from datetime import timedelta

import pytest
from flask import Flask

from pgbus_flask import PgBus
from pgbus_flask.sweep import sweep
from tests.support.schedule_helpers import Declare
from tests.support.webtools import csrf, engine_of, sql, text_of

ALICE = pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: "alice")
HOSTILE = '<img src=x onerror=alert(1)>\u202eevil'


def tick_once(app: Flask, name: str) -> None:
    """Store the schedules, then start one tick of ``name`` as if it had come due."""
    engine = engine_of(app)
    sweep(engine)
    sql(app, "UPDATE pgbus_schedules SET next_tick = next_tick - interval '5 minutes' WHERE workflow_class = %s",
        name)
    assert sweep(engine).schedules_started == 1


@ALICE
def test_the_overview_lists_schedules_and_the_forms_pause_and_resume(app: Flask, declare: Declare) -> None:
    declare("Nightly", "0 2 * * *", schedule_timezone="Europe/Berlin")
    declare("Every5", timedelta(minutes=5))
    with app.app_context():
        tick_once(app, "Every5")
    client = app.test_client()
    page = client.get("/pgbus/").get_data(as_text=True)
    rows = re.findall(r'<tr data-testid="schedule-row" data-class="(\w+)">(.*?)</tr>', page, re.S)
    assert [name for name, _ in rows] == ["Every5", "Nightly"]
    every5, nightly = (text_of(row) for _, row in rows)
    assert "Every 5 minutes" in every5 and "Active" in every5
    assert "0 2 * * * in Europe/Berlin" in nightly and "<code" in rows[1][1]
    assert re.search(r'data-testid="schedule-last-run"><time datetime="[^"]+"', rows[0][1]), "last tick links its run"
    assert 'href="/pgbus/runs/' in rows[0][1]
    assert re.search(r'data-testid="schedule-next-tick"><time datetime="[^"]+" title="[^"]+">in ', rows[1][1])
    assert 'data-testid="schedule-pause"' in rows[1][1] and 'data-confirm="Pause the schedule of Nightly?' in rows[1][1]

    token = csrf(client, "/pgbus/")
    asked = client.post("/pgbus/schedules/Nightly/actions/pause", data={"csrf_token": token, "reason": HOSTILE})
    assert asked.status_code == 200, "without JavaScript the server asks first"
    assert "Pause the schedule of Nightly? No run starts for it until it is resumed." in text_of(
        asked.get_data(as_text=True))
    assert not PgBus().schedule("Nightly").paused, "asking changes nothing"
    done = client.post("/pgbus/schedules/Nightly/actions/pause",
                       data={"csrf_token": token, "confirmed": "1", "reason": HOSTILE})
    assert done.status_code == 303 and done.headers["Location"].endswith("/pgbus/schedules/Nightly")
    state = PgBus().schedule("Nightly")
    assert state.paused and (state.paused_by, state.paused_reason) == ("dashboard:alice", HOSTILE)
    shown = client.get(done.headers["Location"]).get_data(as_text=True)
    assert "Done: Pause schedule." in text_of(shown)
    assert "<img" not in shown and html.escape("<img src=x onerror=alert(1)>", quote=False) in shown
    assert "Paused by dashboard:alice" in text_of(shown)
    assert re.search(r'data-event="paused"[^>]*>\s*<span class="audit-sentence">Paused by <bdi>dashboard:alice</bdi>:'
                     r' <bdi>&lt;img', shown)

    again = client.post("/pgbus/schedules/Nightly/actions/pause",
                        data={"csrf_token": token, "confirmed": "1", "reason": "twice"})
    assert again.status_code == 409
    assert "The schedule of Nightly is paused already. Nothing was changed." in text_of(again.get_data(as_text=True))
    assert PgBus().schedule("Nightly").paused_reason == HOSTILE

    overview = client.get("/pgbus/").get_data(as_text=True)
    row = re.search(r'data-class="Nightly">(.*?)</tr>', overview, re.S)
    assert row and "Paused by dashboard:alice" in text_of(row.group(1))
    assert 'data-testid="schedule-resume"' in row.group(1)
    resumed = client.post("/pgbus/schedules/Nightly/actions/resume",
                          data={"csrf_token": token, "confirmed": "1", "reason": "supplier back"})
    assert resumed.status_code == 303 and not PgBus().schedule("Nightly").paused
    trail = [(e["event"], e["actor"], e["reason"]) for e in PgBus().schedule_events("Nightly")]
    assert trail[:2] == [("resumed", "dashboard:alice", "supplier back"), ("paused", "dashboard:alice", HOSTILE)]

    assert client.post("/pgbus/schedules/Nightly/actions/pause", data={"confirmed": "1"}).status_code == 400
    assert client.post("/pgbus/schedules/Nope/actions/pause",
                       data={"csrf_token": token, "confirmed": "1"}).status_code == 404
    assert client.post("/pgbus/schedules/Nightly/actions/drop",
                       data={"csrf_token": token, "confirmed": "1"}).status_code == 404
    missing = client.get("/pgbus/schedules/Nope?locale=de")
    assert missing.status_code == 404
    assert client.get("/pgbus/schedules/Nightly?locale=de").status_code == 200
    assert client.get("/pgbus/schedules/Nightly/actions/pause").status_code == 405


def test_the_schedule_page_is_live_and_a_refresh_takes_no_notice(app: Flask, declare: Declare) -> None:
    declare("Nightly", "0 2 * * *")
    client = app.test_client()
    token = csrf(client, "/pgbus/schedules/Nightly")
    client.post("/pgbus/schedules/Nightly/actions/pause", data={"csrf_token": token, "confirmed": "1"})
    regions = ["header", "warnings", "actions", "arguments", "audit"]
    refresh = client.get("/pgbus/schedules/Nightly", headers={"X-Pgbus-Live": "1"}).get_data(as_text=True)
    assert re.findall(r'data-live="([a-z]+)"', refresh) == regions and "Done: Pause schedule." not in refresh
    page = client.get("/pgbus/schedules/Nightly").get_data(as_text=True)
    assert '<body data-live-interval="5000">' in page and "Done: Pause schedule." in page


@ALICE
def test_the_json_api_reads_and_acts(app: Flask, declare: Declare) -> None:
    declare("Hourly", "@hourly", schedule_missed="all", schedule_kwargs={"report": "sales"})
    client = app.test_client()
    listed = client.get("/pgbus/api/schedules").get_json()
    [hourly] = listed["schedules"]
    assert (hourly["workflow_class"], hourly["schedule"], hourly["timezone"], hourly["missed"]) == (
        "Hourly", "@hourly", "UTC", "all")
    assert hourly["arguments"] == {"report": "sales"} and hourly["paused"] is False
    assert hourly["available_actions"] == ["pause"] and hourly["stored"] is False
    token = listed["csrf_token"]

    paused = client.post("/pgbus/api/schedules/Hourly/pause", data={"csrf_token": token, "reason": "quiet hours"})
    assert paused.status_code == 200, paused.get_data(as_text=True)
    assert paused.get_json()["schedule"]["paused_by"] == "dashboard:alice"
    conflict = client.post("/pgbus/api/schedules/Hourly/pause", data={"csrf_token": token})
    assert conflict.status_code == 409
    assert conflict.get_json()["error"] == "cannot pause the schedule of Hourly: it is paused; nothing was changed"
    unknown = client.post("/pgbus/api/schedules/Nope/resume", data={"csrf_token": token})
    assert unknown.status_code == 404 and "no schedule for workflow class 'Nope'" in unknown.get_json()["error"]
    too_long = client.post("/pgbus/api/schedules/Hourly/resume", data={"csrf_token": token, "reason": "x" * 1001})
    assert too_long.status_code == 400 and "reason is 1,001 characters long" in too_long.get_json()["error"]
    nul = client.post("/pgbus/api/schedules/Hourly/resume", data={"csrf_token": token, "reason": "a\x00b"})
    assert nul.status_code == 400 and nul.get_json()["status"] == 400
    assert client.post("/pgbus/api/schedules/Hourly/resume").status_code == 400  # no CSRF token

    one = client.get("/pgbus/api/schedules/Hourly").get_json()
    assert one["schedule"]["paused"] is True
    assert [(e["event"], e["sentence"]) for e in one["events"]][:2] == [
        ("paused", "Paused by dashboard:alice: quiet hours"), ("declared", "Declared: @hourly in UTC")]
    assert client.post("/pgbus/api/schedules/Hourly/resume", data={"csrf_token": token}).status_code == 200
    assert client.get("/pgbus/api/schedules/Nope").status_code == 404


def test_the_cli(app: Flask, declare: Declare) -> None:
    declare("Nightly", "0 2 * * *", schedule_timezone="Europe/Berlin")
    runner = app.test_cli_runner()
    out = runner.invoke(args=["pgbus", "schedules"])
    assert out.exit_code == 0
    assert "Nightly  cron 0 2 * * * (Europe/Berlin)  missed: skip  next: " in out.output
    assert "not stored yet" in out.output

    paused = runner.invoke(args=["pgbus", "schedule-pause", "Nightly", "--reason", "maintenance \x1b[31m"])
    assert paused.exit_code == 0, paused.output
    assert paused.output.startswith("Nightly: paused")
    with app.app_context():
        nightly = PgBus().schedule("Nightly")
    assert (nightly.paused_by, nightly.paused_reason) == (f"cli:{getpass.getuser()}", "maintenance \x1b[31m")
    listed = runner.invoke(args=["pgbus", "schedules"]).output
    assert f"paused by cli:{getpass.getuser()}: maintenance \\x1b[31m" in listed, "escaped for the terminal"

    again = runner.invoke(args=["pgbus", "schedule-pause", "Nightly"])
    assert again.exit_code == 1
    assert "cannot pause the schedule of Nightly: it is paused; nothing was changed" in again.output
    unknown = runner.invoke(args=["pgbus", "schedule-resume", "Nope"])
    assert unknown.exit_code == 1 and "no schedule for workflow class 'Nope' (schedules: Nightly)" in unknown.output
    bad = runner.invoke(args=["pgbus", "schedule-resume", "Nightly", "--reason", "x" * 1001])
    assert bad.exit_code == 2 and "reason is 1,001 characters long" in bad.output
    resumed = runner.invoke(args=["pgbus", "schedule-resume", "Nightly", "--reason", "done"])
    assert resumed.exit_code == 0 and resumed.output.startswith("Nightly: resumed; next tick ")
