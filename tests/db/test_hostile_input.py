"""Bad input from Python: a step's outcome is never lost to its own text, only an outage
is an outage, and what cannot be stored is refused with a clear error before anything
is written. The audit trail is append-only in the database."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from pgbus_flask import Workflow, step
from pgbus_flask.db import is_outage
from pgbus_flask.engine import Engine
from pgbus_flask.errors import (
    ArgumentsNotSerializable,
    DatabaseError,
    DatabaseUnavailable,
    InvalidInput,
    PgbusError,
)
from pgbus_flask.handle import Run
from pgbus_flask.sweep import sweep
from tests.proc_workflows import HostileOutcome
from tests.support import work
from tests.support.hostile import CASES, TEXTS, assert_outcome_kept
from tests.workflows import ThreeSteps


def every_table(engine: Engine) -> dict[str, Any]:
    """Every row of every pgbus table, for "nothing was written" checks."""
    with engine.db.connection() as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("pgbus_workflows", "pgbus_workflow_steps", "pgbus_workflow_events",
                          "pgbus_workflow_signals", "pgbus_batches", "pgbus_batch_children")
        }


# -- 1. a step's outcome is never lost to its own text ----------------------------------


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("text", list(TEXTS.values()), ids=list(TEXTS))
def test_an_outcome_holding_nul_or_a_lone_surrogate_is_recorded(engine: Engine, case: str, text: str) -> None:
    run = HostileOutcome.start(text=text, case=case)
    work(engine)
    if case == "pause":
        run.refresh()
        assert run.status == "paused"
        [paused] = [e for e in run.events() if e["event"] == "paused"]
        assert paused["reason"] == text.replace("\x00", "\\u0000").replace("\udcff", "\\udcff")
        run.resume(actor="test")
        work(engine)
    assert_outcome_kept(run, case, text)
    assert run.arguments["kwargs"]["text"] == text  # arguments round-trip exactly too


def test_a_fan_out_child_keeps_its_hostile_error(engine: Engine) -> None:
    run = HostileOutcome.start(text=TEXTS["mixed"], case="fan_out")
    work(engine)
    [batch] = run.batches()
    with engine.db.connection() as conn:
        errors = conn.execute("SELECT error_class, error_message FROM pgbus_batch_children WHERE batch_id = %s"
                              " AND status = 'failed'", (batch["id"],)).fetchall()
    assert errors == [("RuntimeError", "a\\u0000 b\\u0000 c\\udcff d\\")]


class RefusedOutput(Workflow):
    """Returns an output a trigger installed by the test makes PostgreSQL refuse."""

    @step
    def refused(self) -> dict[str, int]:
        return {"refuse_me": 1}

    @step
    def after(self) -> str:
        return "after"


def test_an_outcome_postgresql_refuses_is_recorded_as_the_step_failing(engine: Engine) -> None:
    """A refusal (here a real one, raised by a trigger with SQLSTATE 54000) is not an outage:
    no retrying until the stall deadline; the attempt fails with the refusal as its error."""
    with engine.db.connection() as conn:
        conn.execute("""
            CREATE FUNCTION pgbus_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.output ? 'refuse_me' THEN
                    RAISE EXCEPTION 'output too large for the test' USING ERRCODE = 'program_limit_exceeded';
                END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER pgbus_test_refuse BEFORE UPDATE ON pgbus_workflow_steps
                FOR EACH ROW EXECUTE FUNCTION pgbus_test_refuse();
        """)
    try:
        run = RefusedOutput.start()
        work(engine)
    finally:
        with engine.db.connection() as conn:
            conn.execute("DROP TRIGGER pgbus_test_refuse ON pgbus_workflow_steps;"
                         " DROP FUNCTION pgbus_test_refuse()")
    run.refresh()
    assert run.status == "paused"
    [attempt] = run.steps()
    assert attempt["status"] == "failed"
    assert attempt["error_class"] == "pgbus_flask.errors.DatabaseError"
    assert "size limits" in attempt["error_message"] and "54000" in attempt["error_message"]


# -- 2. only an outage is an outage ----------------------------------------------------


def test_statement_timeout_and_size_limits_are_not_outages(engine: Engine) -> None:
    with pytest.raises(DatabaseError, match="cancelled the statement") as timeout:
        with engine.db.connection() as conn:
            conn.execute("SET statement_timeout = '50ms'")
            try:
                conn.execute("SELECT pg_sleep(2)")
            finally:
                conn.execute("RESET statement_timeout")
    assert timeout.value.sqlstate == "57014"
    assert not isinstance(timeout.value, DatabaseUnavailable)

    with pytest.raises(DatabaseError, match="size limits") as big:
        with engine.db.connection() as conn:
            conn.execute("CREATE TEMP TABLE IF NOT EXISTS big_keys (k text PRIMARY KEY)")
            conn.execute("INSERT INTO big_keys SELECT string_agg(md5(i::text), '') FROM generate_series(1, 4000) i")
    assert big.value.sqlstate == "54000"


def test_a_lock_timeout_is_not_an_outage(engine: Engine, pg_url: str) -> None:
    run = ThreeSteps.start()
    holding, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        with psycopg.connect(pg_url) as conn:
            conn.execute("SELECT 1 FROM pgbus_workflows WHERE workflow_id = %s FOR UPDATE", (run.workflow_id,))
            holding.set()
            release.wait(10)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        assert holding.wait(10)
        with pytest.raises(DatabaseError, match="lock_timeout") as refused:
            with engine.db.transaction() as tx:
                tx.conn.execute("SET LOCAL lock_timeout = '50ms'")
                run.pause(reason="blocked")
        assert refused.value.sqlstate == "55P03"
    finally:
        release.set()
        holder.join()


def test_a_terminated_connection_is_an_outage(engine: Engine) -> None:
    with pytest.raises(DatabaseUnavailable):
        with engine.db.connection() as conn:
            conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")
    refused = psycopg.OperationalError("connection refused")
    assert is_outage(refused)


# -- 3. what cannot be stored is refused, naming it, before anything is written ----------


@pytest.mark.parametrize("kwargs, field", [
    ({"subject": ("Order", "10\x0042")}, "subject id"),
    ({"subject": ("Ord\udcffer", 1)}, "subject type"),
    ({"idempotency_key": "key\x00"}, "idempotency_key"),
    ({"idempotency_key": "k" * 100_000}, "idempotency_key"),
    ({"subject": ("Order", "9" * 100_000)}, "subject id"),
    ({"actor": "app\x00"}, "actor"),
])
def test_start_refuses_unstorable_names_and_keys(engine: Engine, kwargs: dict[str, Any], field: str) -> None:
    before = every_table(engine)
    with pytest.raises(InvalidInput) as refused:
        ThreeSteps.start(**kwargs)
    assert refused.value.field == field
    assert isinstance(refused.value, ValueError)
    assert every_table(engine) == before


def test_start_refuses_values_json_cannot_hold(engine: Engine) -> None:
    before = every_table(engine)
    with pytest.raises(ArgumentsNotSerializable, match="more than 4,000 digits"):
        ThreeSteps.start(10**5000)
    deep: list[Any] = []
    for _ in range(500):
        deep = [deep]
    with pytest.raises(ArgumentsNotSerializable, match="nested more than 100 levels"):
        ThreeSteps.start(deep)
    assert every_table(engine) == before


def test_arguments_and_payloads_keep_nul_and_surrogates_exactly(engine: Engine) -> None:
    text = TEXTS["mixed"]
    run = ThreeSteps.start(text, note={text: [text, "\\u0000"]})
    again = Run(engine, run.workflow_id)
    assert again.arguments == {"args": [text], "kwargs": {"note": {text: [text, "\\u0000"]}}}
    sent = again.signal("note", {"a": "\x00", "b": "\ud800"}, idempotency_key="k1", actor="test")
    assert sent.payload == {"a": "\x00", "b": "\ud800"}
    assert Run(engine, run.workflow_id).signals()[0]["payload"] != sent.payload  # stored in the escaped form


@pytest.mark.parametrize("name, kwargs, field", [
    ("na\x00me", {}, "signal name"),
    ("name", {"idempotency_key": "\udcff"}, "idempotency_key"),
    ("name", {"idempotency_key": "k" * 100_000}, "idempotency_key"),
    ("name", {"reason": "why\x00"}, "reason"),
    ("name", {"reason": "x" * 5000}, "reason"),
    ("name", {"actor": "\udcff"}, "actor"),
])
def test_signal_refuses_unstorable_names_keys_reasons_and_actors(engine: Engine, name: str, kwargs: dict[str, Any],
                                                                 field: str) -> None:
    run = ThreeSteps.start()
    before = every_table(engine)
    with pytest.raises(InvalidInput) as refused:
        run.signal(name, {"ok": 1}, **kwargs)
    assert refused.value.field == field
    assert every_table(engine) == before


@pytest.mark.parametrize("verb, kwargs", [
    ("pause", {"reason": "because\x00"}),
    ("pause", {"actor": "ops\udcff"}),
    ("cancel", {"reason": "r" * 1001}),
    ("reschedule", {"at": datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59)))}),
    ("reschedule", {"at": datetime(1, 1, 1, 0, 0, tzinfo=timezone(timedelta(hours=1)))}),
    ("reschedule", {"at": datetime(2030, 1, 1)}),
])
def test_verbs_refuse_unstorable_input_and_change_nothing(engine: Engine, verb: str, kwargs: dict[str, Any]) -> None:
    run = ThreeSteps.start()
    before = every_table(engine)
    with pytest.raises(InvalidInput):
        getattr(run, verb)(**kwargs)
    assert every_table(engine) == before


def test_every_refusal_is_a_pgbus_error(engine: Engine) -> None:
    with pytest.raises(PgbusError):
        ThreeSteps.start(subject=("Order", "\x00"))


# -- 9. the audit trail is append-only ---------------------------------------------------


def test_events_cannot_be_changed_or_deleted_but_go_with_their_run(engine: Engine) -> None:
    run = ThreeSteps.start()
    work(engine)
    with engine.db.connection() as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="append-only"):
            conn.execute("UPDATE pgbus_workflow_events SET actor = 'someone else' WHERE workflow_id = %s",
                         (run.workflow_id,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="can only go with its run"):
            conn.execute("DELETE FROM pgbus_workflow_events WHERE workflow_id = %s", (run.workflow_id,))
        assert conn.execute("SELECT count(*) FROM pgbus_workflow_events WHERE workflow_id = %s",
                            (run.workflow_id,)).fetchone()[0] == len(run.events()) > 0  # type: ignore[index]
        # The retention sweep removes whole runs, events and all.
        conn.execute("UPDATE pgbus_workflows SET updated_at = now() - interval '400 days' WHERE workflow_id = %s",
                     (run.workflow_id,))
    report = sweep(engine)
    assert report.ran
    with engine.db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM pgbus_workflow_events WHERE workflow_id = %s",
                            (run.workflow_id,)).fetchone()[0] == 0  # type: ignore[index]


def test_a_bad_signal_name_or_payload_is_invalid_input(engine: Engine) -> None:
    run = ThreeSteps.start()
    with pytest.raises(InvalidInput) as long_name:
        run.signal("g" * 201)
    assert long_name.value.field == "signal name"
    deep: list[Any] = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(InvalidInput) as too_deep:
        run.signal("go", deep)
    assert too_deep.value.field == "payload"
