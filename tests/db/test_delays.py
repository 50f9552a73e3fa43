"""Durable delays: ``@step(wait=...)``, ``@step(wait_until=...)`` and ``self.sleep()`` (docs/delays.md).

In-process workers run the jobs that are due; RQ's scheduler (``work_due``) moves a future job
into its queue once its time came, as the scheduler inside every ``pgbus-worker`` does. The
real-worker tests at the end run ``pgbus-worker`` processes with their scheduler on.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask

from pgbus_flask import Run, Workflow, queries, runner, step
from pgbus_flask.definition import StepSpec
from pgbus_flask.engine import Engine, whole_second_after
from pgbus_flask.errors import DefinitionError
from pgbus_flask.runner.attempt import run_claimed
from pgbus_flask.sweep import sweep
from pgbus_flask.testing import wait_until
from tests import delay_workflows as wf
from tests.support import CountingWorker, work
from tests.support.webtools import engine_of, text_of

ACTOR = "cli:alice"
DAY = timedelta(days=1)
ROUNDING = timedelta(milliseconds=5)


def work_due(engine: Engine) -> int:
    """Like :func:`work`, after RQ's scheduler has moved the jobs whose time came into their queues."""
    worker = CountingWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
    worker.work(burst=True, with_scheduler=True, logging_level="WARNING")
    return worker.performed


def db_now(engine: Engine) -> datetime:
    with engine.db.connection() as conn:
        return conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index,no-any-return]


def wait_db_past(engine: Engine, moment: datetime, what: str, timeout: float = 15.0) -> None:
    """Wait until the database's clock has passed ``moment``."""
    wait_until(lambda: db_now(engine) > moment, timeout=timeout, interval=0.05, message=what)


def by_step(run: Run) -> dict[str, dict[str, Any]]:
    """The latest attempt of each step."""
    return {s["step_name"]: s for s in run.steps()}


def scheduled_in_rq(engine: Engine, job_id: str) -> datetime | None:
    """When RQ's schedule holds ``job_id`` for (None when it holds it not)."""
    registry = engine.queue(engine.settings.queue).scheduled_job_registry
    try:
        return registry.get_scheduled_time(job_id)
    except Exception:
        return None


# -- declaring ------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "message"), [
    ({"wait": 60, "wait_until": lambda self: None}, "give wait or wait_until, not both"),
    ({"wait": 0}, "wait must be a positive timedelta or number of seconds"),
    ({"wait": timedelta(seconds=-5)}, "wait must be a positive timedelta"),
    ({"wait": "3 days"}, "wait must be a positive timedelta"),
    ({"wait": True}, "wait must be a positive timedelta"),
    ({"wait": timedelta(days=40_000)}, "wait must be at most 36500 days"),
    ({"wait_until": "tomorrow"}, "wait_until must be a callable of the workflow instance"),
])
def test_bad_delay_options_are_refused_when_the_class_is_declared(options: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=message) as info:
        class Bad(Workflow):
            workflow_name = "BadDelay"

            @step
            def first(self) -> None: ...

            @step(**options)
            def second(self) -> None: ...
    assert "step second" in str(info.value)


def test_the_options_enter_the_digest_only_when_set() -> None:
    def noop(self: Any) -> None: ...

    plain = StepSpec("ship", noop).describe()
    assert "wait" not in plain and "wait_until" not in plain  # classes declared before keep their digest
    assert StepSpec("ship", noop, wait=DAY).describe()["wait"] == 86_400.0
    assert StepSpec("ship", noop, wait_until=wf._eta).describe()["wait_until"] == "_eta"
    assert wf.WaitsADay.definition_digest != wf.WaitsBriefly.definition_digest


# -- wait ----------------------------------------------------------------------------------------


def test_wait_makes_the_next_step_due_that_long_after_the_step_before_completed(engine: Engine) -> None:
    run = wf.WaitsADay.start()
    work(engine)
    run.refresh()
    steps = by_step(run)
    assert (run.status, run.current_step) == ("ready", "remind")
    assert steps["order"]["status"] == "completed"
    remind = steps["remind"]
    assert remind["status"] == "scheduled"
    assert abs(remind["scheduled_at"] - (steps["order"]["finished_at"] + DAY)) < ROUNDING
    assert scheduled_in_rq(engine, remind["job_id"]) == whole_second_after(remind["scheduled_at"])
    assert run.available_actions[:3] == ["resume_at", "run_now", "reschedule"]
    scheduled = [e for e in run.events() if e["event"] == "step_scheduled" and e["step_name"] == "remind"]
    assert [e["details"]["scheduled_at"]["v"] for e in scheduled] == [remind["scheduled_at"].isoformat()]
    assert work_due(engine) == 0 and run.refresh().status == "ready", "nothing runs it before its time"


