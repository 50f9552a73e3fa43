"""What a person must see, stored on the run row at every transition, and the counts of runs.

Each test drives the engine through one kind of transition and reads the run's
attention columns (the stuck reason it has or will have once its time passes,
since when, its latest step and that step's error class) and the counts the
overview shows. ``agree`` also checks that recomputing every run's columns from
scratch would change nothing, and that the counts table sums to the runs.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pgbus_flask import attention, queries, runner, states
from pgbus_flask.definition import ReattemptRequested
from pgbus_flask.engine import Engine
from pgbus_flask.handle import Run
from pgbus_flask.migrate import migrations
from pgbus_flask.sweep import sweep
from pgbus_flask.testing import wait_until
from tests.proc_workflows import FansOutForever
from tests.support import procs, work
from tests.support.webtools import work_some
from tests.workflows import (
    CancelsOnError,
    FailsUntil,
    FansOut,
    PausesItself,
    Reattempts,
    ShortWaitContinue,
    SkipsOnError,
    Sleeps,
    ThreeSteps,
    WaitsForever,
    WaitsForPayment,
)


class Rollback(Exception):
    pass


def stored(run: Run) -> dict[str, Any]:
    """The run's attention columns, with its latest step and paused_at to compare them to."""
    run.refresh()
    row = run.row
    return {"reason": row["attention_reason"], "since": row["attention_since"], "step_id": row["attention_step_id"],
            "error_class": row["attention_error_class"]}


def agree(engine: Engine) -> None:
    """Recomputing every run's attention columns changes nothing, and the counts are the runs'."""
    with engine.db.connection() as conn:
        try:
            with conn.transaction():
                assert attention.refresh_all(conn) == 0, "a run's stored attention columns were out of date"
                raise Rollback
        except Rollback:
            pass
        runs = conn.execute("SELECT workflow_class, status, count(*) FROM pgbus_workflows GROUP BY 1, 2").fetchall()
    assert queries.status_counts(engine) == {(r[0], r[1]): r[2] for r in runs}


def test_ready_running_and_the_next_step(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=1)
    first = run.latest_step
    assert first is not None
    assert stored(run) == {"reason": "overdue", "since": first["scheduled_at"], "step_id": first["id"],
                           "error_class": None}
    claim = runner.claim_attempt(engine, first["id"], "job-1")
    assert claim is not None
    assert stored(run) == {"reason": None, "since": None, "step_id": None, "error_class": None}
    agree(engine)
    runner.record_outcome(engine, claim, result={"reserved": 1})
    second = run.refresh().latest_step
    assert second is not None and second["step_name"] == "charge"
    assert stored(run) == {"reason": "overdue", "since": second["scheduled_at"], "step_id": second["id"],
                           "error_class": None}
    work(engine)
    assert run.refresh().status == "finished"
    assert stored(run)["reason"] is None
    assert queries.status_counts(engine) == {("ThreeSteps", "finished"): 1}
    agree(engine)


def test_reschedule_and_run_now_move_the_due_time(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=1)
    later = datetime.now(timezone.utc) + timedelta(hours=3)
    run.reschedule(later)
    assert stored(run)["since"] == later
    run.run_now()
    assert stored(run)["since"] == run.latest_step["scheduled_at"] <= run.row["db_now"]  # type: ignore[index]
    agree(engine)


