"""A backlog never feeds itself: the sweep resends only what Redis has lost.

The overdue part of the sweep asks RQ about each overdue step's job before it
resends anything: a step that merely waits its turn in a long queue keeps its
one job; a job deleted from Redis, dropped from its queue, failed, or scheduled
with no scheduler to move it is sent again, under a new job id, with the earlier
copy withdrawn; a step whose job keeps getting lost is resent less and less often.
Real PostgreSQL, Redis and ``pgbus-worker`` processes (the ones marked slow).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from rq import Queue, SimpleWorker, Worker
from rq.intermediate_queue import IntermediateQueue
from rq.job import Job, JobStatus
from rq.utils import utcformat

from pgbus_flask import runner
from pgbus_flask.engine import Engine
from pgbus_flask.rq_state import LIVE, job_statuses
from pgbus_flask.sweep import SweepReport, sweep
from pgbus_flask.testing import wait_until
from tests.support import procs, work
from tests.support.procs import (
    assert_one_completed_attempt_per_step,
    job_counts,
    jobs_that_claimed,
    rows,
    scalar,
    wait_finished,
)
from tests.workflows import FansOut, FiveNoop, ThreeSteps


def steps_overdue_by(engine: Engine, seconds: float, where: str = "status = 'scheduled'") -> None:
    """Wait until every step matching ``where`` was due and sent more than ``seconds`` ago (database clock)."""
    wait_until(lambda: scalar(engine, "SELECT bool_and(scheduled_at < now() - make_interval(secs => %s)"
                                      " AND enqueued_at < now() - make_interval(secs => %s))"
                                      f" FROM pgbus_workflow_steps WHERE {where}", (seconds, seconds)),
               timeout=30, interval=0.1, message=f"steps overdue by {seconds}s")


def scheduled_steps(engine: Engine) -> list[dict[str, Any]]:
    return rows(engine, "SELECT * FROM pgbus_workflow_steps WHERE status = 'scheduled' ORDER BY id")


def queued_ids(engine: Engine) -> list[str]:
    return engine.queue(engine.settings.queue).get_job_ids()


@contextmanager
def sweeping(engine: Engine, interval: float = 0.5) -> Iterator[list[SweepReport]]:
    """The sweep every ``interval`` seconds in a thread of this process; yields the reports of
    the sweeps that ran."""
    reports: list[SweepReport] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval):
            report = sweep(engine)
            if report.ran:
                reports.append(report)

    thread = threading.Thread(target=loop, name="test-sweeper", daemon=True)
    thread.start()
    try:
        yield reports
    finally:
        stop.set()
        thread.join(30)


# -- the process tests ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("inline", ["0", "20"], ids=["one step a job", "inline continuation"])
@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_a_backlog_many_times_the_threshold_drains_with_no_resend_and_no_extra_job(
        engine: Engine, pg_url: str, redis_url: str, tmp_path: Path, inline: str) -> None:
    """300 runs start before any worker: their first steps wait 3 s and more, three times the
    stall threshold, and the whole backlog takes several thresholds to drain, while the sweep
    runs every half second. Nothing is resent and every job the workers ran claimed an attempt:
    with one step a job, that is one job per attempt (1,500 for 1,500)."""
    for _ in range(300):
        FiveNoop.start()
    steps_overdue_by(engine, 3)
    with sweeping(engine) as reports:
        wait_until(lambda: reports, timeout=30, message="a sweep over the overdue backlog")
        assert reports[0].overdue_live == 300 and reports[0].resent == 0, reports[0]
        env = {"PGBUS_STALL_THRESHOLD": "1", "PGBUS_INLINE_STEPS": inline}
        with procs.workers(pg_url, redis_url, tmp_path, 2, env=env) as ws:
            wait_finished(engine, 300, ws, timeout=120)
            names = [w.name for w in ws]
            wait_until(lambda: job_counts(engine.redis, names) == (jobs_that_claimed(engine), 0), timeout=10,
                       message="RQ counted as many jobs as claimed attempts")
    assert len(reports) >= 3, reports  # the sweep ran all along the drain
    assert sum(r.resent for r in reports) == 0, reports
    assert all(not r.errors for r in reports), reports
    assert_one_completed_attempt_per_step(engine, 300, 5)
    if inline == "0":
        assert jobs_that_claimed(engine) == 1500  # one job per attempt: none resent, none duplicated
    assert scalar(engine, "SELECT max(sends) FROM pgbus_workflow_steps") == 1


@pytest.mark.slow
@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_jobs_redis_lost_are_resent_and_the_rest_are_left_alone(
        engine: Engine, pg_url: str, redis_url: str, tmp_path: Path) -> None:
    """Of 20 queued first steps, one job is deleted from Redis, one dropped from its queue (its
    hash left saying queued), one failed in RQ: those three are resent, once, under new job
    ids; the 17 others keep their one job. The workers (one step a job) then run exactly one
    job per attempt."""
    runs = [FiveNoop.start() for _ in range(20)]
    steps = scheduled_steps(engine)
    assert [s["job_id"] for s in steps] == [f"pgbus-step-{s['id']}" for s in steps] == queued_ids(engine)
    deleted, dropped, failed = steps[3], steps[9], steps[15]
    Job.fetch(deleted["job_id"], connection=engine.redis).delete()
    engine.redis.lrem(engine.queue(engine.settings.queue).key, 0, dropped["job_id"])
    job = Job.fetch(failed["job_id"], connection=engine.redis)
    engine.queue(engine.settings.queue).remove(job)
    job.set_status(JobStatus.FAILED)
    assert len(queued_ids(engine)) == 17

    steps_overdue_by(engine, 1)
    first = sweep(engine)  # the job in no list is marked, as one a worker just popped would be
    assert (first.resent, first.overdue_live, first.errors) == (2, 18, []), first
    report = sweep(engine)  # still in no list at the next look: lost
    assert (report.resent, report.overdue_live, report.errors) == (1, 17, []), report
    lost = {s["id"] for s in (deleted, dropped, failed)}
    after = {s["id"]: s for s in scheduled_steps(engine)}
    for step_id in lost:
        assert (after[step_id]["sends"], after[step_id]["resends"]) == (2, 1)
        assert after[step_id]["job_id"] == f"pgbus-step-{step_id}-send2"
    assert all((s["sends"], s["resends"]) == (1, 0) for i, s in after.items() if i not in lost)
    queued = queued_ids(engine)
    assert len(queued) == 20 and sorted(queued) == sorted(s["job_id"] for s in after.values())
    assert not Job.exists(dropped["job_id"], connection=engine.redis)  # the orphaned hash is withdrawn
    assert Job.fetch(failed["job_id"], connection=engine.redis).get_status() == JobStatus.FAILED  # kept to debug
    assert sweep(engine).resent == 0  # just sent: not again

    with procs.workers(pg_url, redis_url, tmp_path, 2, env={"PGBUS_INLINE_STEPS": "0"}) as ws:
        wait_finished(engine, 20, ws, timeout=60)
        names = [w.name for w in ws]
        wait_until(lambda: job_counts(engine.redis, names) == (100, 0), timeout=10,
                   message="RQ counted one successful job per attempt")
    assert_one_completed_attempt_per_step(engine, 20, 5)
    assert all(r.refresh().status == "finished" for r in runs)


# -- the sweep's part alone (no worker) -----------------------------------------------------


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_a_step_whose_job_keeps_getting_lost_is_resent_less_and_less_often(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=7)

    def lose_and_sweep() -> SweepReport:
        [step] = scheduled_steps(engine)
        if Job.exists(step["job_id"], connection=engine.redis):  # not yet resent since it was lost
            Job.fetch(step["job_id"], connection=engine.redis).delete()
        return sweep(engine)

    steps_overdue_by(engine, 1)
    assert lose_and_sweep().resent == 1  # 1 x the threshold after the first send
    steps_overdue_by(engine, 1.2)
    assert lose_and_sweep().resent == 0  # the second resend waits 2 x the threshold
    steps_overdue_by(engine, 2)
    assert lose_and_sweep().resent == 1
    steps_overdue_by(engine, 3)
    assert lose_and_sweep().resent == 0  # then 4 x
    steps_overdue_by(engine, 4)
    assert sweep(engine).resent == 1
    [step] = scheduled_steps(engine)
    assert (step["sends"], step["resends"], step["job_id"]) == (4, 3, f"pgbus-step-{step['id']}-send4")
    assert queued_ids(engine) == [step["job_id"]]
    work(engine)
    assert run.refresh().status == "finished"


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_a_scheduled_job_no_scheduler_moves_is_resent_and_withdrawn(engine: Engine) -> None:
    """RQ's scheduled registry holds the step's job past its time by more than the threshold:
    no scheduler runs, so the sweep sends the step now and takes the stale copy out."""
    run = ThreeSteps.start(order_id=1)
    run.reschedule(datetime.now(timezone.utc) + timedelta(seconds=1), actor="test:backlog")
    [step] = scheduled_steps(engine)
    registry = engine.queue(engine.settings.queue).scheduled_job_registry
    assert registry.get_job_ids() == [step["job_id"]] and queued_ids(engine) == []

    steps_overdue_by(engine, 2)  # RQ's schedule holds it at the next whole second (engine.whole_second_after)
    report = sweep(engine)
    assert (report.resent, report.overdue_live) == (1, 0), report
    [resent] = scheduled_steps(engine)
    assert registry.get_job_ids() == [] and queued_ids(engine) == [resent["job_id"]]
    assert not Job.exists(step["job_id"], connection=engine.redis)
    work(engine)
    assert run.refresh().status == "finished"


def test_run_now_withdraws_the_step_s_scheduled_job(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=1)
    run.reschedule(datetime.now(timezone.utc) + timedelta(hours=1), actor="test:backlog")
    [later] = scheduled_steps(engine)
    registry = engine.queue(engine.settings.queue).scheduled_job_registry
    assert registry.get_job_ids() == [later["job_id"]]
    run.run_now(actor="test:backlog")
    [now] = scheduled_steps(engine)
    assert now["job_id"] == f"pgbus-step-{now['id']}-send3"  # start, reschedule, run_now
    assert registry.get_job_ids() == [] and queued_ids(engine) == [now["job_id"]]
    assert not Job.exists(later["job_id"], connection=engine.redis)
    work(engine)
    assert run.refresh().status == "finished"


def test_rq_state_tells_live_jobs_from_lost_ones(engine: Engine) -> None:
    """What ``job_statuses`` answers for each place a job can be, read from a real Redis."""
    queue = engine.queue(engine.settings.queue)
    redis = engine.redis

    def job(job_id: str, at: datetime | None = None) -> Job:
        if at is not None:
            return queue.enqueue_at(at, "tests.workflows.vendor_child", 1, job_id=job_id)
        return queue.enqueue("tests.workflows.vendor_child", 1, job_id=job_id)

    job("queued")
    job("dropped")
    redis.lrem(queue.key, 0, "dropped")  # the hash still says queued
    job("dequeued")
    redis.lmove(queue.key, f"{queue.key}:intermediate", "RIGHT", "RIGHT")  # a worker took it, not started yet
    job("deleted").delete()
    job("later", at=datetime.now(timezone.utc) + timedelta(hours=1))
    job("stale", at=datetime.now(timezone.utc) + timedelta(seconds=1))
    started = job("started")
    queue.remove(started)
    started.set_status(JobStatus.STARTED)
    failed = job("failed")
    queue.remove(failed)
    failed.set_status(JobStatus.FAILED)
    due = queue.scheduled_job_registry.get_scheduled_time("stale").timestamp()
    wait_until(lambda: time.time() > due + 1.2, timeout=10, message="the stale job over 1 s past its time")

    statuses = job_statuses(redis, ["queued", "dropped", "dequeued", "deleted", "later", "stale", "started",
                                    "failed", "never", None], stale_after=1)
    # "dropped" is in no list: a worker reading several queues may have popped it (BLPOP) and be
    # about to start it, so the first look marks it, as for "dequeued", and the next decides
    assert statuses == {"queued": JobStatus.QUEUED, "dropped": JobStatus.QUEUED, "dequeued": JobStatus.QUEUED,
                        "deleted": None, "later": JobStatus.SCHEDULED, "stale": None, "started": JobStatus.STARTED,
                        "failed": JobStatus.FAILED, "never": None}
    assert {k for k, v in statuses.items() if v in LIVE} == {"queued", "dropped", "dequeued", "later", "started"}
    again = job_statuses(redis, ["queued", "dropped", "dequeued"], stale_after=1)
    assert again == {"queued": JobStatus.QUEUED, "dropped": None, "dequeued": None}


def hold(engine: Engine, worker_name: str, *, start: bool = True) -> Job:
    """A real RQ worker named ``worker_name`` takes the next job of the default queue as far as RQ
    goes before the job's function runs (moved to the intermediate list, its execution in the
    started registry, and with ``start`` marked started for this worker), and stops there, as a
    worker killed at that moment would."""
    queue = engine.queue(engine.settings.queue)
    worker = SimpleWorker([queue], connection=engine.redis, name=worker_name)
    worker.register_birth()
    found = Queue.dequeue_any([queue], None, connection=engine.redis)
    assert found is not None
    job = found[0]
    worker.prepare_execution(job)
    if start:
        worker.prepare_job_execution(job, remove_from_intermediate_queue=True)
    return job


def silent_since(engine: Engine, job: Job, seconds: float) -> None:
    """The job's heartbeat as it would be ``seconds`` after its worker last gave one."""
    beat = datetime.now(timezone.utc) - timedelta(seconds=seconds)
    engine.redis.hset(job.key, "last_heartbeat", utcformat(beat))


