"""Signals, waits with timeouts, and fan-out batches."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from pgbus_flask import ActionNotAllowed, SignalRefused, Workflow, runner
from pgbus_flask.engine import Engine
from pgbus_flask.queries import batch_progress
from pgbus_flask.sweep import sweep
from tests.support import work
from tests.workflows import FansOut, ShortWait, ShortWaitContinue, ShortWaitSkip, WaitsForever, WaitsForPayment


def expire_waits(engine: Engine) -> None:
    """Move every wait deadline into the past (instead of sleeping through it)."""
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflow_steps SET timeout_at = now() - interval '1 second'"
                     " WHERE status = 'waiting' AND timeout_at IS NOT NULL")


def test_signal_arriving_during_the_wait(engine: Engine) -> None:
    run = WaitsForPayment.start(subject=("Order", 7))
    work(engine)
    run.refresh()
    assert (run.status, run.current_step) == ("waiting", "confirm")
    step = run.steps()[-1]
    assert step["status"] == "waiting" and step["waiting_since"] and step["timeout_at"]
    sent = run.signal("payment_confirmed", {"amount": "10.00"}, idempotency_key="pi_1", actor="stripe")
    assert not sent.duplicate_delivery and sent.status == "claimed"
    assert run.status == "ready"
    work(engine)
    run.refresh()
    assert run.status == "finished"
    assert run.outputs()["confirm"] == {"paid": {"amount": "10.00"}, "signal": "payment_confirmed"}
    assert [s["status"] for s in run.signals()] == ["consumed"]
    names = [e["event"] for e in run.events()]
    for event in ("step_waiting", "signal_received", "signal_claimed", "step_completed", "finished"):
        assert event in names


def test_signal_buffered_before_the_wait(engine: Engine) -> None:
    run = WaitsForPayment.start()
    early = run.signal("payment_confirmed", {"n": 1})
    later = run.signal("payment_confirmed", {"n": 2})
    assert early.status == later.status == "pending"
    work(engine)
    run.refresh()
    assert run.status == "finished"
    assert run.outputs()["confirm"]["paid"] == {"n": 1}  # the oldest pending one
    assert [s["status"] for s in run.signals()] == ["consumed", "pending"]


def test_duplicate_signal_key_stores_nothing(engine: Engine) -> None:
    run = WaitsForever.start()
    first = run.signal("go", {"v": 1}, idempotency_key="k1")
    again = run.signal("go", {"v": 2}, idempotency_key="k1")
    assert again.duplicate_delivery and again.id == first.id and again.payload == {"v": 1}
    assert len(run.signals()) == 1
    assert [e["event"] for e in run.events()].count("signal_received") == 1


def test_signal_refusals(engine: Engine) -> None:
    run = WaitsForever.start()
    with pytest.raises(SignalRefused, match="payload"):
        run.signal("go", {"when": object()})
    with pytest.raises(SignalRefused, match="signal name"):
        run.signal("")
    assert run.signals() == []
    run.cancel()
    with pytest.raises(ActionNotAllowed, match="signals go only to ongoing runs"):
        run.signal("go")


def test_claimed_signal_stays_with_the_step_across_a_failure_and_resume(engine: Engine) -> None:
    from pgbus_flask import Workflow, step

    class FailsOnceAfterSignal(Workflow):
        @step(wait_for="go")
        def use(self) -> object:
            assert self.received_signal is not None
            if self.attempt == 1:
                raise RuntimeError("downstream down")
            return self.received_signal.payload

    run = FailsOnceAfterSignal.start()
    run.signal("go", {"x": 1})
    work(engine)
    run.refresh()
    assert run.status == "paused"
    assert [s["status"] for s in run.signals()] == ["claimed"]
    run.resume()
    work(engine)
    assert run.refresh().status == "finished"
    assert run.outputs()["use"] == {"x": 1}
    assert [s["status"] for s in run.signals()] == ["consumed"]


@pytest.mark.parametrize(
    ("klass", "status", "outcome"),
    [(ShortWait, "paused", "WaitTimedOut"), (ShortWaitSkip, "finished", "skipped"),
     (ShortWaitContinue, "finished", "ran without signal")],
)
def test_wait_timeouts(engine: Engine, klass: type, status: str, outcome: str) -> None:
    run = klass.start()
    work(engine)
    assert run.refresh().status == "waiting"
    expire_waits(engine)
    report = sweep(engine)
    assert report.wait_timeouts == 1
    work(engine)
    run.refresh()
    assert run.status == status
    assert "wait_timed_out" in [e["event"] for e in run.events()]
    first = run.steps()[0]
    if outcome == "WaitTimedOut":
        assert first["error_class"] == "pgbus_flask.errors.WaitTimedOut"
    elif outcome == "skipped":
        assert first["status"] == "skipped"
    else:
        assert run.outputs()[first["step_name"]] == outcome


@pytest.mark.scale  # 1,200 paused runs
def test_a_wait_that_ends_behind_many_paused_waits_is_timed_out_and_each_sweep_reads_a_bounded_range(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run paused while it waited keeps its waiting step past the deadline. 1,200 of them come first
    in the expired-wait part's order (more than two pages): one sweep still ends the wait due after
    them, and a sweep reads at most PAGES pages of them, however many there are."""
    from pgbus_flask import sweep as sweep_module

    with engine.db.connection() as conn:
        conn.execute("""
            INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest,
                                         started_by)
            SELECT md5('w' || i)::uuid, 'WaitsForPayment', 'paused', 'confirm', 'x', 'seed'
            FROM generate_series(1, 1200) i""")
        conn.execute("""
            INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                              waiting_since, timeout_at)
            SELECT md5('w' || i)::uuid, 'WaitsForPayment', 'confirm', 1, 'waiting', now() - interval '3 hours',
                   now() - interval '3 hours', now() - interval '2 hours' FROM generate_series(1, 1200) i""")
    run = ShortWait.start()
    work(engine)
    expire_waits(engine)  # its deadline passed a second ago: after the 1,200 in (timeout_at, id) order
    read: list[int] = []
    real_ids = sweep_module._ids

    def counting(engine: Engine, part: str, params: object = ()) -> list[tuple[object, ...]]:
        rows = real_ids(engine, part, params)  # type: ignore[arg-type]
        if part == "expired_waits":
            read.append(len(rows))
        return rows

    monkeypatch.setattr(sweep_module, "_ids", counting)
    assert sweep(engine).wait_timeouts == 1
    assert read == [500, 500, 201]
    read.clear()
    assert sweep(engine).wait_timeouts == 0  # from the start again: the paused ones, a sweep's worth at most
    assert sum(read) <= sweep_module.PAGES * sweep_module.BATCH and read == [500, 500, 200]
    work(engine)
    assert run.refresh().status == "paused" and "wait_timed_out" in [e["event"] for e in run.events()]