def test_paused_by_hand_by_an_error_by_a_stall_and_by_the_step(engine: Engine) -> None:
    manual = ThreeSteps.start(order_id=1)
    manual.pause(reason="customer called")
    errors = FailsUntil.start(fail_until=5)
    itself = PausesItself.start()
    stalled = Sleeps.start(seconds=0)
    assert runner.claim_attempt(engine, stalled.latest_step["id"], None) is not None  # type: ignore[index]
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second'"
                     " WHERE workflow_id = %s", (stalled.workflow_id,))
    work(engine)
    assert sweep(engine).stalled == 1

    assert stored(manual) == {"reason": "paused_manual", "since": manual.row["paused_at"],
                              "step_id": manual.latest_step["id"], "error_class": None}  # type: ignore[index]
    assert stored(errors) == {"reason": "paused_error", "since": errors.row["paused_at"],
                              "step_id": errors.latest_step["id"], "error_class": "TimeoutError"}  # type: ignore
    assert stored(itself)["reason"] == "paused_manual"
    assert stored(stalled)["reason"] == "stalled"
    assert stored(stalled)["error_class"] == states.STALLED_ERROR
    assert queries.stuck_reason_counts(engine) == {
        ("ThreeSteps", "paused_manual"): 1, ("FailsUntil", "paused_error"): 1,
        ("PausesItself", "paused_manual"): 1, ("Sleeps", "stalled"): 1}
    agree(engine)

    errors.resume(reason="gateway fixed")  # retry: ready again, due now
    assert stored(errors)["reason"] == "overdue"
    manual.cancel(reason="gone")
    assert stored(manual)["reason"] is None
    assert queries.stuck_reason_counts(engine) == {("PausesItself", "paused_manual"): 1, ("Sleeps", "stalled"): 1}
    agree(engine)


def test_a_paused_runs_attempt_that_fails_or_stalls_changes_its_reason(engine: Engine) -> None:
    run = Sleeps.start(seconds=0)
    claim = runner.claim_attempt(engine, run.latest_step["id"], None)  # type: ignore[index]
    assert claim is not None
    run.refresh().pause(reason="look first")
    assert stored(run)["reason"] == "paused_manual"
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second'"
                     " WHERE workflow_id = %s", (run.workflow_id,))
    assert sweep(engine).stalled == 1  # the run stays paused; its attempt is now a stalled one
    assert run.refresh().status == "paused"
    assert stored(run)["reason"] == "stalled"
    runner.record_outcome(engine, claim, result="late")  # late_completion_ignored: nothing moves
    assert stored(run)["reason"] == "stalled"
    agree(engine)


def test_error_policies_reattempt_cancel_and_skip(engine: Engine) -> None:
    reattempts = Reattempts.start(fail_until=1)
    cancels = CancelsOnError.start()
    skips = SkipsOnError.start()
    work(engine)
    assert {r.refresh().status for r in (cancels, skips)} == {"cancelled", "finished"}
    assert stored(cancels)["reason"] is None and stored(skips)["reason"] is None
    assert reattempts.refresh().status in ("finished", "paused")
    agree(engine)


def test_waiting_on_a_signal_with_and_without_a_deadline_and_fan_out(engine: Engine) -> None:
    forever = WaitsForever.start()
    deadline = WaitsForPayment.start()
    fans = FansOut.start(n=2)
    work_some(engine, 4)  # each parks; the batch's two children stay queued
    forever.refresh()
    assert forever.status == "waiting"
    assert stored(forever) == {"reason": "waiting_overdue", "since": forever.latest_step["waiting_since"],
                               "step_id": forever.latest_step["id"], "error_class": None}  # type: ignore[index]
    assert deadline.refresh().status == "waiting" and stored(deadline)["reason"] is None  # its deadline acts
    # A fan-out has no deadline either: children that never finish leave it waiting for ever (the reference's
    # rule; before migration 0007 such a run was never surfaced).
    fans.refresh()
    assert fans.status == "waiting" and fans.latest_step["batch_id"] is not None  # type: ignore[index]
    assert stored(fans) == {"reason": "waiting_overdue", "since": fans.latest_step["waiting_since"],  # type: ignore
                            "step_id": fans.latest_step["id"], "error_class": None}  # type: ignore[index]
    agree(engine)

    forever.signal("go", {"ok": 1})  # delivered: ready, due now
    assert stored(forever)["reason"] == "overdue"
    forever.pause()
    forever.resume()
    work(engine)
    assert {r.refresh().status for r in (forever, deadline, fans)} == {"finished", "waiting"}
    assert stored(forever)["reason"] is None
    agree(engine)


def test_keep_waiting_after_a_pause_and_a_wait_that_times_out(engine: Engine) -> None:
    run = WaitsForever.start()
    late = ShortWaitContinue.start()
    work(engine)
    run.refresh().pause()
    assert stored(run)["reason"] == "paused_manual"
    assert run.resume().action == "keep_waiting"
    assert stored(run)["reason"] == "waiting_overdue"
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflow_steps SET timeout_at = now() - interval '1 second'"
                     " WHERE workflow_id = %s", (late.workflow_id,))
    assert sweep(engine).wait_timeouts == 1  # on_timeout="continue": ready again
    assert stored(late)["reason"] == "overdue"
    agree(engine)


