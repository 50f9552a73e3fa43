"""Stuck reasons, attention groups, bulk verbs, and the sweep's in-process parts."""

from __future__ import annotations

import pytest

from pgbus_flask import queries, runner
from pgbus_flask.engine import Engine
from pgbus_flask.sweep import SWEEP_LOCK, sweep
from tests.support import work
from tests.support.seeds import engine_sql as sql
from tests.support.seeds import stall
from tests.workflows import FailsUntil, Sleeps, ThreeSteps, WaitsForever


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=60, PGBUS_WAITING_THRESHOLD=600)
def test_every_stuck_reason(engine: Engine) -> None:
    # stalled: the sweep fails the attempts with StepStalled and pauses the runs.
    stalled = stall(engine)
    assert sweep(engine).stalled == 2
    # paused_error: three runs paused on TimeoutError at capture.
    errors = [FailsUntil.start(fail_until=5) for _ in range(3)]
    # paused_manual: paused by an operator.
    manual = ThreeSteps.start(order_id=1)
    manual.pause(actor="dashboard:alice", reason="customer called")
    # waiting_overdue: waiting longer than the waiting threshold with no wait_timeout.
    waiting = WaitsForever.start()
    work(engine, [engine.settings.queue])
    sql(engine, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '1 hour' WHERE workflow_id = %s",
        waiting.workflow_id)
    # overdue: ready, step due well past the threshold.
    overdue = ThreeSteps.start(order_id=2)
    sql(engine, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '2 hours' WHERE workflow_id = %s",
        overdue.workflow_id)
    # not stuck: a fresh ready run.
    ThreeSteps.start(order_id=3)

    counts = queries.stuck_reason_counts(engine)
    assert counts == {("Sleeps", "stalled"): 2, ("FailsUntil", "paused_error"): 3,
                      ("ThreeSteps", "paused_manual"): 1, ("ThreeSteps", "overdue"): 1,
                      ("WaitsForever", "waiting_overdue"): 1}
    assert queries.stuck_reason_counts(engine, "FailsUntil") == {("FailsUntil", "paused_error"): 3}

    groups = queries.attention_groups(engine)
    assert [(g.workflow_class, g.step_name, g.reason, g.error_class, g.count) for g in groups][:2] == [
        ("FailsUntil", "capture", "paused_error", "TimeoutError", 3),
        ("Sleeps", "slow", "stalled", "pgbus_flask.errors.StepStalled", 2),
    ]
    top = groups[0]
    assert top.error_message == "gateway timed out on attempt 1"
    assert top.first_seen_at <= top.last_seen_at  # type: ignore[operator]
    ids = queries.attention_ids(engine, "FailsUntil", "capture", "paused_error", "TimeoutError")
    assert ids == [r.workflow_id for r in errors]  # oldest stuck first

    result = queries.bulk_act(engine, "resume", top.key(), actor="dashboard:alice", reason="gateway fixed")
    assert (result.moved, result.refused) == (3, 0)
    assert all(r.refresh().status == "ready" for r in errors)
    resumed = [e for e in errors[0].events() if e["event"] == "resumed"]
    assert resumed[-1]["actor"] == "dashboard:alice" and resumed[-1]["reason"] == "gateway fixed"

    stalled_result = queries.bulk_act(engine, "cancel", groups[1].key(), actor="cli:ops")
    assert stalled_result.moved == 2
    assert {r.refresh().status for r in stalled} == {"cancelled"}  # type: ignore[attr-defined]


def test_waiting_overdue_only_with_a_threshold(engine: Engine) -> None:
    waiting = WaitsForever.start()
    work(engine)
    sql(engine, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '30 days' WHERE workflow_id = %s",
        waiting.workflow_id)
    assert queries.stuck_reason_counts(engine) == {}


def test_bulk_reports_refusals(engine: Engine) -> None:
    runs = [FailsUntil.start(fail_until=5) for _ in range(2)]
    work(engine)
    group = queries.attention_groups(engine)[0].key()
    # one run leaves the group between the query and the action: still counted honestly
    runs[0].refresh().cancel()
    result = queries.bulk_act(engine, "skip", group, actor="cli:ops")
    assert (result.moved, result.refused) == (1, 0)
    with pytest.raises(Exception, match="bulk action must be one of"):
        queries.bulk_act(engine, "rerun", group, actor="cli:ops")


