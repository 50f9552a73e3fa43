"""``flask pgbus mcp``: a real subprocess driven by the ``mcp`` client over stdio (and one over
streamable HTTP), on the test database; its answers checked against the runs themselves, the JSON
API and the CLI."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import anyio
import pytest
from flask import Flask
from mcp import Client
from mcp_types import Implementation

from pgbus_flask import insights, queries, verbs
from pgbus_flask.config import Settings
from pgbus_flask.errors import ConfigError, InvalidInput
from pgbus_flask.handle import Run
from pgbus_flask.mcp_server import (
    READ_TOOLS,
    VERBS,
    allowed_host,
    client_actor,
    mcp_token,
    parse_http,
    tools,
    write_enabled,
    write_tools,
)
from pgbus_flask.mcp_server.server import StaticTokenVerifier
from pgbus_flask.sweep import sweep
from pgbus_flask.testing import wait_until
from tests.support import ROOT, work
from tests.support.doors import CLIENT, FLASK, cli_error, ok, refused, server_env, talk
from tests.support.procs import free_port
from tests.workflows import FailsUntil, ThreeSteps, WaitsForPayment

READ_NAMES = [tool.name for tool in READ_TOOLS]
WRITE_NAMES = [tool.name for tool in write_tools()]
HOSTILE = "<script>alert('x')</script> \x1b[31mred\x1b[0m \u202eevil\u202c \u2066iso\u2069 & \"q\" \x07"


def api(app: Flask, path: str) -> Any:
    response = app.test_client().get("/pgbus/api" + path)
    assert response.status_code == 200, response.data
    return response.get_json()


def every_table(app: Flask) -> Any:
    with app.extensions["pgbus"].db.connection() as conn:
        return {t: conn.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall()
                for t in ("pgbus_workflows", "pgbus_workflow_steps", "pgbus_workflow_events",
                          "pgbus_workflow_signals")}


# -- the tool lists ---------------------------------------------------------------------------


@pytest.mark.slow  # starts a process
def test_tool_lists_with_write_off_and_on(app: Flask, pg_url: str, redis_url: str) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=1)
    work(app.extensions["pgbus"])
    before = every_table(app)

    async def read_only(client: Client) -> None:
        listed = (await client.list_tools()).tools
        assert [t.name for t in listed] == READ_NAMES
        for t in listed:
            assert t.output_schema and t.description and t.annotations and t.annotations.read_only_hint
        assert "PGBUS_MCP_WRITE" in (client.instructions or "") and "stalled" in (client.instructions or "")
        # a write tool, asked for by name anyway, is refused and changes nothing
        text = await refused(client, "resume", {"workflow_id": str(run.workflow_id), "reason": "try"})
        assert "read-only" in text and "PGBUS_MCP_WRITE" in text
        text = await refused(client, "no_such_tool", {})
        assert "no tool is named 'no_such_tool'" in text

    talk(server_env(pg_url, redis_url, write=False), read_only)
    assert every_table(app) == before

    async def writable(client: Client) -> None:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert list(listed) == READ_NAMES + WRITE_NAMES
        assert [v.action for v in VERBS] == ["pause", "resume", "resume_at", "run_now", "reschedule", "skip", "rerun",
                                             "cancel", "upgrade"]
        # every verb a run has, but signal (its own tool), is a write tool
        assert {v.action for v in VERBS} == set(verbs.ACTIONS) - {"signal"}
        assert {"list_schedules"} <= set(READ_NAMES) and {"pause_schedule", "resume_schedule"} <= set(WRITE_NAMES)
        for name in WRITE_NAMES:
            tool = listed[name]
            assert "reason" in tool.input_schema["required"], name
            assert "reason" in (tool.description or "") and tool.annotations
            assert tool.annotations.read_only_hint is False
        assert listed["cancel"].annotations.destructive_hint  # type: ignore[union-attr]
        assert listed["resume_at"].input_schema["required"] == ["workflow_id", "step", "reason"]
        assert listed["bulk"].input_schema["properties"]["action"]["enum"] == list(verbs.BULK_ACTIONS)

    talk(server_env(pg_url, redis_url, write=True), writable)


def test_write_tools_follow_the_setting(app: Flask) -> None:
    assert write_enabled(app, {}) is False  # the default
    assert write_enabled(app, {"PGBUS_MCP_WRITE": "true"}) is True
    assert write_enabled(app, {"PGBUS_MCP_WRITE": "0"}) is False
    assert set(tools(False)) == set(READ_NAMES)
    assert set(tools(True)) == set(READ_NAMES) | set(WRITE_NAMES)


@pytest.mark.settings(PGBUS_MCP_WRITE=True)
def test_write_tools_from_the_apps_config(app: Flask) -> None:
    assert write_enabled(app, {}) is True
    assert write_enabled(app, {"PGBUS_MCP_WRITE": "no"}) is False  # the environment wins


# -- read tools against what the runs are -------------------------------------------------------------


@pytest.mark.slow  # starts a process
def test_read_tools_say_what_the_runs_are(app: Flask, pg_url: str, redis_url: str) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        failed = FailsUntil.start(fail_until=1, subject=("Invoice", "9"))
        done = ThreeSteps.start(order_id=4)
        waiting = WaitsForPayment.start()
    work(engine)
    sweep(engine)  # folds the insights roll-ups
    failed, done, waiting = (run.refresh() for run in (failed, done, waiting))
    assert (failed.status, done.status, waiting.status) == ("paused", "finished", "waiting")
    unknown = "00000000-0000-0000-0000-000000000000"

    async def body(client: Client) -> None:
        data, text = await ok(client, "overview")
        overview = api(app, "/overview")
        assert {k: data[k] for k in overview} == overview
        assert data["runs_by_status"] == {"ready": 0, "running": 0, "waiting": 1, "paused": 1, "finished": 1,
                                          "cancelled": 0}
        assert data["stuck_by_reason"]["paused_error"] == 1 and data["attention"] == 1
        assert "1 run needs attention (1 paused_error)" in text

        data, text = await ok(client, "list_runs", {"status": "paused"})
        assert [r["workflow_id"] for r in data["runs"]] == [str(failed.workflow_id)]
        assert data["runs"][0]["presentation"]["attention"] == "paused_error"
        assert data["next_before"] is None and str(failed.workflow_id) in text
        listed = api(app, "/runs?status=paused")["runs"]
        assert [{k: v for k, v in r.items() if k != "presentation"} for r in data["runs"]] == \
            [{k: v for k, v in r.items() if k != "presentation"} for r in listed]

        # keyset pages: one run a page, newest first, the cursor of the JSON API
        seen, before = [], None
        while True:
            args: dict[str, Any] = {"limit": 1, **({"before": before} if before else {})}
            data, _ = await ok(client, "list_runs", args)
            seen += [r["workflow_id"] for r in data["runs"]]
            before = data["next_before"]
            if before is None:
                break
        rows, _ = queries.list_runs(engine, queries.RunFilter(limit=10))
        assert seen == [str(r["workflow_id"]) for r in rows] == [str(r.workflow_id) for r in (waiting, done, failed)]
        data, _ = await ok(client, "list_runs", {"limit": 2.0})  # a whole number sent as a float
        assert [r["workflow_id"] for r in data["runs"]] == seen[:2]
        data, _ = await ok(client, "list_runs", {"subject": "Invoice 9"})
        assert [r["workflow_id"] for r in data["runs"]] == [str(failed.workflow_id)]
        data, _ = await ok(client, "list_runs", {"text": str(done.workflow_id)[:8]})
        assert [r["workflow_id"] for r in data["runs"]] == [str(done.workflow_id)]
        data, _ = await ok(client, "list_runs", {"stuck_reason": "paused_error", "workflow_class": "FailsUntil"})
        assert [r["workflow_id"] for r in data["runs"]] == [str(failed.workflow_id)]

        # one run, named by a prefix as the CLI names it
        data, text = await ok(client, "show_run", {"workflow_id": str(failed.workflow_id)[:8]})
        assert data["run"]["workflow_id"] == str(failed.workflow_id) and data["run"]["status"] == "paused"
        assert data["available_actions"] == failed.available_actions
        assert data["resume_plan"] == asdict(failed.resume_plan()) == {"action": "retry", "step": "capture"}
        assert data["definition_outdated"] is False and data["class_loaded"] is True
        assert [(s["step_name"], s["status"], s["error_class"]) for s in data["steps"]] == \
            [(s["step_name"], s["status"], s["error_class"]) for s in failed.steps()] == \
            [("capture", "failed", "TimeoutError")]
        assert "TimeoutError" in data["steps"][0]["backtrace"]
        assert [(e["event"], e["actor"]) for e in data["events"]] == [(e["event"], e["actor"]) for e in failed.events()]
        whole = api(app, f"/runs/{failed.workflow_id}")
        assert {k: v for k, v in data.items() if k != "presentation"} == \
            {k: v for k, v in whole.items() if k not in ("presentation", "csrf_token")}
        assert "paused at capture" in text and "Resume would: retry capture" in text
        assert "Latest error: capture #1: TimeoutError: gateway timed out on attempt 1" in text
        assert "Subject: Invoice 9" in text

        data, _ = await ok(client, "show_run", {"workflow_id": str(waiting.workflow_id)})
        assert data["run"]["current_step"] == "confirm" and data["resume_plan"] is None
        assert data["available_actions"] == waiting.available_actions
        assert data["outputs"] == waiting.outputs() == {"invoice": "invoiced"}
        data, _ = await ok(client, "show_run", {"workflow_id": str(done.workflow_id)})
        assert data["outputs"] == done.outputs() and data["available_actions"] == ["rerun"]

        # attention
        data, text = await ok(client, "attention_groups")
        assert data == api(app, "/attention")
        [group] = data["groups"]
        assert (group["workflow_class"], group["step_name"], group["reason"], group["error_class"], group["count"]) \
            == ("FailsUntil", "capture", "paused_error", "TimeoutError", 1)
        assert "1 run paused_error at FailsUntil.capture on TimeoutError" in text
        key = {"workflow_class": "FailsUntil", "step_name": "capture", "stuck_reason": "paused_error",
               "error_class": "TimeoutError"}
        data, _ = await ok(client, "attention_run_ids", key)
        assert data["workflow_ids"] == [str(failed.workflow_id)] and data["group"] == key

        # insights, as the JSON API computes them
        data, text = await ok(client, "class_insights", {"workflow_class": "ThreeSteps"})
        expected = insights.insights(engine, "ThreeSteps", "24h", ["reserve", "charge", "ship"]).as_json()
        for name in ("window", "started", "finished", "cancelled", "failed", "funnel", "errors"):
            assert data[name] == expected[name], name
        assert [s["step"] for s in data["steps"]] == ["reserve", "charge", "ship"]
        assert data["started"] == 1 and data["finished"] == 1
        assert "ThreeSteps over 24h: 1 started, 1 finished" in text

        # bad input: a clear error naming what was wrong (the CLI's words where the CLI has them)
        assert await refused(client, "show_run", {"workflow_id": unknown}) == cli_error(app, "show", unknown)
        assert await refused(client, "show_run", {"workflow_id": "zz"}) == cli_error(app, "show", "zz")
        assert "status: 'bogus' is not one of" in await refused(client, "list_runs", {"status": "bogus"})
        assert "limit: 0 is less than the minimum of 1" in await refused(client, "list_runs", {"limit": 0})
        assert "takes no argument 'colour'" in await refused(client, "list_runs", {"colour": "red"})
        assert "'workflow_id' is a required property" in await refused(client, "show_run", {})
        assert "window: '2d' is not one of" in await refused(client, "class_insights",
                                                            {"workflow_class": "ThreeSteps", "window": "2d"})

    talk(server_env(pg_url, redis_url, write=False), body)


# -- write tools --------------------------------------------------------------------------------------


def events_by(run: Run, actor: str) -> list[tuple[str, str | None]]:
    return [(e["event"], e["reason"]) for e in run.events() if e["actor"] == actor]


@pytest.mark.slow  # starts a process
def test_every_verb_records_the_client_and_refuses_as_the_cli(app: Flask, pg_url: str, redis_url: str) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = ThreeSteps.start(order_id=7)  # ready at reserve; no worker runs it
    actor = f"mcp:{CLIENT}"
    rid = str(run.workflow_id)

    async def body(client: Client) -> None:
        data, text = await ok(client, "reschedule", {"workflow_id": rid, "at": "2030-01-01T09:00:00+00:00",
                                                     "reason": "after the holidays"})
        assert data == {"action": "reschedule", "workflow_id": rid, "status": "ready", "current_step": "reserve",
                        "available_actions": run.refresh().available_actions, "resume_plan": None}
        assert run.latest_step["scheduled_at"] == datetime(2030, 1, 1, 9, tzinfo=timezone.utc)  # type: ignore[index]
        assert f"reschedule done by {actor}: run {rid} is now ready at reserve." == text

        await ok(client, "run_now", {"workflow_id": rid[:8], "reason": "now after all"})
        assert run.refresh().latest_step["scheduled_at"] < datetime.now(timezone.utc) + timedelta(seconds=5)  # type: ignore[index]
        data, _ = await ok(client, "pause", {"workflow_id": rid, "reason": "hold on"})
        assert data["status"] == run.refresh().status == "paused"
        data, text = await ok(client, "resume", {"workflow_id": rid, "reason": "go on"})
        assert data["resume_plan"] == {"action": "run", "step": "reserve"} and data["status"] == "ready"
        assert "resume (run reserve) done by" in text
        data, _ = await ok(client, "skip", {"workflow_id": rid, "reason": "reserved by hand"})
        assert data["current_step"] == run.refresh().current_step == "charge"
        data, _ = await ok(client, "resume_at", {"workflow_id": rid, "step": "reserve", "reason": "redo it"})
        assert data["current_step"] == "reserve" and data["status"] == "ready"
        data, _ = await ok(client, "cancel", {"workflow_id": rid, "reason": "customer left"})
        assert data["status"] == run.refresh().status == "cancelled" and data["available_actions"] == ["rerun"]

        # refused: the run's status does not allow it; the CLI's words; nothing changed
        before = every_table(app)
        text = await refused(client, "pause", {"workflow_id": rid, "reason": "again"})
        assert text == cli_error(app, "pause", rid, "--reason", "again") \
            == "cannot pause a cancelled run; allowed now: rerun"
        assert await refused(client, "resume_at", {"workflow_id": rid, "step": "nope", "reason": "x"}) == \
            cli_error(app, "resume-at", rid, "nope", "--reason", "x")
        # a missing or empty reason, a bad time, an unknown step
        assert "'reason' is a required property" in await refused(client, "rerun", {"workflow_id": rid})
        assert await refused(client, "rerun", {"workflow_id": rid, "reason": " \n "}) == \
            "reason is required: say why (it is recorded in the run's audit trail)"
        assert "at 'tomorrow' is not an ISO 8601 date and time" in await refused(
            client, "reschedule", {"workflow_id": rid, "at": "tomorrow", "reason": "x"})
        assert await refused(client, "rerun", {"workflow_id": rid, "step": "nope", "reason": "x"}) == \
            cli_error(app, "rerun", rid, "--step", "nope", "--reason", "x")
        assert every_table(app) == before

        data, _ = await ok(client, "rerun", {"workflow_id": rid, "step": "reserve", "reason": "once more"})
        assert data["status"] == "ready" and data["current_step"] == "reserve"

    talk(server_env(pg_url, redis_url, write=True), body)
    assert [e for e in events_by(run, actor) if e[1] is not None] == [
        ("rescheduled", "after the holidays"), ("run_now", "now after all"), ("paused", "hold on"),
        ("resumed", "go on"), ("step_skipped", "reserved by hand"), ("resumed", "redo it"),
        ("cancelled", "customer left"), ("rerun", "once more"),
    ]
    assert not [e for e in run.events() if e["actor"].startswith("cli:")]  # the CLI's refusals changed nothing
    work(engine)
    assert run.refresh().status == "finished"


@pytest.mark.slow  # starts a process
def test_signals_and_bulk_verbs(app: Flask, pg_url: str, redis_url: str) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        waiting = WaitsForPayment.start()
        stuck = [FailsUntil.start(fail_until=1) for _ in range(2)]
        finished = ThreeSteps.start()
    work(engine)
    actor = "mcp:bulk-client"
    payload = {"amount": "42.00", "html": HOSTILE, "nul": "a\x00b", "big": "x" * 10_240, "list": [1, None, True]}

    async def body(client: Client) -> None:
        data, text = await ok(client, "send_signal", {"workflow_id": str(waiting.workflow_id),
                                                      "name": "payment_confirmed", "payload": payload,
                                                      "idempotency_key": "pi_1", "reason": "paid by phone"})
        assert data["signal"]["payload"] == payload and data["signal"]["status"] == "claimed"
        assert data["signal"]["duplicate_delivery"] is False and data["status"] == "ready"
        data, text = await ok(client, "send_signal", {"workflow_id": str(waiting.workflow_id),
                                                      "name": "payment_confirmed", "idempotency_key": "pi_1",
                                                      "reason": "again"})
        assert data["signal"]["duplicate_delivery"] is True and text.startswith("Duplicate delivery")
        assert await refused(client, "send_signal", {"workflow_id": str(finished.workflow_id), "name": "go",
                                                     "reason": "x"}) == \
            cli_error(app, "signal", str(finished.workflow_id), "go", "--reason", "x")

        group = {"workflow_class": "FailsUntil", "step_name": "capture", "stuck_reason": "paused_error",
                 "error_class": "TimeoutError"}
        data, text = await ok(client, "bulk", {"action": "resume", **group, "reason": "gateway back"})
        assert data == {"action": "resume", "group": group, "moved": 2, "refused": 0, "errors": {}}
        assert text == "resume: 2 moved, 0 refused."
        data, _ = await ok(client, "bulk", {"action": "cancel", **group, "reason": "none left"})
        assert data["moved"] == 0  # the group is empty now
        assert "action: 'retry' is not one of" in await refused(client, "bulk", {"action": "retry", **group,
                                                                                 "reason": "x"})

    talk(server_env(pg_url, redis_url, write=True), body, name="bulk-client")
    work(engine)
    assert waiting.refresh().status == "finished"
    assert waiting.outputs()["confirm"]["paid"] == payload  # exactly, NUL and all
    [signal] = waiting.signals()
    assert signal["sent_by"] == actor
    for run in stuck:
        assert run.refresh().status == "finished"
        assert ("resumed", "gateway back") in events_by(run, actor)


@pytest.mark.slow  # starts a process
def test_hostile_strings_round_trip_and_are_capped_as_elsewhere(app: Flask, pg_url: str, redis_url: str) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = FailsUntil.start(fail_until=1, subject=("Order<b>", HOSTILE))
    work(engine)
    rid = str(run.workflow_id)
    name = "evil\x1b[2J\u202e<img src=x>\n" + "n" * 300
    actor = client_actor(name)
    assert actor.startswith("mcp:evil\\x1b[2J\\u202e<img src=x>\\n") and len(actor) == len("mcp:") + 48
    long_reason = "r" * 10_240

    async def body(client: Client) -> None:
        before = every_table(app)
        text = await refused(client, "resume", {"workflow_id": rid, "reason": long_reason})
        assert text == cli_error(app, "resume", rid, "--reason", long_reason) \
            == "reason is 10,240 characters long; at most 1,000 are allowed"
        text = await refused(client, "resume", {"workflow_id": rid, "reason": "a\x00b"})
        assert text == "reason contains a NUL character at position 1, which cannot be stored"
        assert every_table(app) == before

        data, text = await ok(client, "resume", {"workflow_id": rid, "reason": HOSTILE})
        assert "\\x1b[2J" in text and "\\u202e" in text  # the actor, escaped, in the summary
        data, text = await ok(client, "show_run", {"workflow_id": rid})
        assert data["run"]["subject_id"] == HOSTILE  # exact in the structured result
        assert [e["reason"] for e in data["events"] if e["actor"] == actor] == [HOSTILE, None]
        assert "Subject: Order<b> <script>alert('x')</script> \\x1b[31mred" in text  # escaped in the summary
        data, text = await ok(client, "list_runs", {"subject": "Order<b>"})
        assert [r["subject_id"] for r in data["runs"]] == [HOSTILE]

    talk(server_env(pg_url, redis_url, write=True), body, name=name)
    resumed = [e for e in run.events() if e["event"] == "resumed"]
    assert [(e["actor"], e["reason"]) for e in resumed] == [(actor, HOSTILE)]


@pytest.mark.slow  # starts a process
def test_the_actor_comes_from_the_initialize_handshake(app: Flask, pg_url: str, redis_url: str) -> None:
    """An older client (the initialize handshake, as most desktop clients speak) names itself there."""
    with app.app_context():
        run = ThreeSteps.start()

    async def body(client: Client) -> None:
        await ok(client, "pause", {"workflow_id": str(run.workflow_id), "reason": "from a legacy client"})

    talk(server_env(pg_url, redis_url, write=True), body, name="Claude Desktop", mode="legacy")
    assert events_by(run, "mcp:Claude Desktop") == [("paused", "from a legacy client")]
    assert client_actor(None) == client_actor("") == client_actor(" \t") == "mcp:unknown"


@pytest.mark.slow  # starts a process
def test_a_step_output_holding_a_lone_surrogate_is_shown_escaped(app: Flask, pg_url: str, redis_url: str) -> None:
    """UTF-8 cannot carry a lone surrogate: it is written as its escape, as stored text shows it elsewhere."""
    from tests.proc_workflows import HostileOutcome

    with app.app_context():
        run = HostileOutcome.start(text="bad\udcffbyte\x00", case="return")
    work(app.extensions["pgbus"])
    assert run.refresh().status == "finished"

    async def body(client: Client) -> None:
        data, _ = await ok(client, "show_run", {"workflow_id": str(run.workflow_id)})
        produced = data["outputs"]["produce"]
        assert produced["text"] == "bad\\udcffbyte\x00" and data["class_loaded"] is False

    talk(server_env(pg_url, redis_url, write=False), body)


@pytest.mark.slow  # starts a process
def test_show_run_names_a_runs_parent_and_children(app: Flask, pg_url: str, redis_url: str) -> None:
    from tests.child_workflows import Fulfilment

    with app.app_context():
        parent = Fulfilment.start(parcels=[1, 2], failing=[2])
    work(app.extensions["pgbus"])
    children = parent.refresh().children()
    assert parent.status == "waiting" and len(children) == 2
    failed = next(c for c in children if c["status"] == "paused")

    async def body(client: Client) -> None:
        data, text = await ok(client, "show_run", {"workflow_id": str(parent.workflow_id)})
        assert [(c["workflow_id"], c["status"]) for c in data["children"]] == \
            [(str(c["workflow_id"]), c["status"]) for c in children]
        assert data["parent"] is None and "Child runs (2):" in text
        data, text = await ok(client, "show_run", {"workflow_id": str(failed["workflow_id"])})
        assert data["parent"] == {"workflow_id": str(parent.workflow_id), "step": "ship_all"}
        assert f"Started by run {parent.workflow_id} at its step ship_all." in text

    talk(server_env(pg_url, redis_url, write=False), body)


# -- the command -------------------------------------------------------------------------------------


@contextmanager
def http_server(env: dict[str, str], *args: str) -> Iterator[int]:
    """``flask pgbus mcp --http`` on a free port (``0.0.0.0`` or ``127.0.0.1``, as ``args`` start), running
    until the block ends: its port."""
    port = free_port()
    host = "0.0.0.0" if args and args[0] == "0.0.0.0" else "127.0.0.1"
    proc = subprocess.Popen([*FLASK, "--http", f"{host}:{port}", *args[1:]], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def listening() -> bool:
            assert proc.poll() is None, proc.communicate()
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_until(listening, timeout=30, message="the MCP server listening")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            assert stream is not None
            stream.close()


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def messages(self) -> list[Any]:
        """The JSON-RPC messages of a JSON or server-sent-events body."""
        text = self.body.decode()
        if self.headers.get("content-type", "").startswith("text/event-stream"):
            return [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
        return [json.loads(text)] if text else []


def post(port: int, message: dict[str, Any] | None, headers: dict[str, str], method: str = "POST") -> Answer:
    """One JSON-RPC message POSTed to ``/mcp`` through 127.0.0.1 (or another ``method`` without one), with
    ``headers`` (``Host`` among them)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, "/mcp", json.dumps(message) if message is not None else None,
                     headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                              **headers})
        answer = conn.getresponse()
        return Answer(answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read())
    finally:
        conn.close()