def test_skip_rerun_and_resume_at(engine: Engine) -> None:
    run = FailsUntil.start(fail_until=9)
    work(engine)
    run.refresh().skip(reason="done by hand")
    assert stored(run)["reason"] == "overdue" and run.current_step == "notify"
    work(engine)
    assert run.refresh().status == "finished"
    run.rerun(reason="again")
    assert stored(run)["reason"] == "overdue"
    run.resume_at("notify")
    assert stored(run)["step_id"] == run.latest_step["id"]  # type: ignore[index]
    assert queries.status_counts(engine) == {("FailsUntil", "ready"): 1}
    agree(engine)


@pytest.mark.settings(PGBUS_RETENTION=60)
def test_counts_follow_retention_a_rename_by_hand_and_the_fold(engine: Engine) -> None:
    done = [ThreeSteps.start(order_id=i) for i in range(3)]
    work(engine)
    FailsUntil.start(fail_until=9)
    work(engine)
    assert queries.status_counts(engine) == {("ThreeSteps", "finished"): 3, ("FailsUntil", "paused"): 1}
    with engine.db.connection() as conn:
        rows = conn.execute("SELECT count(*) FROM pgbus_run_counts").fetchone()[0]  # type: ignore[index]
        assert rows > 3  # one row per change since the last fold
        conn.execute("UPDATE pgbus_workflows SET updated_at = now() - interval '2 hours' WHERE workflow_id = %s",
                     (done[0].workflow_id,))
        conn.execute("UPDATE pgbus_workflows SET workflow_class = 'Renamed' WHERE workflow_id = %s",
                     (done[1].workflow_id,))
    report = sweep(engine)
    assert report.deleted_runs == 1 and report.counts_folded > 0
    assert queries.status_counts(engine) == {("ThreeSteps", "finished"): 1, ("Renamed", "finished"): 1,
                                             ("FailsUntil", "paused"): 1}
    assert queries.stuck_reason_counts(engine) == {("FailsUntil", "paused_error"): 1}
    with engine.db.connection() as conn:
        keys = conn.execute("SELECT workflow_class, status, step, attention_reason, error_class, runs"
                            " FROM pgbus_run_counts ORDER BY 1, 2").fetchall()
    assert keys == [("FailsUntil", "paused", "capture", "paused_error", "TimeoutError", 1),
                    ("Renamed", "finished", "", "", "", 1), ("ThreeSteps", "finished", "", "", "", 1)]
    assert sweep(engine).counts_folded == 0  # nothing left to fold
    agree(engine)


def test_two_workers_finishing_runs_of_one_class_do_not_wait_for_each_other(engine: Engine) -> None:
    """The counts are rows added, never one row updated: two open transactions that finish runs of
    the same class both go ahead (a shared counter row would make the second wait for the first)."""
    runs = [ThreeSteps.start(order_id=i) for i in range(2)]
    url = engine.settings.database_url
    assert url
    first = psycopg.connect(url)
    second = psycopg.connect(url)
    try:
        first.execute("UPDATE pgbus_workflows SET status = 'finished', finished_at = now() WHERE workflow_id = %s",
                      (runs[0].workflow_id,))
        second.execute("SET lock_timeout = '2s'")
        second.execute("UPDATE pgbus_workflows SET status = 'finished', finished_at = now() WHERE workflow_id = %s",
                       (runs[1].workflow_id,))  # would raise LockNotAvailable if it waited for the first
        second.commit()
        first.commit()
    finally:
        first.close()
        second.close()
    assert queries.status_counts(engine) == {("ThreeSteps", "finished"): 2}