def test_a_first_step_with_a_wait_is_due_that_long_after_start(engine: Engine) -> None:
    run = wf.StartsLater.start()
    first = run.steps()[0]
    assert first["status"] == "scheduled"
    assert abs(first["scheduled_at"] - (run.refresh().row["created_at"] + timedelta(hours=1))) < ROUNDING
    assert engine.queue(engine.settings.queue).count == 0
    assert scheduled_in_rq(engine, first["job_id"]) is not None
    started = [e for e in run.events() if e["event"] == "step_scheduled"]
    assert started[0]["details"]["scheduled_at"]["v"][:19] == first["scheduled_at"].astimezone(
        timezone.utc).isoformat()[:19]
    assert run.row["attention_since"] == first["scheduled_at"]  # not overdue until its time passed
    assert work_due(engine) == 0 and run.refresh().status == "ready"


def test_run_now_cuts_a_day_long_delay(engine: Engine) -> None:
    run = wf.WaitsADay.start()
    work(engine)
    run.refresh().run_now(actor=ACTOR, reason="customer called")
    assert "run_now" not in run.refresh().available_actions
    work(engine)
    assert run.refresh().status == "finished"
    assert run.outputs() == {"order": "ordered", "remind": "reminded", "close": "closed"}
    [event] = [e for e in run.events() if e["event"] == "run_now"]
    assert (event["actor"], event["reason"], event["step_name"]) == (ACTOR, "customer called", "remind")


def test_reschedule_moves_a_delayed_step(engine: Engine) -> None:
    run = wf.WaitsADay.start()
    work(engine)
    later = datetime.now(timezone.utc) + timedelta(hours=5)
    run.refresh().reschedule(later, actor=ACTOR, reason="after the weekend")
    remind = by_step(run)["remind"]
    assert remind["scheduled_at"] == later and remind["sends"] == 2
    assert scheduled_in_rq(engine, remind["job_id"]) == whole_second_after(later)
    soon = db_now(engine) + timedelta(seconds=1)
    run.refresh().reschedule(soon, actor=ACTOR)
    wait_until(lambda: work_due(engine) and run.refresh().status == "finished", timeout=10,
               message="the rescheduled step ran once due")
    assert by_step(run)["remind"]["started_at"] >= soon, "it ran before the moment it was moved to"


def test_pause_and_resume_keep_a_delayed_step_where_it_was(engine: Engine) -> None:
    run = wf.WaitsADay.start()
    work(engine)
    due = by_step(run)["remind"]["scheduled_at"]
    run.refresh().pause(actor=ACTOR, reason="checking")
    assert run.refresh().resume_plan() == runner.ResumePlan("run", "remind")
    run.resume(actor=ACTOR)
    remind = by_step(run)["remind"]
    assert (remind["status"], remind["scheduled_at"]) == ("scheduled", due)
    assert scheduled_in_rq(engine, remind["job_id"]) == whole_second_after(due)


def test_skip_counts_the_next_steps_wait_from_the_skip(engine: Engine) -> None:
    run = wf.WaitsADay.start()
    skipped_at = db_now(engine)
    run.skip(actor=ACTOR, reason="ordered by phone")
    remind = by_step(run)["remind"]
    assert remind["status"] == "scheduled"
    assert skipped_at + DAY <= remind["scheduled_at"] <= db_now(engine) + DAY
    # Skipping the delayed step itself goes on at once.
    run.refresh().skip(actor=ACTOR, reason="no reminder needed")
    work(engine)
    assert run.refresh().status == "finished"
    assert [(s["step_name"], s["status"]) for s in run.steps()] == [
        ("order", "skipped"), ("remind", "skipped"), ("close", "completed")]