def test_paused_wait_does_not_time_out_and_resume_keeps_the_time_left(engine: Engine) -> None:
    run = WaitsForPayment.start()
    work(engine)
    run.refresh().pause(reason="fraud check")
    expire_waits(engine)
    assert sweep(engine).wait_timeouts == 0
    assert run.refresh().status == "paused"
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflow_steps SET timeout_at = now() + interval '10 minutes'"
                     " WHERE workflow_id = %s AND status = 'waiting'", (run.workflow_id,))
        conn.execute("UPDATE pgbus_workflows SET paused_at = now() - interval '1 hour' WHERE workflow_id = %s",
                     (run.workflow_id,))
    run.resume()
    assert run.status == "waiting"
    step = run.steps()[-1]
    left = (step["timeout_at"] - datetime.now(timezone.utc)).total_seconds()
    assert 3600 + 500 < left < 3600 + 700  # 10 minutes left plus the hour spent paused


def test_signal_during_pause_is_buffered_and_delivered_on_resume(engine: Engine) -> None:
    run = WaitsForPayment.start()
    work(engine)
    run.refresh().pause()
    assert run.signal("payment_confirmed", {"ok": True}).status == "pending"
    assert run.status == "paused"
    run.resume()
    assert run.status == "ready"
    work(engine)
    assert run.refresh().status == "finished"