def test_attention_reads_agree_with_the_counts_under_concurrent_transitions(engine: Engine) -> None:
    """Several threads pause, resume and cancel runs at once; then the counts equal the runs."""
    runs = [FailsUntil.start(fail_until=9) for _ in range(12)]
    work(engine)
    errors: list[BaseException] = []

    def churn(mine: list[Run]) -> None:
        try:
            for run in mine:
                run.refresh().resume()
                run.refresh().pause()
                run.refresh().cancel()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(runs[i::3],)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert queries.status_counts(engine) == {("FailsUntil", "cancelled"): 12}
    assert queries.stuck_reason_counts(engine) == {}
    agree(engine)
    sweep(engine)
    with engine.db.connection() as conn:
        left = Counter(conn.execute("SELECT workflow_class, status FROM pgbus_run_counts").fetchall())
    assert left == Counter({("FailsUntil", "cancelled"): 1})


def test_migrate_refresh_attention_repairs_what_an_older_worker_left(app: Any) -> None:
    """A process of a version before migration 0004 moves runs without keeping their attention
    columns; ``flask pgbus migrate --refresh-attention`` recomputes them once everything is rolled."""
    from tests.support.webtools import engine_of

    engine = engine_of(app)
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        done = ThreeSteps.start(order_id=1)
        work(engine)
    with engine.db.connection() as conn:  # what an older worker's pause left: no attention columns
        conn.execute("UPDATE pgbus_workflows SET attention_reason = NULL, attention_since = NULL,"
                     " attention_step_id = NULL, attention_error_class = NULL WHERE workflow_id = %s",
                     (run.workflow_id,))
        # and a run it finished still marked as its ready step, long overdue
        conn.execute("UPDATE pgbus_workflows SET attention_reason = 'overdue', attention_since = now() - interval"
                     " '1 day' WHERE workflow_id = %s", (done.workflow_id,))
    assert queries.stuck_reason_counts(engine) == {("ThreeSteps", "overdue"): 1}
    result = app.test_cli_runner().invoke(args=["pgbus", "migrate", "--refresh-attention"])
    assert result.exit_code == 0, result.output
    assert "schema is up to date" in result.output and "2 runs changed" in result.output
    assert queries.stuck_reason_counts(engine) == {("FailsUntil", "paused_error"): 1}
    agree(engine)


def test_paused_error_is_a_latest_step_that_failed_whatever_it_failed_with(engine: Engine) -> None:
    """The reference's rule: a paused run whose latest step failed is paused_error, with an error class or
    without one; a step that asked for its own pause, or for a reattempt while the run was paused, did not
    fail (paused_manual)."""
    failed = FailsUntil.start(fail_until=9)
    itself = PausesItself.start()
    asked = Reattempts.start(fail_until=0)
    claim = runner.claim_attempt(engine, asked.latest_step["id"], None)  # type: ignore[index]
    assert claim is not None
    asked.refresh().pause(reason="look first")
    runner.record_outcome(engine, claim, request=ReattemptRequested(0))  # asks for a reattempt while paused
    work(engine)
    assert asked.refresh().status == "paused" and asked.latest_step["outcome"] == "reattempted"  # type: ignore
    assert stored(asked)["reason"] == "paused_manual"
    assert stored(itself)["reason"] == "paused_manual"
    assert stored(failed)["reason"] == "paused_error"
    with engine.db.connection() as conn:  # a failure with no error class (a row an older version wrote)
        conn.execute("UPDATE pgbus_workflow_steps SET error_class = NULL WHERE workflow_id = %s",
                     (failed.workflow_id,))
        assert attention.refresh_all(conn) == 1
    assert stored(failed) == {"reason": "paused_error", "since": failed.row["paused_at"],
                              "step_id": failed.latest_step["id"], "error_class": None}  # type: ignore[index]
    assert queries.stuck_reason_counts(engine) == {("FailsUntil", "paused_error"): 1,
                                                   ("PausesItself", "paused_manual"): 1,
                                                   ("Reattempts", "paused_manual"): 1}
    [group] = [g for g in queries.attention_groups(engine) if g.reason == "paused_error"]
    assert (group.workflow_class, group.error_class, group.count) == ("FailsUntil", None, 1)
    assert queries.attention_ids(engine, "FailsUntil", "capture", "paused_error", None) == [failed.workflow_id]
    agree(engine)