def _complete_while_paused(engine: Engine, run: Run) -> None:
    """Claim the run's current step, pause the run, then run the step's code and record its
    outcome: the step completes and the run stays paused (resume will continue)."""
    claim = runner.claim_attempt(engine, run.steps()[-1]["id"], "job-test")
    assert isinstance(claim, runner.Claim)
    run.pause(actor=ACTOR, reason="looking at it")
    assert run_claimed(engine, claim, None, None) is None
    assert run.refresh().status == "paused"


def test_resume_continue_counts_the_wait_from_when_the_step_before_ended(engine: Engine) -> None:
    run = wf.WaitsADay.start()
    _complete_while_paused(engine, run)
    assert run.resume_plan() == runner.ResumePlan("continue", "remind")
    run.resume(actor=ACTOR)
    steps = by_step(run)
    assert run.refresh().status == "ready"
    assert abs(steps["remind"]["scheduled_at"] - (steps["order"]["finished_at"] + DAY)) < ROUNDING


def test_resume_continue_keeps_what_the_step_before_asked_with_sleep(engine: Engine) -> None:
    run = wf.Naps.start(seconds=7200)
    _complete_while_paused(engine, run)
    nap = by_step(run)["nap"]
    assert nap["next_not_before"] is not None
    run.resume(actor=ACTOR)
    assert by_step(run)["wake"]["scheduled_at"] == nap["next_not_before"]


def test_rerun_and_resume_at_run_the_named_step_now(engine: Engine) -> None:
    run = wf.WaitsADay.start()
    work(engine)
    run.refresh().resume_at("remind", actor=ACTOR, reason="send it now")
    work(engine)
    assert run.refresh().status == "finished"
    run.rerun("remind", actor=ACTOR, reason="again")
    work(engine)
    assert run.refresh().status == "finished", "a named step runs now: its wait is for the way through"


def test_inline_continuation_never_runs_a_delayed_step_early(engine: Engine) -> None:
    waits = wf.WaitsBriefly.start()
    sleeps = wf.Naps.start(seconds=3600)
    awake = wf.Naps.start(seconds=0)
    assert work(engine) == 3
    assert by_step(waits.refresh())["second"]["status"] == "scheduled"
    assert by_step(sleeps.refresh())["wake"]["status"] == "scheduled"
    assert awake.refresh().status == "finished"  # no delay: both steps in one job, as ever
    wake = by_step(awake)["wake"]
    assert wake["job_id"] == by_step(awake)["nap"]["job_id"]


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_a_run_delayed_a_day_is_neither_overdue_nor_resent(engine: Engine) -> None:
    run = wf.WaitsADay.start()
    work(engine)
    order = by_step(run)["order"]
    wait_db_past(engine, order["finished_at"] + timedelta(seconds=1.5), "past the stall threshold")
    engine.redis.flushdb()  # even with its job gone from RQ's schedule, nothing is overdue yet
    report = sweep(engine)
    assert (report.resent, report.overdue_live, report.errors) == (0, 0, [])
    assert queries.stuck_reason_counts(engine) == {}
    assert queries.attention_groups(engine) == []
    assert run.refresh().row["attention_since"] == by_step(run)["remind"]["scheduled_at"]


@pytest.mark.settings(PGBUS_STALL_THRESHOLD=1)
def test_redis_losing_a_delayed_job_the_sweep_resends_it_once_overdue(engine: Engine) -> None:
    run = wf.WaitsBriefly.start()
    work(engine)
    second = by_step(run)["second"]
    assert scheduled_in_rq(engine, second["job_id"]) is not None
    engine.redis.flushdb()  # Redis restarted without persistence: RQ's schedule is gone
    assert sweep(engine).resent == 0, "not due yet: nothing to resend"
    wait_db_past(engine, second["scheduled_at"] + timedelta(seconds=1), "the step overdue by the threshold")
    assert queries.stuck_reason_counts(engine) == {("WaitsBriefly", "overdue"): 1}
    assert sweep(engine).resent == 1
    work(engine)
    assert run.refresh().status == "finished"
    second = by_step(run)["second"]
    assert (second["sends"], second["resends"], second["status"]) == (2, 1, "completed")


# -- wait_until ---------------------------------------------------------------------------------