def test_sweep_resends_overdue_steps_of_ready_runs_only(engine: Engine) -> None:
    ready = ThreeSteps.start(order_id=1)
    paused = ThreeSteps.start(order_id=2)
    paused.pause()
    engine.redis.flushdb()  # the step jobs were lost with Redis
    sql(engine, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '1 hour',"
                " enqueued_at = now() - interval '1 hour'")
    report = sweep(engine)
    assert report.resent == 1
    work(engine)
    assert ready.refresh().status == "finished"
    assert paused.refresh().status == "paused"
    assert sweep(engine).resent == 0


@pytest.mark.scale  # 1,200 paused runs
def test_a_lost_step_behind_many_paused_runs_is_resent_in_one_sweep(engine: Engine) -> None:
    """A run paused while ready keeps its scheduled step, due long ago. 1,200 of them come first in
    the overdue part's order (more than two pages): one sweep still reaches the lost step after them."""
    sql(engine, """
        INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by)
        SELECT md5('p' || i)::uuid, 'ThreeSteps', 'paused', 'reserve', 'x', 'seed' FROM generate_series(1, 1200) i""")
    sql(engine, """
        INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                          enqueued_at)
        SELECT md5('p' || i)::uuid, 'ThreeSteps', 'reserve', 1, 'scheduled', now() - interval '2 hours',
               now() - interval '2 hours' FROM generate_series(1, 1200) i""")
    lost = ThreeSteps.start(order_id=1)
    engine.redis.flushdb()  # its step job was lost with Redis
    sql(engine, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '1 hour',"
                " enqueued_at = now() - interval '1 hour' WHERE workflow_id = %s", lost.workflow_id)
    assert sweep(engine).resent == 1
    work(engine)
    assert lost.refresh().status == "finished"


def test_sweep_stalled_attempt_then_resume_and_late_completion(engine: Engine) -> None:
    run = Sleeps.start(seconds=0)
    claim = runner.claim_attempt(engine, run.latest_step["id"], None)  # type: ignore[index]
    assert claim is not None
    sql(engine, "UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second'")
    assert sweep(engine).stalled == 1
    run.refresh()
    assert run.status == "paused"
    step = run.steps()[0]
    assert (step["status"], step["error_class"]) == ("failed", "pgbus_flask.errors.StepStalled")
    assert "stall_detected" in [e["event"] for e in run.events()]
    runner.record_outcome(engine, claim, result="woke")  # the dead attempt finishes late
    assert run.events()[-1]["event"] == "late_completion_ignored"
    assert run.refresh().status == "paused"
    run.resume()
    work(engine)
    assert run.refresh().status == "finished"


@pytest.mark.settings(PGBUS_RETENTION=60)
def test_sweep_deletes_old_terminal_runs_with_their_rows(engine: Engine) -> None:
    old = ThreeSteps.start(order_id=1)
    work(engine)
    recent = ThreeSteps.start(order_id=2)
    work(engine)
    ongoing = ThreeSteps.start(order_id=3)
    sql(engine, "UPDATE pgbus_workflows SET updated_at = now() - interval '2 hours' WHERE workflow_id = ANY(%s)",
        [old.workflow_id, ongoing.workflow_id])
    assert sweep(engine).deleted_runs == 1
    with engine.db.connection() as conn:
        left = {r[0] for r in conn.execute("SELECT workflow_id FROM pgbus_workflows")}
        orphans = conn.execute("SELECT count(*) FROM pgbus_workflow_steps WHERE workflow_id = %s",
                               (old.workflow_id,)).fetchone()[0]  # type: ignore[index]
    assert left == {recent.workflow_id, ongoing.workflow_id}
    assert orphans == 0


def test_a_second_sweeper_does_nothing_while_the_lock_is_held(engine: Engine) -> None:
    with engine.db.connection() as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (SWEEP_LOCK,))
        try:
            assert sweep(engine).ran is False
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (SWEEP_LOCK,))
    assert sweep(engine).ran is True


def test_runs_list_narrows_to_one_attention_group(engine: Engine) -> None:
    from pgbus_flask import Workflow, step

    class FailsTwoWays(Workflow):
        @step
        def capture(self) -> None:
            raise (TimeoutError if self.kwargs["timeout"] else ValueError)("no")

    timeouts = [FailsTwoWays.start(timeout=True) for _ in range(2)]
    FailsTwoWays.start(timeout=False)
    work(engine)
    group = queries.RunFilter(workflow_class="FailsTwoWays", reason="paused_error", error_class="TimeoutError")
    rows, _ = queries.list_runs(engine, group)
    assert {r["workflow_id"] for r in rows} == {r.workflow_id for r in timeouts}
    rows, _ = queries.list_runs(engine, queries.RunFilter(workflow_class="FailsTwoWays", reason="paused_error"))
    assert len(rows) == 3