TOKEN = "mcp-" + "k" * 28 + "-9f3a"  # 37 characters
#: What a request naming another Host gets (DNS rebinding), on every bind.
FOREIGN_HOST = (421, b"Invalid Host header")
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "raw-client", "version": "1"}}}


@pytest.mark.slow  # starts a process
def test_http_serves_on_loopback(app: Flask, pg_url: str, redis_url: str) -> None:
    with app.app_context():
        run = ThreeSteps.start()
    with http_server(server_env(pg_url, redis_url, write=False)) as port:
        url = f"http://127.0.0.1:{port}/mcp"

        async def main() -> None:
            with anyio.fail_after(30):
                async with Client(url, client_info=Implementation(name="http-client", version="1")) as client:
                    data, _ = await ok(client, "list_runs", {"status": "ready"})
                    assert [r["workflow_id"] for r in data["runs"]] == [str(run.workflow_id)]
                    assert [t.name for t in (await client.list_tools()).tools] == READ_NAMES

        anyio.run(main)
        # another Host (a DNS rebinding page in a browser) is refused
        answer = post(port, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, {"Host": "attacker.example"})
        assert answer.status in (400, 403, 421), answer.status
        assert (answer.status, answer.body) == FOREIGN_HOST


def test_http_refuses_a_remote_host_without_allow_remote(app: Flask) -> None:
    result = app.test_cli_runner().invoke(args=["pgbus", "mcp", "--http", "0.0.0.0:8765"])
    assert result.exit_code == 2
    assert "--http host '0.0.0.0' is not a loopback address" in result.output
    assert "no authentication" in result.output and "--allow-remote" in result.output
    assert "missing: --allow-remote, PGBUS_MCP_TOKEN, --allowed-host." in result.output
    result = app.test_cli_runner().invoke(args=["pgbus", "mcp", "--http", "127.0.0.1:99999"])
    assert result.exit_code == 2 and "port from 1 to 65535" in result.output
    assert parse_http("8765", False) == ("127.0.0.1", 8765)
    assert parse_http("[::1]:8765", False) == ("::1", 8765)
    assert parse_http("localhost:8765", False) == ("localhost", 8765)
    assert parse_http("0.0.0.0:8765", True, token=TOKEN, allowed_hosts=["mcp.test"]) == ("0.0.0.0", 8765)
    with pytest.raises(InvalidInput, match=r"missing: PGBUS_MCP_TOKEN, --allowed-host\."):
        parse_http("0.0.0.0:8765", True)


