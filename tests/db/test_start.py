"""Starting runs: one transaction, idempotency keys, one ongoing run per subject, arguments."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timezone
from decimal import Decimal

import psycopg
import pytest

from pgbus_flask import ArgumentsNotSerializable, PgbusError, SubjectConflict
from pgbus_flask.engine import Engine
from tests.support import work
from tests.workflows import FailsUntil, ThreeSteps


def table_counts(engine: Engine) -> dict[str, int]:
    with engine.db.connection() as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
                for t in ("pgbus_workflows", "pgbus_workflow_steps", "pgbus_workflow_events")}


def queued(engine: Engine) -> int:
    return sum(engine.queue(name).count for name in engine.queue_names())


def test_start_writes_run_step_and_events_and_enqueues_after_commit(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=1, subject=("Order", 1), actor="app:checkout")
    assert (run.status, run.current_step, run.subject) == ("ready", "reserve", ("Order", "1"))
    events = [(e["event"], e["actor"], e["step_name"]) for e in run.events()]
    assert events == [("started", "app:checkout", None), ("step_scheduled", "app:checkout", "reserve")]
    steps = run.steps()
    assert [(s["step_name"], s["attempt"], s["status"]) for s in steps] == [("reserve", 1, "scheduled")]
    assert queued(engine) == 1
    assert run.row["definition_digest"] == ThreeSteps.definition_digest


def test_same_idempotency_key_returns_the_existing_run_and_writes_nothing(engine: Engine) -> None:
    first = ThreeSteps.start(order_id=1, idempotency_key="checkout-1")
    before = table_counts(engine)
    again = ThreeSteps.start(order_id=999, idempotency_key="checkout-1")
    assert again.workflow_id == first.workflow_id
    assert table_counts(engine) == before
    assert queued(engine) == 1


def test_second_ongoing_run_for_a_subject_is_refused(engine: Engine) -> None:
    first = ThreeSteps.start(subject=("Order", 42))
    before = table_counts(engine)
    with pytest.raises(SubjectConflict, match="Order 42 already has an ongoing ThreeSteps run") as info:
        ThreeSteps.start(subject=("Order", 42))
    assert info.value.existing == first.workflow_id
    assert table_counts(engine) == before
    # Another class, or the same class once the first run ended, may start.
    FailsUntil.start(subject=("Order", 42))
    first.cancel(reason="replaced")
    ThreeSteps.start(subject=("Order", 42))


@pytest.mark.settings(PGBUS_POOL_SIZE=1)
def test_refused_starts_leave_the_connection_whole(engine: Engine) -> None:
    """start() sends BEGIN, its insert, a read and COMMIT in one pipeline. When the insert is refused
    (a subject conflict), the server skips the rest, so a statement psycopg chose to prepare there (its
    fifth run on the connection) was never prepared: the next start on that connection failed with
    'prepared statement "_pg3_N" does not exist' (seen once in the hypothesis model). Ten refusals on
    one pooled connection, then starts that go through."""
    ThreeSteps.start(subject=("Order", 7))
    for _ in range(10):
        with pytest.raises(SubjectConflict):
            ThreeSteps.start(subject=("Order", 7))
    for order in range(10):
        ThreeSteps.start(subject=("Order", 100 + order))
    assert table_counts(engine)["pgbus_workflows"] == 11


def test_rollback_of_the_app_transaction_writes_and_enqueues_nothing(engine: Engine, pg_url: str) -> None:
    with psycopg.connect(pg_url) as app_conn:
        app_conn.execute("CREATE TEMP TABLE orders (id int)")
        app_conn.commit()
        with pytest.raises(RuntimeError), engine.db.transaction(conn=app_conn):
            app_conn.execute("INSERT INTO orders VALUES (1)")
            ThreeSteps.start(order_id=1, subject=("Order", 1))
            raise RuntimeError("payment form invalid")
        assert app_conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 0  # type: ignore[index]
    assert table_counts(engine) == {"pgbus_workflows": 0, "pgbus_workflow_steps": 0, "pgbus_workflow_events": 0}
    assert queued(engine) == 0


def test_commit_of_the_app_transaction_enqueues_after_commit(engine: Engine, pg_url: str) -> None:
    with psycopg.connect(pg_url) as app_conn:
        with engine.db.transaction(conn=app_conn):
            run = ThreeSteps.start(order_id=5, conn=app_conn)
            assert queued(engine) == 0
        assert queued(engine) == 1
    work(engine)
    assert run.refresh().status == "finished"


def test_arguments_round_trip_and_unserializable_ones_write_nothing(engine: Engine) -> None:
    when = datetime(2026, 12, 2, 10, 30, tzinfo=timezone.utc)
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    run = ThreeSteps.start(when, date(2026, 1, 2), amount=Decimal("10.25"), ref=ident, order_id=3,
                           nested={"list": [1, "two", None, True]})
    assert run.arguments == {
        "args": [when, date(2026, 1, 2)],
        "kwargs": {"amount": Decimal("10.25"), "ref": ident, "order_id": 3, "nested": {"list": [1, "two", None, True]}},
    }
    before = table_counts(engine)
    with pytest.raises(ArgumentsNotSerializable, match=r"arguments\['kwargs'\]\['blob'\] is a set"):
        ThreeSteps.start(blob={1, 2})
    with pytest.raises(ArgumentsNotSerializable, match="nan"):
        ThreeSteps.start(float("nan"))
    assert table_counts(engine) == before


def test_bad_subject_and_key_are_named(engine: Engine) -> None:
    with pytest.raises(PgbusError, match="subject must be a"):
        ThreeSteps.start(subject="Order 1")  # type: ignore[arg-type]
    with pytest.raises(PgbusError, match="idempotency_key must not be empty"):
        ThreeSteps.start(idempotency_key="")
    assert table_counts(engine)["pgbus_workflows"] == 0


def test_step_jobs_are_named_after_their_step_in_rq(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=1)
    [job] = engine.queue(engine.settings.queue).get_jobs()
    assert job.description == f"ThreeSteps.reserve #1 (run {run.workflow_id})"
    assert job.func_name == "pgbus_flask.jobs.run_step"