def test_migration_0007_brings_what_the_old_rules_stored_up_to_date(engine: Engine) -> None:
    """Runs stored under the rules of 0004 (a fan-out never waiting_overdue, a failure without an error
    class paused_manual) get the new reasons when 0007 is applied, and the counts follow."""
    fans = FansOut.start(n=2)
    failed = FailsUntil.start(fail_until=9)
    work_some(engine, 2)  # the fan-out parks; its children stay queued
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflow_steps SET error_class = NULL WHERE workflow_id = %s",
                     (failed.workflow_id,))
        conn.execute("UPDATE pgbus_workflows SET attention_reason = NULL, attention_since = NULL,"
                     " attention_step_id = NULL WHERE workflow_id = %s", (fans.workflow_id,))
        conn.execute("UPDATE pgbus_workflows SET attention_reason = 'paused_manual', attention_error_class = NULL"
                     " WHERE workflow_id = %s", (failed.workflow_id,))
    assert queries.stuck_reason_counts(engine) == {("FailsUntil", "paused_manual"): 1}
    [sql_0007] = [text for version, text in migrations() if version.startswith("0007")]
    current = function_text(engine, "pgbus_workflow_attention")
    try:
        with engine.db.connection() as conn:
            conn.execute(sql_0007.encode())
        assert stored(fans)["reason"] == "waiting_overdue" and stored(failed)["reason"] == "paused_error"
        assert queries.stuck_reason_counts(engine) == {("FailsUntil", "paused_error"): 1}
    finally:
        # 0007's function knows nothing of later migrations (a run in line for a slot, 0017): put
        # today's back, or every later test of this session's database reads the old rules (the model
        # test saw runs in line with no attention when it ran after this one in the same process)
        with engine.db.connection() as conn:
            conn.execute(current.encode())
    assert function_text(engine, "pgbus_workflow_attention") == current
    agree(engine)


def function_text(engine: Engine, name: str) -> str:
    """A function's definition as PostgreSQL prints it (a CREATE OR REPLACE statement)."""
    with engine.db.connection() as conn:
        row = conn.execute("SELECT pg_get_functiondef(%s::regproc)", (name,)).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.slow  # starts a process
@pytest.mark.settings(PGBUS_WAITING_THRESHOLD=1)
def test_a_fan_out_whose_children_never_finish_needs_attention(engine: Engine, pg_url: str, redis_url: str,
                                                             tmp_path: Path) -> None:
    """With a real worker: the step opens its batch, the worker takes a child that never returns, and
    once the run has waited longer than PGBUS_WAITING_THRESHOLD it is waiting_overdue in every read
    the dashboard makes (counts, groups, the group's runs, the runs list); a bulk cancel ends it."""
    marker = tmp_path / "child.pid"
    run = FansOutForever.start(marker=str(marker), n=3, subject=("Order", 7))
    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
        wait_until(marker.exists, timeout=30, message="a child running")
        assert int(marker.read_text()) == ws[0].pid
        assert run.refresh().status == "waiting"
        assert stored(run)["reason"] == "waiting_overdue"  # stored when it parked, counted once it is late
        wait_until(lambda: queries.stuck_reason_counts(engine) == {("FansOutForever", "waiting_overdue"): 1},
                   timeout=10, message="the run counted as waiting too long")
        [group] = queries.attention_groups(engine)
        assert (group.workflow_class, group.step_name, group.reason, group.error_class, group.count) == (
            "FansOutForever", "fan", "waiting_overdue", None, 1)
        assert queries.attention_ids(engine, "FansOutForever", "fan", "waiting_overdue", None) == [run.workflow_id]
        rows, _ = queries.list_runs(engine, queries.RunFilter(reason="waiting_overdue"))
        assert [r["workflow_id"] for r in rows] == [run.workflow_id]
        [batch] = run.batches()
        assert (batch["status"], batch["done"], batch["failed"]) == ("open", 0, 0)  # no child finished

        result = queries.bulk_act(engine, "cancel", group.key(), actor="cli:ops", reason="vendors never answer")
        assert (result.moved, result.refused) == (1, 0)
        assert run.refresh().status == "cancelled"
        assert queries.stuck_reason_counts(engine) == {} and queries.attention_groups(engine) == []
        ws[0].kill()  # its child would sleep a minute more
    agree(engine)