def test_wait_until_from_an_earlier_steps_output(engine: Engine) -> None:
    run = wf.ShipsAtEta.start(eta_in=86_400)
    work(engine)
    run.refresh()
    eta = run.outputs()["order"]["eta"]
    ship = by_step(run)["ship"]
    assert (run.status, ship["status"], ship["scheduled_at"]) == ("ready", "scheduled", eta)
    assert ship["wait_until_pending"] is False and ship["sends"] == 2
    assert scheduled_in_rq(engine, ship["job_id"]) == whole_second_after(eta)
    trail = [(e["event"], e["step_name"], e["actor"]) for e in run.events()][-3:]
    assert trail == [("step_completed", "order", "system"), ("step_scheduled", "ship", "system"),
                     ("rescheduled", "ship", "system")]
    assert run.events()[-1]["details"]["wait_until"] is True
    run.run_now(actor=ACTOR)
    work(engine)
    assert run.refresh().status == "finished" and run.outputs()["ship"] == f"shipped for {eta.isoformat()}"


def test_a_wait_until_in_the_past_is_due_now(engine: Engine) -> None:
    run = wf.ShipsAtEta.start(eta_in=-3600)
    work(engine)
    assert run.refresh().status == "finished"
    assert "rescheduled" not in [e["event"] for e in run.events()]


def test_wait_until_on_the_first_step(engine: Engine) -> None:
    ship_at = datetime.now(timezone.utc) + timedelta(hours=3)
    run = wf.StartsWhenTold.start(ship_at=ship_at)
    assert run.steps()[0]["wait_until_pending"] is True
    work(engine)
    ship = by_step(run)["ship"]
    assert (run.refresh().status, ship["status"], ship["scheduled_at"]) == ("ready", "scheduled", ship_at)


def test_wait_until_after_an_operators_skip_is_evaluated_by_the_steps_job(engine: Engine) -> None:
    ship_at = datetime.now(timezone.utc) + DAY
    run = wf.ShipsWhenTold.start(ship_at=ship_at)
    run.skip(actor=ACTOR, reason="prepared by hand")
    assert by_step(run)["ship"]["wait_until_pending"] is True  # the verb ran none of the app's code
    work(engine)
    assert by_step(run)["ship"]["scheduled_at"] == ship_at and run.refresh().status == "ready"


def test_wait_until_after_resume_continue_is_evaluated_by_the_steps_job(engine: Engine) -> None:
    ship_at = datetime.now(timezone.utc) + DAY
    run = wf.ShipsWhenTold.start(ship_at=ship_at)
    _complete_while_paused(engine, run)
    run.resume(actor=ACTOR)
    work(engine)
    assert by_step(run)["ship"]["scheduled_at"] == ship_at and run.refresh().status == "ready"


def test_an_operators_moment_wins_over_a_pending_wait_until(engine: Engine) -> None:
    run = wf.ShipsWhenTold.start(ship_at=datetime.now(timezone.utc) + DAY)
    run.skip(actor=ACTOR)
    moment = datetime.now(timezone.utc) + timedelta(hours=1)
    run.refresh().reschedule(moment, actor=ACTOR, reason="ship it in an hour")
    ship = by_step(run)["ship"]
    assert (ship["scheduled_at"], ship["wait_until_pending"]) == (moment, False)
    run.refresh().run_now(actor=ACTOR)
    work(engine)
    assert run.refresh().status == "finished", "run now runs it, without asking wait_until again"


def test_a_raising_wait_until_fails_the_next_steps_attempt_and_keeps_the_step_before(engine: Engine,
                                                                                  monkeypatch: Any) -> None:
    monkeypatch.setitem(wf.BEHAVIOUR, "raise", True)
    ship_at = datetime.now(timezone.utc) + DAY
    run = wf.ShipsWhenTold.start(ship_at=ship_at)
    work(engine)
    run.refresh()
    assert run.status == "paused"
    assert run.outputs() == {"prepare": "prepared"}, "the step before it is not lost"
    ship = by_step(run)["ship"]
    assert (ship["status"], ship["error_class"]) == ("failed", "pgbus_flask.errors.WaitUntilFailed")
    assert ship["error_message"] == "the wait_until of ship failed: LookupError: no ship date known yet"
    assert "LookupError: no ship date known yet" in ship["backtrace"]
    assert run.resume_plan() == runner.ResumePlan("retry", "ship")
    assert queries.stuck_reason_counts(engine) == {("ShipsWhenTold", "paused_error"): 1}

    monkeypatch.setitem(wf.BEHAVIOUR, "raise", False)
    run.resume(actor=ACTOR, reason="ship date entered")
    assert run.steps()[-1]["wait_until_pending"] is True, "the retry evaluates wait_until again"
    work(engine)
    ship = by_step(run)["ship"]
    assert (ship["attempt"], ship["status"], ship["scheduled_at"]) == (2, "scheduled", ship_at)