# -- over the network: the token and the listed hosts -------------------------------------------------

def remote_env(pg_url: str, redis_url: str, token: str = TOKEN) -> dict[str, str]:
    return {**server_env(pg_url, redis_url, write=True), "PGBUS_MCP_TOKEN": token}


def remote_client(url: str, headers: dict[str, str], name: str) -> Client:
    """The ``mcp`` client over streamable HTTP sending ``headers``, as a client's config sets them."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    transport = streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers))
    return Client(transport, client_info=Implementation(name=name, version="1"))


@pytest.mark.slow  # starts a process
def test_a_network_bind_answers_only_the_token_and_the_listed_hosts(app: Flask, pg_url: str,
                                                                   redis_url: str) -> None:
    with app.app_context():
        raw_run, client_run = ThreeSteps.start(), ThreeSteps.start()
    with http_server(remote_env(pg_url, redis_url), "0.0.0.0", "--allow-remote",
                     "--allowed-host", "MCP.Test", "--allowed-host", "10.9.8.7:1234") as port:
        listed = {"Host": f"mcp.test:{port}"}
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        # a session opened with the token, so that each refusal below is of a request that would otherwise work
        opened = post(port, INITIALIZE, {**listed, **bearer})
        assert opened.status == 200 and opened.messages()[0]["result"]["serverInfo"]["name"] == "pgbus"
        session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        assert post(port, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                    {**listed, **bearer, **session}).status == 202
        cancel = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                  "params": {"name": "cancel", "arguments": {"workflow_id": str(raw_run.workflow_id),
                                                             "reason": "from the network"}}}
        before = every_table(app)

        for headers in ({}, {"Authorization": "Bearer " + TOKEN[:-1] + "b"}, {"Authorization": f"Bearer {TOKEN}x"},
                        {"Authorization": f"Basic {TOKEN}"}, {"Authorization": TOKEN}):
            for asked in (cancel, INITIALIZE):
                answer = post(port, asked, {**listed, **session, **headers})
                assert answer.status == 401, (headers, answer)
                assert answer.headers["www-authenticate"].startswith("Bearer ")
                assert json.loads(answer.body)["error"] == "invalid_token"
                assert TOKEN.encode() not in answer.body
            # nor the session's event stream, nor ending the session
            for method in ("GET", "DELETE"):
                assert post(port, None, {**listed, **session, **headers}, method).status == 401, (method, headers)
        # the token, but another Host (DNS rebinding) or a foreign web page's Origin
        answer = post(port, cancel, {"Host": f"attacker.example:{port}", **bearer, **session})
        assert (answer.status, answer.body) == FOREIGN_HOST
        assert post(port, cancel, {"Host": f"127.0.0.1:{port}", **bearer, **session}).status == FOREIGN_HOST[0]
        for origin in ("https://attacker.example", f"http://attacker.example:{port}", "null"):
            answer = post(port, cancel, {**listed, "Origin": origin, **bearer, **session})
            assert (answer.status, answer.body) == (403, b"Invalid Origin header"), origin
        assert every_table(app) == before

        # the same call with the token, from a listed Host (and the listed host's own page): it cancels
        answer = post(port, cancel, {**listed, "Origin": "https://mcp.test", **bearer, **session})
        assert answer.status == 200, answer
        [reply] = answer.messages()
        assert reply["result"]["isError"] is False and reply["result"]["structuredContent"]["status"] == "cancelled"
        assert events_by(raw_run, "mcp:raw-client") == [("cancelled", "from the network")]
        assert post(port, INITIALIZE, {"Host": "10.9.8.7:1234", **bearer}).status == 200  # the listed port only
        assert post(port, INITIALIZE, {"Host": "10.9.8.7:1235", **bearer}).status == FOREIGN_HOST[0]
        assert post(port, INITIALIZE, {"Host": "mcp.test", **bearer}).status == 200  # through a proxy on 443

        async def main() -> None:
            url = f"http://127.0.0.1:{port}/mcp"
            with anyio.fail_after(30):
                async with remote_client(url, {**listed, **bearer}, "remote-client") as client:
                    data, _ = await ok(client, "cancel", {"workflow_id": str(client_run.workflow_id),
                                                          "reason": "as a client's config sends it"})
                    assert data["status"] == "cancelled"

        anyio.run(main)
    assert events_by(client_run, "mcp:remote-client") == [("cancelled", "as a client's config sends it")]


@pytest.mark.slow  # starts a process
def test_a_token_that_is_set_is_required_on_loopback_too(app: Flask, pg_url: str, redis_url: str) -> None:
    with app.app_context():
        run = ThreeSteps.start()
    with http_server(remote_env(pg_url, redis_url), "127.0.0.1", "--allowed-host", "pgbus.internal") as port:
        loopback = {"Host": f"127.0.0.1:{port}"}
        for headers in ({}, {"Authorization": "Bearer " + "k" * 40}):
            answer = post(port, INITIALIZE, {**loopback, **headers})
            assert answer.status == 401 and json.loads(answer.body)["error"] == "invalid_token"
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert post(port, INITIALIZE, {**loopback, **bearer}).status == 200
        # a listed name is answered on loopback too (a proxy on this machine), another one is not
        assert post(port, INITIALIZE, {"Host": "pgbus.internal", **bearer}).status == 200
        answer = post(port, INITIALIZE, {"Host": f"attacker.example:{port}", **bearer})
        assert (answer.status, answer.body) == FOREIGN_HOST

        async def main() -> None:
            with anyio.fail_after(30):
                async with remote_client(f"http://127.0.0.1:{port}/mcp", bearer, "local-client") as client:
                    await ok(client, "pause", {"workflow_id": str(run.workflow_id), "reason": "token on loopback"})

        anyio.run(main)
    assert events_by(run, "mcp:local-client") == [("paused", "token on loopback")]


@contextmanager
def taken_port() -> Iterator[int]:
    """A port already listened on (every address): a command that should refuse before serving fails to bind
    there, rather than serving for ever, if it does not."""
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        yield int(holder.getsockname()[1])


def mcp_refusal(app: Flask, *args: str, token: str | None = None) -> str:
    """What ``flask pgbus mcp ARGS`` says as it exits with status 2, before serving anything."""
    env = {"PGBUS_MCP_TOKEN": token} if token is not None else {}
    result = app.test_cli_runner().invoke(args=["pgbus", "mcp", *args], env=env)
    assert result.exit_code == 2, result.output
    return result.output


def test_a_network_bind_without_the_token_or_the_hosts_exits_2(app: Flask) -> None:
    with taken_port() as port:
        check_network_refusals(app, port)


def check_network_refusals(app: Flask, port: int) -> None:
    remote = ["--http", f"0.0.0.0:{port}", "--allow-remote"]
    text = mcp_refusal(app, *remote)
    assert "missing: PGBUS_MCP_TOKEN, --allowed-host." in text and "at least 32 characters" in text
    assert "missing: --allowed-host." in mcp_refusal(app, *remote, token=TOKEN)
    assert "missing: PGBUS_MCP_TOKEN." in mcp_refusal(app, *remote, "--allowed-host", "mcp.test")
    assert "missing: --allow-remote." in mcp_refusal(app, "--http", f"0.0.0.0:{port}", "--allowed-host", "mcp.test",
                                                     token=TOKEN)
    assert "missing: --allow-remote, PGBUS_MCP_TOKEN." in mcp_refusal(app, "--http", f"10.1.2.3:{port}",
                                                                      "--allowed-host", "mcp.test")
    # other names on a loopback bind: a proxy serves it to the network, so the token is needed there too
    text = mcp_refusal(app, "--http", f"127.0.0.1:{port}", "--allowed-host", "mcp.test")
    assert "Error: --allowed-host answers requests that reach the server by other names" in text
    assert "missing: PGBUS_MCP_TOKEN" in text
    # a token too short, or not what an HTTP header carries: named, never shown
    for bad in ("k" * 31, "k" * 20 + " " + "k" * 20, "k" * 40 + "\u00e9"):
        text = mcp_refusal(app, *remote, "--allowed-host", "mcp.test", token=bad)
        assert "Error: PGBUS_MCP_TOKEN must be at least 32 characters, printable ASCII without spaces" in text
        assert bad not in text and "k" * 20 not in text
    # on loopback too: a token set is a token checked, so a bad one is refused there as well
    assert "PGBUS_MCP_TOKEN must be at least 32" in mcp_refusal(app, "--http", f"127.0.0.1:{port}", token="short")
    for bad in ("http://mcp.test/", "mcp.test/mcp", "*", "mcp.test:0", "::1", "a b", ""):
        text = mcp_refusal(app, *remote, "--allowed-host", bad, token=TOKEN)
        assert "Error: --allowed-host wants a host name or address as clients send it in the Host header" in text
    text = mcp_refusal(app, "--allowed-host", "mcp.test")
    assert "--allowed-host only applies with --http" in text
    assert allowed_host(" MCP.Example.com ") == "mcp.example.com"
    assert allowed_host("[FD00::5]:8765") == "[fd00::5]:8765"


@pytest.mark.settings(PGBUS_MCP_TOKEN=TOKEN)
def test_the_token_from_the_apps_config_or_the_environment(app: Flask) -> None:
    assert mcp_token(app, {}) == TOKEN
    other = "z" * 32
    assert mcp_token(app, {"PGBUS_MCP_TOKEN": other}) == other  # the environment wins
    assert mcp_token(app, {"PGBUS_MCP_TOKEN": ""}) == TOKEN  # an empty variable is no token, not "none needed"
    settings = app.extensions["pgbus"].settings
    assert settings.mcp_token == TOKEN and TOKEN not in repr(settings)
    with pytest.raises(ConfigError) as refused:
        Settings.load({"PGBUS_MCP_TOKEN": "s" * 31})
    assert str(refused.value) == ("PGBUS_MCP_TOKEN must be at least 32 characters, printable ASCII without spaces "
                                  "(as an HTTP header carries it)")
    assert Settings.load({"PGBUS_METRICS_TOKEN": "s" * 16}).metrics_token == "s" * 16  # its own minimum stays
    assert repr(StaticTokenVerifier(TOKEN)) == "StaticTokenVerifier(***)"


@pytest.mark.slow  # starts a process
def test_without_the_mcp_package_it_says_how_to_install_it(pg_url: str, redis_url: str) -> None:
    code = "import sys; sys.modules['mcp'] = None; from flask.cli import main; main()"
    result = subprocess.run([sys.executable, "-c", code, *FLASK[3:]], env=server_env(pg_url, redis_url, False),
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "the MCP server needs the mcp package: pip install 'pgbus-flask[mcp]'" in result.stderr


def test_structured_results_are_json(app: Flask) -> None:
    """Every output schema is an object schema a client can validate against."""
    for tool in tools(True).values():
        assert tool.output["type"] == "object" and tool.input_schema()["additionalProperties"] is False
        json.dumps(tool.output)


@pytest.mark.slow  # starts a process
def test_upgrade_and_schedules_through_mcp(app: Flask, pg_url: str, redis_url: str, declare: Any) -> None:
    from tests.support.schedule_helpers import Declare

    make: Declare = declare
    make("McpNightly", "0 2 * * *", schedule_timezone="Europe/Berlin")
    engine = app.extensions["pgbus"]
    sweep(engine)  # stores the schedule
    with app.app_context():
        run = ThreeSteps.start(order_id=77)
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflows SET definition_digest = 'older' WHERE workflow_id = %s",
                     (run.workflow_id,))

    async def body(client: Client) -> None:
        data, text = await ok(client, "list_schedules")
        [nightly] = [s for s in data["schedules"] if s["workflow_class"] == "McpNightly"]
        assert (nightly["schedule"], nightly["timezone"], nightly["paused"]) == ("0 2 * * *", "Europe/Berlin", False)
        assert "McpNightly: 0 2 * * * (Europe/Berlin), next tick" in text
        data, text = await ok(client, "pause_schedule", {"workflow_class": "McpNightly", "reason": "holiday"})
        assert data["schedule"]["paused"] and data["schedule"]["paused_by"] == f"mcp:{CLIENT}"
        assert "is paused" in text
        again = await refused(client, "pause_schedule", {"workflow_class": "McpNightly", "reason": "again"})
        assert again == cli_error(app, "schedule-pause", "McpNightly", "--reason", "again")
        assert "reason" in await refused(client, "resume_schedule", {"workflow_class": "McpNightly", "reason": " "})
        data, _ = await ok(client, "resume_schedule", {"workflow_class": "McpNightly", "reason": "back"})
        assert not data["schedule"]["paused"]
        unknown = await refused(client, "pause_schedule", {"workflow_class": "Nope", "reason": "x"})
        assert "no schedule for workflow class 'Nope'" in unknown
        data, _ = await ok(client, "show_run", {"workflow_id": str(run.workflow_id)})
        assert data["definition_outdated"] and "upgrade" in data["available_actions"]
        data, text = await ok(client, "upgrade", {"workflow_id": str(run.workflow_id), "reason": "reviewed"})
        assert "upgrade" not in data["available_actions"]
        refusal = await refused(client, "upgrade", {"workflow_id": str(run.workflow_id), "reason": "again"})
        assert refusal == cli_error(app, "upgrade", str(run.workflow_id), "--reason", "again")

    talk(server_env(pg_url, redis_url, write=True), body)
    assert [e["event"] for e in run.events()][-1] == "definition_upgraded"
    assert run.events()[-1]["actor"] == f"mcp:{CLIENT}"
    from pgbus_flask import schedules

    trail = [(e["event"], e["actor"]) for e in schedules.schedule_events(engine, "McpNightly")]
    assert ("paused", f"mcp:{CLIENT}") in trail and ("resumed", f"mcp:{CLIENT}") in trail