def progress(engine: Engine, batch_id: int) -> tuple[int, int, int]:
    found = batch_progress(engine, batch_id)
    assert found is not None
    batch, _children = found
    return batch["done"], batch["failed"], batch["total"]


def test_fan_out_of_twelve_with_one_failure_fails_the_step(engine: Engine) -> None:
    run = FansOut.start(n=12, fail_at=7)
    work(engine, [engine.settings.queue])  # the step runs; children are queued on the same queue
    run.refresh()
    batch_id = run.steps()[0]["batch_id"]
    assert run.status in ("waiting", "paused")
    work(engine)
    run.refresh()
    assert progress(engine, batch_id) == (11, 1, 12)
    assert run.status == "paused"
    step = run.steps()[0]
    assert step["error_class"] == "pgbus_flask.errors.ChildJobFailed"
    assert "#7" in step["error_message"] and "vendor 7 is down" in step["error_message"]
    names = [e["event"] for e in run.events()]
    assert "fan_out_opened" in names and "fan_out_finished" in names


def test_fan_out_progress_along_the_way_and_ignore_policy(engine: Engine) -> None:
    run = FansOut.start(n=12, fail_at=7, on_child_failure="ignore")
    claim = runner.claim_attempt(engine, run.latest_step["id"], None)  # type: ignore[index]
    assert claim is not None
    fan_out = run_context(engine, claim).fan_out("tests.workflows.vendor_child", [(i, 7) for i in range(12)],
                                         on_child_failure="ignore")
    runner.record_outcome(engine, claim, result=fan_out)
    batch_id = run.steps()[0]["batch_id"]
    # Run the children one by one through the job function and watch progress.
    from pgbus_flask.jobs import run_child

    for position in range(12):
        run_child(batch_id, position)
        done, failed, total = progress(engine, batch_id)
        assert (done + failed, total) == (position + 1, 12)
        if position == 6:
            assert run.refresh().status == "waiting"
    assert progress(engine, batch_id) == (11, 1, 12)
    run_child(batch_id, 3)  # a redelivered child changes nothing
    assert progress(engine, batch_id) == (11, 1, 12)
    work(engine)
    run.refresh()
    assert run.status == "finished"
    output = run.outputs()["notify_vendors"]
    assert (output["done"], output["failed"], output["total"]) == (11, 1, 12)
    assert output["results"][0] == "vendor 0 notified" and output["results"][7] is None
    assert run.outputs()["summarize"] == 11


def run_context(engine: Engine, claim: runner.Claim) -> Workflow:
    """A step context for a claim, to call Workflow.fan_out with."""
    return claim.klass(engine=engine, workflow_id=claim.run["workflow_id"], args=(), kwargs={},
                       subject=None, attempt=1, step_name="notify_vendors", outputs={})


def test_cancelling_a_fanned_out_run_closes_its_batch(engine: Engine) -> None:
    run = FansOut.start(n=3)
    step_row = run.steps()[0]
    runner.run_attempt(engine, step_row["id"], None)
    assert run.refresh().status == "waiting"
    run.cancel(reason="order withdrawn")
    [batch] = run.batches()
    assert batch["status"] == "finished"
    work(engine)  # the queued children find their step cancelled and do nothing
    found = batch_progress(engine, batch["id"])
    assert found is not None and [c["status"] for c in found[1]] == ["pending"] * 3
    # Nothing awaits them any more: the sweep's lost-children read (pgbus_batch_children_awaited_enqueued)
    # leaves them out, however long ago they were sent.
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_batch_children SET enqueued_at = now() - interval '1 day' WHERE batch_id = %s",
                     (batch["id"],))
        awaited = conn.execute("SELECT array_agg(awaited ORDER BY position) FROM pgbus_batch_children"
                               " WHERE batch_id = %s", (batch["id"],)).fetchone()
    assert awaited == ([False] * 3,)
    report = sweep(engine)
    assert (report.children_failed, report.children_resent) == (0, 0)