def test_a_naive_moment_from_wait_until_is_a_clear_error(engine: Engine) -> None:
    run = wf.NaiveMoment.start()
    work(engine)
    ship = by_step(run)["ship"]
    assert run.refresh().status == "paused"
    assert ship["error_class"] == "pgbus_flask.errors.WaitUntilFailed"
    assert "must be a datetime with a timezone" in ship["error_message"]
    assert "a naive datetime: datetime.datetime(2030, 1, 1, 9, 0)" in ship["error_message"]


# -- self.sleep() ------------------------------------------------------------------------------


def test_sleep_completes_the_step_and_delays_the_next(engine: Engine) -> None:
    run = wf.Naps.start(seconds=86_400)
    work(engine)
    steps = by_step(run)
    assert run.outputs() == {"nap": "napped"}
    assert steps["nap"]["next_not_before"] is not None
    assert abs(steps["wake"]["scheduled_at"] - (steps["nap"]["finished_at"] + DAY)) < ROUNDING
    assert steps["wake"]["scheduled_at"] == steps["nap"]["next_not_before"]


def test_sleep_until(engine: Engine) -> None:
    until = datetime.now(timezone.utc) + timedelta(hours=2)
    run = wf.Naps.start(until=until)
    work(engine)
    assert by_step(run)["wake"]["scheduled_at"] == until


@pytest.mark.parametrize(("seconds", "due_in"), [(60, timedelta(hours=2)), (3 * 3600, timedelta(hours=3))])
def test_sleep_and_the_next_steps_own_wait_the_later_counts(engine: Engine, seconds: int, due_in: timedelta) -> None:
    run = wf.SleepsAndWaits.start(seconds=seconds)
    work(engine)
    steps = by_step(run)
    assert abs(steps["wake"]["scheduled_at"] - (steps["nap"]["finished_at"] + due_in)) < ROUNDING


def test_sleep_in_the_last_step_is_a_clear_error(engine: Engine) -> None:
    run = wf.SleepsLast.start()
    work(engine)
    last = by_step(run)["last"]
    assert run.refresh().status == "paused" and run.outputs() == {"first": "first"}
    assert last["error_class"] == "pgbus_flask.errors.DefinitionError"
    assert last["error_message"] == ("sleep() in step last, the last step of SleepsLast: no step comes after it "
                                     "to delay")


def test_sleep_until_a_naive_moment_is_a_clear_error(engine: Engine) -> None:
    run = wf.SleepsNaively.start()
    work(engine)
    nap = by_step(run)["nap"]
    assert nap["error_class"] == "pgbus_flask.errors.InvalidInput"
    assert nap["error_message"].startswith("sleep_until() moment must be a datetime with a timezone")


