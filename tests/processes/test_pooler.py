"""Behind PgBouncer in transaction mode (docs/deploy.md#pgbouncer-and-other-poolers).

A real pgbouncer process (tests/support/pgbouncer.py) sits in front of the test database with a
server pool of three, handed out in turn, so a client's consecutive transactions land on
different server connections. With ``PGBUS_DATABASE_POOLER = "transaction"`` the engine, the
sweep, schedules, transactional steps, SQLAlchemy sessions, the dashboard, the CLI and two
``pgbus-worker`` processes work through it; with the default setting step jobs fail on
psycopg's prepared statements, as a new user found.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from rq.job import Job

from pgbus_flask import PgBus, Workflow, runner, step
from pgbus_flask import engine as engine_module
from pgbus_flask.config import KEYS_BY_NAME, Settings, parse_value
from pgbus_flask.db import Database
from pgbus_flask.engine import Engine
from pgbus_flask.errors import ConfigError
from pgbus_flask.sweep import SweepReport, sweep
from pgbus_flask.testing import empty, wait_until
from tests.proc_workflows import ChargesOrder
from tests.support import procs, settings_for, work
from tests.support.pgbouncer import PgBouncer, pgbouncer_binary, required, unreachable_socket
from tests.support.schedule_helpers import Declare
from tests.workflows import FiveNoop, PausesItself, ThreeSteps, WaitsForever, WaitsForPayment

TRANSACTION = {"PGBUS_DATABASE_POOLER": "transaction"}


# -- the setting (no pgbouncer needed) -----------------------------------------------------------


def test_the_setting_takes_session_none_or_transaction() -> None:
    assert KEYS_BY_NAME["PGBUS_DATABASE_POOLER"].default == "session"
    assert Settings.load({}).database_pooler == "session"
    assert parse_value("PGBUS_DATABASE_POOLER", "none") == "session"
    assert parse_value("PGBUS_DATABASE_POOLER", " Transaction ") == "transaction"
    assert parse_value("PGBUS_DATABASE_POOLER", "") == "session"
    assert Settings.from_environ({"PGBUS_DATABASE_POOLER": "transaction"}).database_pooler == "transaction"
    for bad in ("statement", "pgbouncer", 1, True):
        with pytest.raises(ConfigError, match=r"PGBUS_DATABASE_POOLER.*must be 'session'.*'transaction'"):
            parse_value("PGBUS_DATABASE_POOLER", bad)


def test_transaction_mode_turns_prepared_statements_off_on_every_connection(pg_url: str, redis_url: str) -> None:
    assert Database(pg_url).connect_kwargs == {}
    engine = Engine(Settings.load(settings_for(pg_url, redis_url, **TRANSACTION)))
    try:
        assert engine.db.connect_kwargs == {"prepare_threshold": None}
        with engine.db.connection() as conn:
            assert conn.prepare_threshold is None
        from pgbus_flask.orm import _sqlalchemy_engine

        with _sqlalchemy_engine(engine.db).connect() as sa_conn:
            assert sa_conn.connection.driver_connection.prepare_threshold is None
    finally:
        engine.close()
    engine = Engine(Settings.load(settings_for(pg_url, redis_url)))
    try:
        with engine.db.connection() as conn:
            assert conn.prepare_threshold == 5, "psycopg's default, kept without a transaction pooler"
    finally:
        engine.close()


#: What a session keeps past its transaction: behind a transaction-mode pooler the next statement
#: may reach another server connection, where none of it exists (or it stays held on the first).
#: SQL keywords in capitals, as the package writes them (prose says "listen" and "set").
SESSION_STATE = re.compile(
    r"pg_(?:try_)?advisory_(?:un)?lock(?:_shared)?\s*\("  # session-level advisory locks (not _xact_)
    r"|\b(?:UN)?LISTEN\s+[\w\"*]"
    r"|(?:^|[\"'(;]\s*)SET\s+(?!LOCAL\b)(?:SESSION\s+)?[A-Za-z_.]+\s*(?:=|\bTO\b)"  # SET outside SET LOCAL
    r"|\bCREATE\s+(?:LOCAL\s+|GLOBAL\s+)?TEMP(?:ORARY)?\s+TABLE"
    r"|\bWITH\s+HOLD\b"
    r"|set_config\s*\([^)]*,\s*false\s*\)"
    r"|\bPREPARE\s+[A-Za-z_]+\s+(?:\(|AS\b)",
    re.MULTILINE,
)


def session_state_in(text: str) -> list[str]:
    return [match.group(0).strip() for match in SESSION_STATE.finditer(text)]


def test_the_package_keeps_no_state_on_a_session() -> None:
    """Nothing pgbus sends outlives its transaction (docs/deploy.md#pgbouncer-and-other-poolers)."""
    package = Path(__file__).resolve().parent.parent / "pgbus_flask"
    found = {str(path.relative_to(package)): hits for path in sorted(package.rglob("*"))
             if path.suffix in (".py", ".sql") and (hits := session_state_in(path.read_text(encoding="utf-8")))}
    assert found == {}
    # The rule catches what it is for.
    for bad in ('conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))', "conn.execute('LISTEN pgbus')", "UNLISTEN *",
                'conn.execute("SET statement_timeout = 0")', "SET SESSION jit TO off",
                "CREATE TEMP TABLE t (i int)", "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
                "SELECT set_config('jit', 'off', false)", "PREPARE q AS SELECT 1"):
        assert session_state_in(bad), bad
    for fine in ('conn.execute("SET LOCAL jit = off")', "SELECT pg_try_advisory_xact_lock(%s)",
                 "UPDATE pgbus_workflows SET status = %s", "UPDATE t\n    SET a = 1",
                 "SELECT set_config('jit', 'off', true)"):
        assert not session_state_in(fine), fine


# -- pgbouncer -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def bouncer(pg_url: str) -> Iterator[PgBouncer]:
    """A pgbouncer in transaction mode in front of this session's test database."""
    binary = pgbouncer_binary()
    reason = None
    if binary is None:
        reason = "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
    elif unreachable_socket(pg_url):
        reason = ("the test PostgreSQL listens on a unix socket that pgbouncer, run as 'nobody' under root,"
                  " cannot open: set PGBUS_TEST_DATABASE_URL to a server on TCP")
    if reason:
        if required():
            pytest.fail(f"PGBUS_REQUIRE_PGBOUNCER=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    assert binary is not None
    server = PgBouncer(binary, pg_url, pool_mode="transaction", pool_size=3)
    server.start()
    yield server
    server.stop()


def bounced_engine(bouncer: PgBouncer, redis_url: str, **extra: Any) -> Engine:
    return Engine(Settings.load(settings_for(bouncer.url, redis_url, **extra))).make_default()


@pytest.fixture
def engine(clean: None, bouncer: PgBouncer, redis_url: str) -> Iterator[Engine]:
    """The process's default engine, through pgbouncer, with PGBUS_DATABASE_POOLER=transaction."""
    eng = bounced_engine(bouncer, redis_url, **TRANSACTION)
    yield eng
    eng.close()
    engine_module._default = None


@pytest.fixture
def app(clean: None, bouncer: PgBouncer, redis_url: str) -> Iterator[Flask]:
    flask_app = Flask("pgbus_pooler_app")
    flask_app.config.update(TESTING=True, SECRET_KEY="test", **settings_for(bouncer.url, redis_url, **TRANSACTION))
    PgBus(flask_app)
    yield flask_app
    flask_app.extensions["pgbus"].close()
    engine_module._default = None


def scalar(engine: Engine, sql: str, params: Any = None) -> Any:
    with engine.db.connection() as conn:
        row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def statuses(engine: Engine) -> dict[str, int]:
    with engine.db.connection() as conn:
        return dict(conn.execute("SELECT status, count(*) FROM pgbus_workflows GROUP BY 1").fetchall())  # type: ignore[arg-type]


def assert_one_completed_attempt_per_step(engine: Engine, runs: int, steps_per_run: int) -> None:
    with engine.db.connection() as conn:
        per_step = conn.execute("SELECT count(*) FILTER (WHERE status = 'completed'), count(*)"
                                " FROM pgbus_workflow_steps GROUP BY workflow_id, step_name").fetchall()
        failed = conn.execute("SELECT count(*) FROM pgbus_workflow_events WHERE event IN"
                              " ('step_failed', 'stall_detected', 'paused', 'late_completion_ignored')").fetchone()
    assert len(per_step) == runs * steps_per_run
    assert set(per_step) == {(1, 1)}, "one attempt per step, completed"
    assert failed == (0,)
    assert statuses(engine) == {"finished": runs}


def test_the_default_setting_fails_step_jobs_behind_a_transaction_pooler(clean: None, bouncer: PgBouncer,
                                                                          redis_url: str) -> None:
    """The defect as found: psycopg prepares a statement after its fifth run on a connection, and
    the next run reaches another server connection, where it does not exist. Which call meets it
    first depends on which server connection the pooler hands out: a step job, or start() itself."""
    eng = bounced_engine(bouncer, redis_url)
    try:
        failures: list[str] = []
        for _ in range(20):
            try:
                FiveNoop.start()
            except psycopg.errors.InvalidSqlStatementName as exc:
                failures.append(str(exc))
        work(eng)
        registry = eng.queue(eng.settings.queue).failed_job_registry
        results = [Job.fetch(job_id, connection=eng.redis).latest_result() for job_id in registry.get_job_ids()]
        failures += [str(result.exc_string) if result else "" for result in results]
        assert any('prepared statement "_pg3_' in text for text in failures), failures[:1] or "nothing failed"
        assert statuses(eng).get("finished", 0) < 20
    finally:
        eng.close()
        engine_module._default = None


def test_runs_signals_and_verbs_through_the_pooler(engine: Engine) -> None:
    runs = [FiveNoop.start() for _ in range(30)] + [ThreeSteps.start(order_id=i) for i in range(1, 11)]
    jobs = work(engine)
    assert jobs < 30 * 5 + 10 * 3, "inline continuation ran steps without a job of their own"
    assert engine.queue(engine.settings.queue).failed_job_registry.count == 0
    assert {run.refresh().status for run in runs} == {"finished"}
    assert runs[-1].outputs()["ship"] == "shipped 20"

    paying = WaitsForPayment.start()
    work(engine)
    assert paying.refresh().status == "waiting"
    paying.signal("payment_confirmed", {"amount": 12})
    work(engine)
    assert paying.refresh().status == "finished"
    assert paying.outputs()["confirm"] == {"paid": {"amount": 12}, "signal": "payment_confirmed"}

    checked = PausesItself.start()
    work(engine)
    assert checked.refresh().status == "paused"
    checked.resume(actor="test:pooler")
    work(engine)
    assert checked.refresh().status == "finished"

    forever = WaitsForever.start()
    work(engine)
    forever.pause(actor="test:pooler")
    forever.resume(actor="test:pooler")
    forever.cancel(actor="test:pooler", reason="not needed")
    assert forever.refresh().status == "cancelled"


def test_a_transactional_step_commits_its_writes_through_the_pooler(engine: Engine, pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS app_payments (order_id int PRIMARY KEY, attempt int NOT NULL)")
        conn.execute("TRUNCATE app_payments")
    try:
        runs = [ChargesOrder.start(order=order) for order in range(1, 21)]
        work(engine)
        assert {run.refresh().status for run in runs} == {"finished"}
        with psycopg.connect(pg_url) as conn:
            assert conn.execute("SELECT count(*), sum(attempt) FROM app_payments").fetchone() == (20, 20)
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS app_payments")


def test_the_dashboard_and_the_cli_read_through_the_pooler(app: Flask) -> None:
    with app.app_context():
        runs = [ThreeSteps.start(order_id=i) for i in range(1, 8)]
        PausesItself.start()
        work(app.extensions["pgbus"])
    client = app.test_client()
    for _ in range(3):  # more than psycopg's 5 runs of each statement, on every page
        for path in ("/pgbus/", "/pgbus/runs", "/pgbus/runs?status=paused", "/pgbus/attention",
                     f"/pgbus/runs/{runs[0].workflow_id}", f"/pgbus/api/runs/{runs[0].workflow_id}",
                     "/pgbus/api/runs?status=finished", "/pgbus/api/attention"):
            response = client.get(path)
            assert response.status_code == 200, (path, response.status_code)
    listed = client.get("/pgbus/api/runs?status=finished").get_json()
    assert len(listed["runs"]) == 7
    cli = app.test_cli_runner()
    for args in (["migrate"], ["sweep"], ["runs", "--status", "paused"], ["show", str(runs[0].workflow_id)],
                 ["attention"]):
        result = cli.invoke(args=["pgbus", *args])
        assert result.exit_code == 0, (args, result.output)


# -- the sweep -------------------------------------------------------------------------------------


ADVISORY = ("FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted"
            " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())")


def advisory_locks(pg_url: str) -> int:
    """Advisory locks granted in the test database, read straight from PostgreSQL."""
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT count(*) " + ADVISORY).fetchone()
    return int(row[0]) if row else 0


def advisory_holders(pg_url: str) -> list[tuple[str, bool]]:
    """(state, inside a transaction) of each server connection holding an advisory lock."""
    with psycopg.connect(pg_url) as conn:
        return [tuple(row) for row in conn.execute("SELECT a.state, a.xact_start IS NOT NULL " + ADVISORY)]


def test_the_sweep_runs_every_time_and_leaves_no_lock(engine: Engine, pg_url: str) -> None:
    """A session-level lock taken and released in separate transactions would leak behind the
    pooler (the unlock reaching another server connection): then no sweep ran again, anywhere."""
    for _ in range(10):
        assert sweep(engine).ran
        assert advisory_locks(pg_url) == 0


def test_a_running_sweep_keeps_a_second_one_out_through_the_pooler(engine: Engine, pg_url: str) -> None:
    """One sweep is held up mid-way on a run's row lock (taken straight on PostgreSQL); a second
    sweep meanwhile does nothing; once the first ends, the next one runs."""
    run = ThreeSteps.start()
    first = run.steps()[0]
    assert runner.claim_attempt(engine, first["id"], first["job_id"]) is not None
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second' WHERE id = %s",
                     (first["id"],))
    reports: list[SweepReport] = []
    others: list[SweepReport] = []

    def second_sweeps() -> None:
        others.extend(sweep(engine) for _ in range(3))

    with psycopg.connect(pg_url) as holder:
        holder.execute("SELECT 1 FROM pgbus_workflows WHERE workflow_id = %s FOR UPDATE", (run.workflow_id,))
        slow = threading.Thread(target=lambda: reports.append(sweep(engine)))
        slow.start()
        wait_until(lambda: advisory_locks(pg_url) == 1, timeout=10, message="the first sweep holds its lock")
        # Held by a transaction (which keeps its server connection), not by a session that the
        # pooler may give the unlock's transaction to another one of.
        assert advisory_holders(pg_url) == [("idle in transaction", True)]
        # In a thread: a second sweep that wrongly got in would block on the held row too.
        second = threading.Thread(target=second_sweeps)
        second.start()
        second.join(15)
        blocked = second.is_alive()
        holder.rollback()
        slow.join(30)
        second.join(30)
    assert not blocked, "a second sweep ran while the first held the lock"
    assert others == [SweepReport(ran=False)] * 3
    assert len(reports) == 1 and reports[0].ran and reports[0].stalled == 1
    assert advisory_locks(pg_url) == 0
    assert sweep(engine).ran


def test_schedules_start_their_ticks_through_the_pooler(engine: Engine, declare: Declare) -> None:
    declare("PooledEveryMinute", timedelta(minutes=1))
    assert sweep(engine).schedules_synced == 1
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_schedules SET next_tick = next_tick - interval '1 minute'"
                     " WHERE workflow_class = 'PooledEveryMinute'")
    report = sweep(engine)
    assert (report.schedules_started, report.errors) == (1, [])
    work(engine)
    assert statuses(engine) == {"finished": 1}


# -- SQLAlchemy ------------------------------------------------------------------------------------


class PooledOrderFlow(Workflow):
    @step
    def pack(self) -> str:
        return f"packed {self.kwargs['order_id']}"

    @step(transactional=True)
    def mark_paid(self) -> str:
        from sqlalchemy import text

        self.session.execute(text("UPDATE app_pooler_orders SET state = 'paid' WHERE id = :id"),
                             {"id": self.kwargs["order_id"]})
        return "paid"


def test_a_sqlalchemy_session_starts_runs_through_the_pooler(clean: None, bouncer: PgBouncer, redis_url: str,
                                                              pg_url: str) -> None:
    """The app's own Flask-SQLAlchemy engine, on pgbouncer too (its connections set
    prepare_threshold=None themselves: docs/deploy.md), starts runs in its session."""
    from flask_sqlalchemy import SQLAlchemy
    from sqlalchemy import text

    db = SQLAlchemy()
    app = Flask("pgbus_pooler_shop")
    app.config.update(TESTING=True, SECRET_KEY="test",
                      SQLALCHEMY_DATABASE_URI=bouncer.url.replace("postgresql://", "postgresql+psycopg://", 1),
                      SQLALCHEMY_ENGINE_OPTIONS={"connect_args": {"prepare_threshold": None}},
                      **settings_for(bouncer.url, redis_url, **TRANSACTION))
    db.init_app(app)
    PgBus(app)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS app_pooler_orders (id int PRIMARY KEY, state text NOT NULL)")
        conn.execute("TRUNCATE app_pooler_orders")
    try:
        with app.app_context():
            for order_id in range(1, 11):
                db.session.execute(text("INSERT INTO app_pooler_orders VALUES (:id, 'new')"), {"id": order_id})
                PooledOrderFlow.start(order_id=order_id, session=db.session)
                db.session.commit()
            db.session.execute(text("INSERT INTO app_pooler_orders VALUES (99, 'new')"))
            PooledOrderFlow.start(order_id=99, session=db.session)
            db.session.rollback()
            engine: Engine = app.extensions["pgbus"]
            work(engine)
            assert statuses(engine) == {"finished": 10}
            states = db.session.execute(text("SELECT state, count(*) FROM app_pooler_orders GROUP BY 1")).all()
            assert [tuple(row) for row in states] == [("paid", 10)]
            db.session.remove()
            db.engine.dispose()
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS app_pooler_orders")
        app.extensions["pgbus"].close()
        engine_module._default = None


# -- two worker processes --------------------------------------------------------------------------


def drain(engine: Engine, url: str, redis_url: str, log_dir: Path, runs: int, **env: str) -> float:
    """Start ``runs`` FiveNoop runs for two pgbus-worker processes on ``url``, each sweeping every
    second; steps per second."""
    with procs.workers(url, redis_url, log_dir, 2, args=("--no-scheduler",),
                       env={"PGBUS_SWEEP_INTERVAL": "1", **env}) as ws:
        began = time.monotonic()
        for _ in range(runs):
            FiveNoop.start()

        def finished() -> bool:
            dead = [w for w in ws if not w.alive()]
            assert not dead, procs.describe(ws)
            counts = statuses(engine)
            assert not counts.get("paused"), f"{counts}\n{procs.describe(ws)}"
            return counts.get("finished", 0) == runs

        try:
            wait_until(finished, timeout=120, interval=0.1, message=f"{runs} runs finished")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}: {statuses(engine)}\n{procs.describe(ws)}") from None
        elapsed = time.monotonic() - began
        assert engine.queue(engine.settings.queue).failed_job_registry.count == 0, procs.describe(ws)
    return runs * 5 / elapsed


@pytest.mark.slow
def test_two_worker_processes_drain_200_runs_through_the_pooler(engine: Engine, bouncer: PgBouncer, pg_url: str,
                                                                 redis_url: str, tmp_path: Path,
                                                                 clean: None) -> None:
    bounced = drain(engine, bouncer.url, redis_url, tmp_path, 200, PGBUS_DATABASE_POOLER="transaction")
    assert_one_completed_attempt_per_step(engine, 200, 5)
    assert advisory_locks(pg_url) == 0, "the workers' sweeps left no lock behind"
    assert sweep(engine).ran
    # The same straight to PostgreSQL, with and without prepared statements, for the figures.
    figures = {"through pgbouncer (transaction mode)": bounced}
    for name, env in (("direct, no prepared statements", TRANSACTION), ("direct", {})):
        with psycopg.connect(pg_url, autocommit=True) as conn:
            empty(conn)
        figures[name] = drain(engine, pg_url, redis_url, tmp_path, 200, **env)
        assert_one_completed_attempt_per_step(engine, 200, 5)
    print("\n200 runs x 5 steps, 2 workers: "
          + ", ".join(f"{rate:.0f} steps/s {name}" for name, rate in figures.items()))
