"""Inline continuation (docs/architecture.md): a step job that completes a step runs the next one
itself when nothing stops it, and enqueues it as before when something does.

Jobs run through RQ's SimpleWorker in this process, as ``pgbus-worker`` runs them; the
number of jobs RQ ran is the worker's own count. Process-level cases (SIGKILL and SIGTERM
in the middle of an inline step) are in tests/processes/test_processes.py.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from pgbus_flask import Workflow, jobs, step, sweep
from pgbus_flask.engine import Engine
from pgbus_flask.handle import Run
from tests.support import work as run_jobs
from tests.workflows import FiveNoop


def attempts(run: Run) -> list[tuple[str, int, str]]:
    return [(s["step_name"], s["attempt"], s["status"]) for s in run.steps()]


def job_ids(run: Run) -> list[str]:
    return [s["job_id"] for s in run.steps()]


class InlineSlowSecond(Workflow):
    """``second`` sleeps ``seconds`` (to spend a job's time budget)."""

    @step
    def first(self) -> str:
        return "one"

    @step
    def second(self) -> str:
        time.sleep(self.kwargs.get("seconds", 0))
        return "two " + self.output_of("first")

    @step
    def third(self) -> str:
        return "three " + self.output_of("second")


class InlineOtherQueue(Workflow):
    @step
    def here(self) -> str:
        return "here"

    @step(queue="pgbus-inline-elsewhere")
    def elsewhere(self) -> str:
        return "elsewhere"


class InlineLongerTimeout(Workflow):
    @step(timeout=timedelta(seconds=5))
    def short(self) -> str:
        return "short"

    @step(timeout=timedelta(minutes=30))
    def long(self) -> str:
        return "long"


class InlinePausedMeanwhile(Workflow):
    """``first`` pauses its own run from another connection while it runs (an operator's pause
    committed mid-step), then completes."""

    @step
    def first(self) -> str:
        Run(self.engine, self.workflow_id).pause(actor="dashboard:ops", reason="look first")
        return "done anyway"

    @step
    def second(self) -> str:
        return "second"


class InlineStopsWorker(Workflow):
    """``first`` asks the worker to stop (what SIGTERM does to pgbus-worker) while it runs."""

    @step
    def first(self) -> str:
        jobs.SHUTTING_DOWN.set()
        return "first"

    @step
    def second(self) -> str:
        return "second"


class InlineFailsSecond(Workflow):
    @step
    def first(self) -> str:
        return "first"

    @step(on_error="pause")
    def second(self) -> str:
        if self.attempt == 1:
            raise RuntimeError("card declined")
        return "second"

    @step
    def third(self) -> str:
        return "third"


class InlineWaits(Workflow):
    @step
    def first(self) -> str:
        return "first"

    @step(wait_for="approved")
    def second(self) -> Any:
        return self.received_signal.payload if self.received_signal else None


def test_a_run_of_five_steps_is_one_job(engine: Engine) -> None:
    run = FiveNoop.start()
    assert run_jobs(engine) == 1
    run.refresh()
    assert run.status == "finished"
    assert attempts(run) == [(f"s{n}", 1, "completed") for n in range(1, 6)]
    assert len(set(job_ids(run))) == 1, "every attempt names the one job that ran it"
    # The same audit trail as one step a job: each step scheduled, started and completed, in order.
    events = [(e["event"], e["step_name"]) for e in run.events()]
    expected = [("started", None)]
    for n in range(1, 6):
        expected += [("step_scheduled", f"s{n}"), ("step_started", f"s{n}"), ("step_completed", f"s{n}")]
    assert events == [*expected, ("finished", None)]
    started = [e for e in run.events() if e["event"] == "step_started"]
    assert all(e["details"]["worker"] for e in started)
    assert all(s["stall_at"] > s["started_at"] for s in run.steps())


@pytest.mark.settings(PGBUS_INLINE_STEPS=0)
def test_the_off_switch_runs_one_step_a_job(engine: Engine) -> None:
    run = FiveNoop.start()
    assert run_jobs(engine) == 5
    assert run.refresh().status == "finished"
    assert len(set(job_ids(run))) == 5


@pytest.mark.settings(PGBUS_INLINE_STEPS=2)
def test_the_step_budget_hands_the_rest_to_a_new_job(engine: Engine) -> None:
    run = FiveNoop.start()
    assert run_jobs(engine) == 2  # s1 + two inline, then s4 + one inline
    assert run.refresh().status == "finished"
    ids = job_ids(run)
    assert ids[0] == ids[1] == ids[2] != ids[3] == ids[4]


@pytest.mark.settings(PGBUS_INLINE_SECONDS=0.3)
def test_the_time_budget_hands_the_rest_to_a_new_job(engine: Engine) -> None:
    run = InlineSlowSecond.start(seconds=0.5)
    assert run_jobs(engine) == 2  # first + second inline (started in time); third after the budget
    assert run.refresh().status == "finished"
    ids = job_ids(run)
    assert ids[0] == ids[1] != ids[2]
    assert run.outputs()["third"] == "three two one"


def test_outputs_of_earlier_steps_reach_inline_steps(engine: Engine) -> None:
    run = InlineSlowSecond.start()
    assert run_jobs(engine) == 1
    assert run.refresh().outputs() == {"first": "one", "second": "two one", "third": "three two one"}


def test_a_step_routed_to_another_queue_is_enqueued_there(engine: Engine) -> None:
    run = InlineOtherQueue.start()
    assert run_jobs(engine, [engine.settings.queue]) == 1
    assert attempts(run) == [("here", 1, "completed"), ("elsewhere", 1, "scheduled")]
    assert engine.queue("pgbus-inline-elsewhere").count == 1
    assert run_jobs(engine, ["pgbus-inline-elsewhere"]) == 1
    assert run.refresh().status == "finished"


def test_rq_timeout_is_sized_for_the_budget_and_never_cut_into(engine: Engine) -> None:
    """RQ's timeout of a step job covers its first step's stall deadline, the inline seconds and
    the margin; a next step whose own deadline would not fit before it is enqueued instead."""
    run = InlineLongerTimeout.start()
    [queued] = engine.queue(engine.settings.queue).get_jobs()
    assert queued.timeout == 5 + 30 + 5
    assert run_jobs(engine) == 2
    assert run.refresh().status == "finished"
    assert len(set(job_ids(run))) == 2


def test_a_pause_committed_while_a_step_runs_stops_the_continuation(engine: Engine) -> None:
    run = InlinePausedMeanwhile.start()
    assert run_jobs(engine) == 1
    run.refresh()
    assert run.status == "paused"
    assert attempts(run) == [("first", 1, "completed")]
    assert engine.queue(engine.settings.queue).count == 0
    assert run.resume_plan() is not None and run.resume_plan().step == "second"  # type: ignore[union-attr]
    run.resume(actor="dashboard:ops")
    assert run_jobs(engine) == 1
    assert run.refresh().status == "finished"


def test_a_worker_shutting_down_enqueues_the_next_step(engine: Engine) -> None:
    """(This burst worker still takes the queued job; a real worker stopping does not, see
    tests/processes/test_processes.py.)"""
    try:
        run = InlineStopsWorker.start()
        assert run_jobs(engine) == 2  # first's job, then second's own
    finally:
        jobs.SHUTTING_DOWN.clear()
    assert run.refresh().status == "finished"
    first, second = run.steps()
    assert first["job_id"] != second["job_id"], "second was enqueued, not run inline"


def test_an_inline_step_that_fails_follows_its_error_policy(engine: Engine) -> None:
    run = InlineFailsSecond.start()
    assert run_jobs(engine) == 1
    run.refresh()
    assert run.status == "paused"
    assert attempts(run) == [("first", 1, "completed"), ("second", 1, "failed")]
    assert run.steps()[1]["error_message"] == "card declined"
    run.resume()
    assert run_jobs(engine) == 1  # the retry, then third inline
    assert attempts(run.refresh()) == [("first", 1, "completed"), ("second", 1, "failed"),
                                       ("second", 2, "completed"), ("third", 1, "completed")]


def test_a_step_that_waits_for_a_signal_is_not_claimed_inline(engine: Engine) -> None:
    run = InlineWaits.start()
    assert run_jobs(engine) == 2  # first, then second's own job, which parks
    assert run.refresh().status == "waiting"
    run.signal("approved", {"by": "ops"})
    run_jobs(engine)
    assert run.refresh().status == "finished"
    assert run.outputs()["second"] == {"by": "ops"}


def test_duplicate_deliveries_of_a_job_that_ran_inline_do_nothing(engine: Engine) -> None:
    engine.deliveries = 3
    runs = [FiveNoop.start() for _ in range(3)]
    assert run_jobs(engine) == 9  # each run's first job three times: one ran all five steps
    for run in runs:
        assert attempts(run.refresh()) == [(f"s{n}", 1, "completed") for n in range(1, 6)]
        assert sum(e["event"] == "step_started" for e in run.events()) == 5


def test_an_inline_attempt_declared_stalled_then_completing_is_ignored(engine: Engine) -> None:
    """The stall deadline holds per attempt: an inline step past it is failed by the sweep and
    its late outcome changes nothing (and continues nothing)."""

    run = InlineSlowSecond.start(seconds=1.5)

    # While second runs (inline, in this thread's worker), age its stall deadline and sweep
    # from another thread, as another worker's sweep would.
    import threading

    def stall_it() -> None:
        from pgbus_flask.testing import wait_until

        def second_running() -> bool:
            steps = Run(engine, run.workflow_id).steps()
            return len(steps) == 2 and steps[1]["status"] == "in_progress"

        wait_until(second_running, timeout=20, message="second in progress")
        with engine.db.connection() as conn:
            conn.execute("UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second'"
                         " WHERE workflow_id = %s AND step_name = 'second'", (run.workflow_id,))
        sweep.sweep(engine)

    thread = threading.Thread(target=stall_it)
    thread.start()
    assert run_jobs(engine) == 1
    thread.join(30)
    run.refresh()
    assert run.status == "paused"
    assert attempts(run) == [("first", 1, "completed"), ("second", 1, "failed")]
    assert run.steps()[1]["error_class"] == "pgbus_flask.errors.StepStalled"
    assert run.events()[-1]["event"] == "late_completion_ignored"


def test_an_inline_step_is_one_statement_that_locks_the_run_itself(engine: Engine,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step after the first is completed and the next claimed by continue_inline alone, which
    takes the run's lock itself: no lock_run before it (the last step's outcome still locks the run
    to finish it)."""
    from pgbus_flask import db

    names: list[str] = []
    run_statement = db.run

    def counting(target: Any, name: Any, params: Any = None) -> Any:
        if isinstance(name, str):
            names.append(name)
        return run_statement(target, name, params)

    run = FiveNoop.start()
    monkeypatch.setattr(db, "run", counting)
    assert run_jobs(engine) == 1
    run.refresh()
    assert run.status == "finished"
    assert names.count("continue_inline") == 4
    assert names.count("lock_run") == 1, names