def test_rq_state_tells_jobs_of_dead_workers_from_live_ones(engine: Engine) -> None:
    """A job RQ says started is live while the worker holding it lives: its key is there and, for a
    step job that has not claimed its step yet, its heartbeat is recent. A job only RQ's
    intermediate list holds is live the first time it is seen there, lost the next."""
    queue = engine.queue(engine.settings.queue)
    ids = ["alive", "gone", "silent", "dequeued"]
    for job_id in ids:
        queue.enqueue("tests.workflows.vendor_child", 1, job_id=job_id)
    jobs = {job_id: hold(engine, f"holder-of-{job_id}", start=job_id != "dequeued") for job_id in ids}
    assert [j.id for j in jobs.values()] == ids
    engine.redis.delete(Worker.redis_worker_namespace_prefix + "holder-of-gone")  # its key's TTL ran out
    silent_since(engine, jobs["silent"], 120)
    intermediate = IntermediateQueue(queue.key, engine.redis)
    assert intermediate.get_job_ids() == ["dequeued"] and "dequeued" in queue.started_job_registry

    children = job_statuses(engine.redis, ids, stale_after=60)
    assert children == {"alive": JobStatus.STARTED, "gone": JobStatus.FAILED, "silent": JobStatus.STARTED,
                        "dequeued": JobStatus.QUEUED}
    assert intermediate.get_first_seen("dequeued") is not None  # RQ's own mark, set by the first look
    steps = job_statuses(engine.redis, ids, stale_after=60, claims_at_start=True)
    assert steps == {"alive": JobStatus.STARTED, "gone": JobStatus.FAILED, "silent": JobStatus.FAILED,
                     "dequeued": None}
    assert {k for k, v in steps.items() if v in LIVE} == {"alive"}


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
@pytest.mark.parametrize("death", ["key expired", "silent", "dequeued"])
def test_a_step_whose_worker_died_before_the_claim_is_resent_once(engine: Engine, death: str) -> None:
    """The worker took the first step's job and died before the claim: its job stays started (or
    in RQ's intermediate list) in Redis. The sweep resends the step once (the first look at an
    intermediate job only marks it), not again on the following sweeps, and the run finishes
    with one completed attempt per step."""
    run = FiveNoop.start()
    job = hold(engine, "doomed", start=death != "dequeued")
    if death == "key expired":
        engine.redis.delete(Worker.redis_worker_namespace_prefix + "doomed")
    elif death == "silent":
        silent_since(engine, job, 2)  # a simple worker's key outlives it by its job's timeout
    steps_overdue_by(engine, 1)
    reports = [sweep(engine) for _ in range(4)]
    expected = [(1, 0), (0, 1), (0, 0), (0, 0)] if death == "dequeued" else [(0, 1), (0, 0), (0, 0), (0, 0)]
    assert [(r.overdue_live, r.resent) for r in reports] == expected, reports
    [first] = run.steps()
    assert (first["status"], first["sends"], first["resends"]) == ("scheduled", 2, 1)
    assert queued_ids(engine) == [first["job_id"]]
    if death == "dequeued":
        assert not Job.exists(job.id, connection=engine.redis)  # withdrawn: nothing will run it later
    work(engine)
    assert run.refresh().status == "finished"
    assert_one_completed_attempt_per_step(engine, 1, 5)
    assert scalar(engine, "SELECT sum(resends) FROM pgbus_workflow_steps") == 1


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_a_child_whose_worker_is_gone_is_recorded_lost_without_waiting_for_rq(engine: Engine) -> None:
    """A fan-out child started on a worker whose key then expired (it died): the sweep records it
    failed with ChildLost once, as RQ's cleanup would much later; a child running long on a live
    worker (an old heartbeat, its key there) is left alone."""
    run = FansOut.start(n=2)
    first = run.steps()[0]
    runner.run_attempt(engine, first["id"], first["job_id"])
    Job.fetch(first["job_id"], connection=engine.redis).delete()  # run above: the queue holds the children
    [batch] = run.batches()
    dead, slow = hold(engine, "died-in-child-0"), hold(engine, "busy-with-child-1")
    engine.redis.delete(Worker.redis_worker_namespace_prefix + "died-in-child-0")
    silent_since(engine, slow, 120)
    wait_until(lambda: scalar(engine, "SELECT bool_and(enqueued_at < now() - interval '1 second')"
                                      " FROM pgbus_batch_children WHERE batch_id = %s", (batch["id"],)),
               timeout=30, interval=0.1, message="children older than the threshold")
    reports = [sweep(engine) for _ in range(2)]
    assert [(r.children_failed, r.children_resent) for r in reports] == [(1, 0), (0, 0)], reports
    children = rows(engine, "SELECT position, status, error_class, job_id FROM pgbus_batch_children"
                            " WHERE batch_id = %s ORDER BY position", (batch["id"],))
    assert [(c["status"], c["error_class"]) for c in children] == [
        ("failed", "pgbus_flask.errors.ChildLost"), ("pending", None)]
    assert [c["job_id"] for c in children] == [dead.id, slow.id]


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_lost_steps_behind_a_page_of_live_ones_are_found_by_the_next_sweeps(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 5 (instead of 500): the oldest 10 overdue steps are live (a queue nobody
    serves, say) and the two lost ones come after them; the cursor reaches them on the third
    sweep, then starts over."""
    monkeypatch.setattr("pgbus_flask.sweep.BATCH", 5)
    for _ in range(12):
        FiveNoop.start()
    steps = scheduled_steps(engine)
    for step in steps[-2:]:
        Job.fetch(step["job_id"], connection=engine.redis).delete()
    steps_overdue_by(engine, 1)
    reports = [sweep(engine) for _ in range(4)]
    assert [(r.overdue_live, r.resent) for r in reports] == [(5, 0), (5, 0), (0, 2), (5, 0)]
    assert {s["id"] for s in scheduled_steps(engine) if s["resends"]} == {s["id"] for s in steps[-2:]}
