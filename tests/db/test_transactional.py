"""Transactional steps (docs/architecture.md): ``@step(transactional=True)`` runs the step's code in
the transaction that records its outcome, so its writes to the app's own tables happen once.

The app's table here is ``app_payments`` (a row per charge, unique per order): a second row
for an order would be a second charge. Jobs run through RQ's SimpleWorker in this process;
the worker killed mid-step is in tests/processes/test_processes.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgbus_flask import Workflow, orm, step, sweep
from pgbus_flask.engine import Engine
from pgbus_flask.errors import DefinitionError
from pgbus_flask.handle import Run
from tests.proc_workflows import ChargesOrder
from tests.support import work as run_jobs


@pytest.fixture(params=["sqlalchemy", "psycopg"])
def payments(engine: Engine, pg_url: str, request: pytest.FixtureRequest,
             monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The app's table; each test runs twice: with SQLAlchemy installed (the step's transaction is a
    Session's) and as without it (a pgbus pooled connection's)."""
    if request.param == "psycopg":
        monkeypatch.setattr(orm, "sqlalchemy_installed", lambda: False)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS app_payments (order_id int PRIMARY KEY, attempt int NOT NULL)")
        conn.execute("TRUNCATE app_payments")
    yield
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS app_payments")


def paid(engine: Engine) -> list[tuple[int, int]]:
    with engine.db.connection() as conn:
        return [tuple(r) for r in conn.execute("SELECT order_id, attempt FROM app_payments ORDER BY 1")]


def attempts(run: Run) -> list[tuple[str, int, str]]:
    return [(s["step_name"], s["attempt"], s["status"]) for s in run.steps()]


class ChargesThenFails(Workflow):
    """Writes the payment, then fails on its first attempt (a later call in the step raised)."""

    @step(transactional=True, on_error="pause")
    def mark_paid(self) -> str:
        self.conn.execute("INSERT INTO app_payments (order_id, attempt) VALUES (%s, %s)",
                          (self.kwargs["order"], self.attempt))
        if self.attempt == 1:
            raise RuntimeError("the receipt service is down")
        return "paid"


class ChargesThenPauses(Workflow):
    @step(transactional=True)
    def mark_paid(self) -> None:
        self.conn.execute("INSERT INTO app_payments (order_id, attempt) VALUES (%s, 1)", (self.kwargs["order"],))
        self.pause("amount looks wrong")


class ChargesTwice(Workflow):
    """Writes the same order twice: the app's own constraint refuses the second."""

    @step(transactional=True)
    def mark_paid(self) -> None:
        self.conn.execute("INSERT INTO app_payments (order_id, attempt) VALUES (1, 1)")
        self.conn.execute("INSERT INTO app_payments (order_id, attempt) VALUES (1, 2)")


class SlowCharge(Workflow):
    """Writes the payment, then waits for ``release`` (set by the test) before returning."""

    release = threading.Event()
    started = threading.Event()

    @step(transactional=True)
    def mark_paid(self) -> str:
        self.conn.execute("INSERT INTO app_payments (order_id, attempt) VALUES (%s, %s)",
                          (self.kwargs["order"], self.attempt))
        SlowCharge.started.set()
        SlowCharge.release.wait(30)
        return "paid"


def test_a_completed_step_commits_its_writes_with_its_outcome(engine: Engine, payments: None) -> None:
    run = ChargesOrder.start(order=1042)
    run_jobs(engine)
    run.refresh()
    assert run.status == "finished"
    assert paid(engine) == [(1042, 1)]
    assert run.outputs() == {"mark_paid": "order 1042 paid", "receipt": "receipt for order 1042 paid"}


def test_an_error_after_a_write_leaves_no_row(engine: Engine, payments: None) -> None:
    run = ChargesThenFails.start(order=7)
    run_jobs(engine)
    run.refresh()
    assert run.status == "paused"
    assert attempts(run) == [("mark_paid", 1, "failed")]
    assert run.steps()[0]["error_message"] == "the receipt service is down"
    assert paid(engine) == [], "the failed attempt's write was rolled back"
    run.resume()
    run_jobs(engine)
    assert run.refresh().status == "finished"
    assert paid(engine) == [(7, 2)]


def test_a_pause_request_rolls_the_writes_back(engine: Engine, payments: None) -> None:
    run = ChargesThenPauses.start(order=8)
    run_jobs(engine)
    run.refresh()
    assert run.status == "paused"
    assert run.steps()[0]["error_message"] == "amount looks wrong"
    assert paid(engine) == []


def test_the_apps_own_constraint_refusing_a_write_fails_the_step_with_why(engine: Engine, payments: None) -> None:
    run = ChargesTwice.start()
    run_jobs(engine)
    run.refresh()
    assert run.status == "paused"
    assert run.steps()[0]["error_class"] == "psycopg.errors.UniqueViolation"
    assert paid(engine) == []


def test_the_job_delivered_three_times_writes_once(engine: Engine, payments: None) -> None:
    engine.deliveries = 3
    runs = [ChargesOrder.start(order=n) for n in range(5)]
    run_jobs(engine)
    assert all(r.refresh().status == "finished" for r in runs)
    assert paid(engine) == [(n, 1) for n in range(5)]


