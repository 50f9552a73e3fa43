"""Every outside verb from every run status: allowed ones act, refused ones change nothing."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pgbus_flask import ActionNotAllowed, Run, StepNotDefined
from pgbus_flask import runner as runner_module
from pgbus_flask.engine import Engine
from tests.support import work
from tests.workflows import FailsUntil, ThreeSteps, WaitsForever

EXPECTED = {
    "ready": ["resume_at", "reschedule", "skip", "pause", "cancel", "signal"],
    "running": ["resume_at", "pause", "cancel", "signal"],
    "waiting": ["resume_at", "skip", "pause", "cancel", "signal"],
    "paused": ["resume", "resume_at", "skip", "cancel", "signal"],
    "finished": ["rerun"],
    "cancelled": ["rerun"],
}


def make(engine: Engine, status: str) -> Run:
    """A run in ``status``, built by driving the engine."""
    if status == "ready":
        return ThreeSteps.start(order_id=1)
    if status == "running":
        run = ThreeSteps.start(order_id=1)
        assert run.latest_step is not None
        assert runner_module.claim_attempt(engine, run.latest_step["id"], "job-x") is not None
        return run.refresh()
    if status == "waiting":
        run = WaitsForever.start()
        work(engine)
        return run.refresh()
    if status == "paused":
        run = FailsUntil.start(fail_until=1)
        work(engine)
        return run.refresh()
    if status == "finished":
        run = ThreeSteps.start(order_id=1)
        work(engine)
        return run.refresh()
    run = ThreeSteps.start(order_id=1)
    return run.cancel(reason="setup")


def snapshot(engine: Engine, run: Run) -> Any:
    with engine.db.connection() as conn:
        return (
            conn.execute("SELECT status, current_step, paused_at, finished_at FROM pgbus_workflows"
                         " WHERE workflow_id = %s", (run.workflow_id,)).fetchone(),
            conn.execute("SELECT id, status, scheduled_at, enqueued_at FROM pgbus_workflow_steps"
                         " WHERE workflow_id = %s ORDER BY id", (run.workflow_id,)).fetchall(),
            conn.execute("SELECT count(*) FROM pgbus_workflow_events WHERE workflow_id = %s",
                         (run.workflow_id,)).fetchone(),
            conn.execute("SELECT count(*) FROM pgbus_workflow_signals").fetchone(),
        )


CALLS: dict[str, Callable[[Run], Any]] = {
    "pause": lambda r: r.pause(actor="cli:alice", reason="checking"),
    "resume": lambda r: r.resume(actor="cli:alice", reason="fixed"),
    "resume_at": lambda r: r.resume_at(r.current_step, actor="cli:alice", reason="again"),
    "run_now": lambda r: r.run_now(actor="cli:alice"),
    "reschedule": lambda r: r.reschedule(datetime.now(timezone.utc) + timedelta(hours=1), actor="cli:alice"),
    "skip": lambda r: r.skip(actor="cli:alice", reason="not needed"),
    "rerun": lambda r: r.rerun(actor="cli:alice", reason="again"),
    "cancel": lambda r: r.cancel(actor="cli:alice", reason="customer left"),
    "signal": lambda r: r.signal("go", {"n": 1}, actor="cli:alice"),
}


@pytest.mark.parametrize("status", list(EXPECTED))
def test_available_actions_per_status(engine: Engine, status: str) -> None:
    run = make(engine, status)
    assert run.status == status
    assert run.available_actions == EXPECTED[status]


@pytest.mark.parametrize("status", list(EXPECTED))
@pytest.mark.parametrize("verb", list(CALLS))
def test_verb_from_status(engine: Engine, status: str, verb: str) -> None:
    run = make(engine, status)
    if verb in EXPECTED[status]:
        CALLS[verb](run)
        run.refresh()
        event = {"pause": "paused", "resume": "resumed", "resume_at": "resumed", "reschedule": "rescheduled",
                 "skip": "step_skipped", "rerun": "rerun", "cancel": "cancelled", "signal": "signal_received"}[verb]
        mine = [e for e in run.events() if e["event"] == event and e["actor"] == "cli:alice"]
        assert mine, f"{verb} wrote no {event} event by cli:alice"
        return
    before = snapshot(engine, run)
    with pytest.raises(ActionNotAllowed) as info:
        CALLS[verb](run)
    assert info.value.status == status
    assert f"a {status} run" in str(info.value)
    assert "allowed now: " + ", ".join(EXPECTED[status]) in str(info.value)
    assert snapshot(engine, run) == before


def test_run_now_needs_a_future_step(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=2)
    with pytest.raises(ActionNotAllowed, match="already due"):
        run.run_now()
    later = datetime.now(timezone.utc) + timedelta(hours=3)
    run.reschedule(later, actor="ops", reason="after the sale")
    assert run.available_actions == [EXPECTED["ready"][0], "run_now", *EXPECTED["ready"][1:]]
    work(engine)  # the early message claims nothing
    assert run.refresh().status == "ready"
    assert run.steps()[0]["status"] == "scheduled"
    run.run_now(actor="ops")
    work(engine)
    assert run.refresh().status == "finished"


def test_effects_of_each_allowed_verb(engine: Engine) -> None:
    # pause a ready run: the step job claims nothing; resume sends it again.
    run = ThreeSteps.start(order_id=3)
    run.pause(reason="hold")
    work(engine)
    assert run.refresh().status == "paused"
    plan = run.resume_plan()
    assert plan is not None and (plan.action, plan.step) == ("run", "reserve")
    run.resume()
    work(engine)
    assert run.refresh().status == "finished"
    # rerun from a given step: new attempts; earlier outputs are kept.
    run.rerun("ship", reason="label lost")
    assert run.status == "ready" and run.current_step == "ship"
    work(engine)
    attempts = [(s["step_name"], s["attempt"], s["status"]) for s in run.steps()]
    assert attempts[-1] == ("ship", 2, "completed")
    # resume_at a step the class does not have.
    other = ThreeSteps.start(order_id=4)
    with pytest.raises(StepNotDefined, match="no step 'refund'"):
        other.resume_at("refund")
    # skip a ready run's step: the next step is scheduled.
    other.skip(reason="already reserved by hand")
    assert [s["status"] for s in other.steps()] == ["skipped", "scheduled"]
    assert other.current_step == "charge"
    # cancel: open steps cancelled.
    other.cancel()
    assert other.status == "cancelled"
    assert [s["status"] for s in other.steps()] == ["skipped", "cancelled"]


def test_resume_plans(engine: Engine) -> None:
    failed = FailsUntil.start(fail_until=1)
    work(engine)
    failed.refresh()
    assert (failed.resume_plan().action, failed.resume_plan().step) == ("retry", "capture")  # type: ignore[union-attr]
    failed.resume(actor="dashboard:alice", reason="gateway is back")
    work(engine)
    assert failed.refresh().status == "finished"

    waiting = WaitsForever.start()
    work(engine)
    waiting.refresh().pause()
    plan = waiting.resume_plan()
    assert plan is not None and (plan.action, plan.step) == ("keep_waiting", "wait")
    waiting.resume()
    assert waiting.status == "waiting"

    # paused while its step runs: the attempt completes but schedules nothing; resume continues.
    mid = ThreeSteps.start(order_id=5)
    claim = runner_module.claim_attempt(engine, mid.latest_step["id"], None)  # type: ignore[index]
    assert claim is not None
    mid.refresh().pause(reason="look first")
    assert mid.resume_plan() == runner_module.ResumePlan("let_finish", "reserve")
    runner_module.record_outcome(engine, claim, result={"reserved": 5})
    mid.refresh()
    assert mid.status == "paused"
    assert mid.resume_plan() == runner_module.ResumePlan("continue", "charge")
    mid.resume()
    assert (mid.status, mid.current_step) == ("ready", "charge")



def test_resume_plan_finish(engine: Engine) -> None:
    """Paused while its last step runs: once that completes, resume finishes the run."""
    run2 = FailsUntil.start(fail_until=0)
    first = runner_module.claim_attempt(engine, run2.latest_step["id"], None)  # type: ignore[index]
    assert first is not None
    runner_module.record_outcome(engine, first, result="captured")
    run2.refresh()
    second = runner_module.claim_attempt(engine, run2.latest_step["id"], None)  # type: ignore[index]
    assert second is not None
    run2.refresh().pause()
    runner_module.record_outcome(engine, second, result="notified")
    assert run2.refresh().resume_plan() == runner_module.ResumePlan("finish", None)
    run2.resume()
    assert run2.status == "finished"


def test_class_actions_refused_when_class_cannot_be_imported(engine: Engine) -> None:
    run = FailsUntil.start(fail_until=5)
    work(engine)
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflows SET workflow_class = 'GoneWorkflow' WHERE workflow_id = %s",
                     (run.workflow_id,))
    run.refresh()
    assert not run.class_loaded
    assert run.available_actions == ["cancel", "signal"]
    with pytest.raises(ActionNotAllowed, match="GoneWorkflow cannot be imported here"):
        run.resume()