def test_sleep_in_a_transactional_step(engine: Engine, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS app_naps (run text)")
        conn.execute("DELETE FROM app_naps")
    try:
        run = wf.SleepsTransactionally.start()
        work(engine)
        steps = by_step(run)
        assert steps["nap"]["status"] == "completed"
        assert abs(steps["wake"]["scheduled_at"] - (steps["nap"]["finished_at"] + DAY)) < ROUNDING
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT run FROM app_naps").fetchall() == [(str(run.workflow_id),)]
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS app_naps")


def test_sleep_in_a_fan_out_step_delays_the_step_after_the_batch(engine: Engine) -> None:
    run = wf.FansOutThenSleeps.start()
    work(engine)
    steps = by_step(run)
    assert run.refresh().status == "ready" and steps["fan"]["status"] == "completed"
    assert run.outputs()["fan"]["results"] == [10, 20]
    assert abs(steps["after"]["scheduled_at"] - (steps["fan"]["started_at"] + DAY)) < timedelta(seconds=5)
    assert steps["after"]["scheduled_at"] == steps["fan"]["next_not_before"]


@pytest.mark.parametrize("bad", [-1, float("nan"), "1 day", timedelta(days=40_000)])
def test_sleep_refuses_a_bad_duration(engine: Engine, bad: Any) -> None:
    context = wf.Naps(engine=engine, workflow_id=None, args=(), kwargs={}, subject=None, attempt=1,
                        step_name="nap")
    with pytest.raises(ValueError, match="sleep\\(\\) duration must be"):
        context.sleep(bad)
    assert context.sleep_request is None


# -- what operators see ---------------------------------------------------------------------------


def test_the_dashboard_and_the_api_say_when_a_delayed_step_runs(app: Flask) -> None:
    engine = engine_of(app)
    with app.app_context():
        run = wf.WaitsADay.start()
        work(engine)
    remind = by_step(run.refresh())["remind"]
    iso = remind["scheduled_at"].astimezone(timezone.utc).isoformat()
    client = app.test_client()

    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    sentence = page.split('data-testid="next-step">', 1)[1].split("</p>", 1)[0]
    assert sentence.startswith("Scheduled: <code")
    assert f'<time datetime="{iso}" title="in 1 day">' in sentence
    assert "remind" in text_of(sentence)
    assert "Step scheduled for " in text_of(page)
    listed = client.get("/pgbus/runs?status=ready").get_data(as_text=True)
    assert f'<time datetime="{iso}"' in listed

    data = client.get(f"/pgbus/api/runs/{run.workflow_id}").get_json()
    assert data["presentation"]["key"] == "scheduled"
    assert data["presentation"]["args"] == {"step": "remind", "time": iso}
    assert data["presentation"]["attention"] is None
    assert "run_now" in data["available_actions"] and "reschedule" in data["available_actions"]
    sentences = [e["sentence"] for e in data["events"]]
    assert sentences[-1].startswith("Step scheduled for ") and sentences[-1].endswith(" (remind #1)")

    with app.app_context():
        run.reschedule(remind["scheduled_at"] + timedelta(hours=2), actor=ACTOR, reason="later")
    data = client.get(f"/pgbus/api/runs/{run.workflow_id}").get_json()
    assert data["events"][-1]["sentence"].startswith("Rescheduled for ")
    assert data["events"][-1]["sentence"].endswith(" by cli:alice (remind #1): later")


def test_a_step_scheduled_due_at_once_says_no_time(app: Flask) -> None:
    with app.app_context():
        run = wf.WaitsADay.start()
    data = app.test_client().get(f"/pgbus/api/runs/{run.workflow_id}").get_json()
    assert [e["sentence"] for e in data["events"]] == ["Started by app", "Step scheduled by app (order #1)"]


# -- real workers -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_workers_run_delayed_steps_after_their_delay_and_not_before(engine: Engine, pg_url: str,
                                                                         redis_url: str, tmp_path: Path) -> None:
    from tests.support import procs

    env = {"PGBUS_IMPORT": procs.IMPORTS + ",tests.delay_workflows"}
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=("--no-sweep",), env=env) as ws:
        waits = [wf.WaitsBriefly.start() for _ in range(3)]
        ships = wf.ShipsAtEta.start(eta_in=2)
        sleeps = wf.Naps.start(seconds=1.5)
        runs = [*waits, ships, sleeps]

        def done() -> bool:
            for w in ws:
                assert w.alive(), procs.describe(ws)
            statuses = {r.refresh().status for r in runs}
            assert statuses <= {"ready", "running", "finished"}, (statuses, procs.describe(ws))
            return statuses == {"finished"}

        wait_until(done, timeout=30, interval=0.1, message="every delayed run finished")
    for run in waits:
        steps = by_step(run)
        assert abs(steps["second"]["scheduled_at"] - steps["first"]["finished_at"] - timedelta(seconds=1.5)) < ROUNDING
        assert steps["second"]["started_at"] >= steps["second"]["scheduled_at"], "ran before its time"
    ship = by_step(ships)["ship"]
    assert ship["scheduled_at"] == ships.outputs()["order"]["eta"]
    assert ship["started_at"] >= ship["scheduled_at"]
    wake, nap = by_step(sleeps)["wake"], by_step(sleeps)["nap"]
    assert wake["started_at"] >= nap["finished_at"] + timedelta(seconds=1.5)
