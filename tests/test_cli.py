"""flask pgbus ...: reads and verbs from the command line (actor cli:$USER)."""

from __future__ import annotations

import getpass

from flask import Flask

from .conftest import work
from .workflows import FailsUntil, ThreeSteps, WaitsForever


def invoke(app: Flask, *args: str) -> tuple[int, str]:
    result = app.test_cli_runner().invoke(args=["pgbus", *args])
    return result.exit_code, result.output


def test_runs_show_and_verbs(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = FailsUntil.start(fail_until=1, subject=("Invoice", 9))
        ThreeSteps.start(order_id=1)
    work(engine)
    code, out = invoke(app, "runs", "--status", "paused")
    assert code == 0 and str(run.workflow_id) in out and "FailsUntil" in out and "Invoice 9" in out
    code, out = invoke(app, "runs", "--class", "Nope")
    assert code == 0 and "no runs" in out
    code, out = invoke(app, "show", str(run.workflow_id))
    assert code == 0
    assert "status: paused" in out and "resume will: retry capture" in out and "TimeoutError" in out
    code, out = invoke(app, "attention")
    assert code == 0 and "paused_error" in out and "TimeoutError" in out

    code, out = invoke(app, "resume", str(run.workflow_id), "--reason", "gateway back")
    assert code == 0, out
    assert "resumed: retry capture" in out
    resumed = [e for e in run.events() if e["event"] == "resumed"][-1]
    assert resumed["actor"] == f"cli:{getpass.getuser()}" and resumed["reason"] == "gateway back"

    code, out = invoke(app, "resume", str(run.workflow_id))
    assert code == 1 and "cannot resume a ready run; allowed now:" in out

    code, out = invoke(app, "show", "not-a-uuid")
    assert code == 1 and "no workflow run with id not-a-uuid" in out


def test_signal_command(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        run = WaitsForever.start()
    work(engine)
    code, out = invoke(app, "signal", str(run.workflow_id), "go", "--payload", "{not json")
    assert code == 1 and "--payload is not JSON" in out
    assert run.signals() == []
    code, out = invoke(app, "signal", str(run.workflow_id), "go", "--payload", '{"ok": true}', "--key", "k")
    assert code == 0 and "stored signal" in out and "claimed" in out
    code, out = invoke(app, "signal", str(run.workflow_id), "go", "--key", "k")
    assert code == 0 and "duplicate delivery" in out
    work(engine)
    assert run.refresh().status == "finished"


def test_bulk_and_sweep_commands(app: Flask) -> None:
    engine = app.extensions["pgbus"]
    with app.app_context():
        runs = [FailsUntil.start(fail_until=1) for _ in range(3)]
    work(engine)
    code, out = invoke(app, "bulk", "resume", "--class", "FailsUntil", "--step", "capture",
                       "--reason-of-group", "paused_error", "--error-class", "TimeoutError", "--reason", "fixed")
    assert code == 0, out
    assert "resume: 3 moved, 0 refused" in out
    work(engine)
    assert {r.refresh().status for r in runs} == {"finished"}
    code, out = invoke(app, "sweep")
    assert code == 0 and "SweepReport" in out