def while_it_runs(action: Any) -> tuple[threading.Thread, list[Any]]:
    """A thread that waits until SlowCharge's code runs (in this thread's worker), calls
    ``action()``, then lets the step return; what ``action`` returned or raised lands in the list."""
    SlowCharge.release.clear()
    SlowCharge.started.clear()
    outcome: list[Any] = []

    def body() -> None:
        try:
            assert SlowCharge.started.wait(20), "the step never started"
            outcome.append(action())
        except BaseException as exc:  # reported by the test
            outcome.append(exc)
        finally:
            SlowCharge.release.set()

    thread = threading.Thread(target=body)
    thread.start()
    return thread, outcome


def test_a_stalled_then_late_attempt_writes_nothing(engine: Engine, payments: None) -> None:
    """The sweep declares the attempt stalled while its code runs; when the code returns, the
    outcome is late: the write rolls back with it and the run stays as the sweep left it."""
    run = SlowCharge.start(order=9)

    def stall() -> Any:
        with engine.db.connection() as conn:
            conn.execute("UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second'"
                         " WHERE workflow_id = %s", (run.workflow_id,))
        return sweep.sweep(engine)  # the step's open transaction holds no pgbus lock

    thread, outcome = while_it_runs(stall)
    run_jobs(engine)
    thread.join(30)
    [report] = outcome
    assert report.stalled == 1, report
    run.refresh()
    assert run.status == "paused"
    assert attempts(run) == [("mark_paid", 1, "failed")]
    assert run.events()[-1]["event"] == "late_completion_ignored"
    assert paid(engine) == []


def test_the_run_lock_is_not_held_while_the_code_runs(engine: Engine, payments: None) -> None:
    """An operator's pause goes through while a transactional step runs (it would wait on a
    held row lock); the step's outcome is then recorded and nothing more is scheduled."""
    run = SlowCharge.start(order=10)
    thread, outcome = while_it_runs(lambda: Run(engine, run.workflow_id).pause(actor="dashboard:ops"))
    run_jobs(engine)
    thread.join(30)
    assert not isinstance(outcome[0], BaseException), outcome
    run.refresh()
    assert run.status == "paused"
    assert attempts(run) == [("mark_paid", 1, "completed")]
    assert paid(engine) == [(10, 1)]


def test_transactional_is_checked_when_the_class_is_declared() -> None:
    with pytest.raises(DefinitionError, match="transactional must be True or False"):
        class Bad(Workflow):
            @step(transactional="yes")
            def one(self) -> None: ...

    with pytest.raises(DefinitionError, match="cannot wait_for"):
        class AlsoBad(Workflow):
            @step(transactional=True, wait_for="approved")
            def one(self) -> None: ...


def test_conn_is_none_outside_transactional_steps(engine: Engine) -> None:
    seen: list[Any] = []

    class LooksAtConn(Workflow):
        @step
        def one(self) -> None:
            seen.append(self.conn)

    LooksAtConn.start()
    run_jobs(engine)
    assert seen == [None]


# -- a transactional step that starts child runs ------------------------------------------


class HoldsParcel(Workflow):
    """A child that waits for a signal (ongoing until told)."""

    @step(wait_for="go")
    def hold(self) -> str:
        return "held"


class ChargesThenDelegates(Workflow):
    """Writes the app's row, then starts a child whose subject may be taken (found in review)."""

    @step(transactional=True)
    def charge_and_delegate(self) -> Any:
        self.conn.execute("INSERT INTO app_payments (order_id, attempt) VALUES (%s, %s)",
                          (self.kwargs["order"], self.attempt))
        return self.start_child(HoldsParcel, subject=("Parcel", "p-1"))

    @step
    def done(self) -> str:
        return "done"


def test_a_transactional_step_commits_its_writes_with_its_children(engine: Engine, payments: None) -> None:
    run = ChargesThenDelegates.start(order=7)
    run_jobs(engine)
    run.refresh()
    assert run.status == "waiting" and len(run.children()) == 1
    assert paid(engine) == [(7, 1)]


def test_a_child_that_cannot_start_rolls_the_steps_writes_back(engine: Engine, payments: None) -> None:
    # An ongoing run already holds the subject the child asks for: the child cannot start.
    HoldsParcel.start(subject=("Parcel", "p-1"))
    run = ChargesThenDelegates.start(order=7)
    run_jobs(engine)
    run.refresh()
    failed = run.steps()[-1]
    assert failed["status"] == "failed" and "SubjectConflict" in (failed["error_class"] or "")
    # docs/architecture.md, "Transactional steps": writes roll back with an error.
    assert paid(engine) == [], "the failed transactional step's app write was committed"


def test_a_retry_after_a_child_start_failure_writes_once(engine: Engine, payments: None) -> None:
    blocker = HoldsParcel.start(subject=("Parcel", "p-1"))
    run = ChargesThenDelegates.start(order=7)
    run_jobs(engine)
    run.refresh()
    assert run.status == "paused"
    blocker.cancel(actor="cli:ops", reason="free the subject")
    run.resume(actor="cli:ops", reason="retry")
    run_jobs(engine)
    run.refresh()
    assert run.status == "waiting"
    # docs/architecture.md, "Transactional steps": the writes happen once (the retry's row only).
    assert paid(engine) == [(7, 2)], f"app rows: {paid(engine)}"
