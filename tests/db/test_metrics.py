"""Prometheus metrics: ``<prefix>/metrics`` (gauges from PostgreSQL, this process's counters, who may read
it) and ``pgbus-worker --metrics-port`` (a real worker's counters and histograms, forking or not)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql as pgsql
from werkzeug.exceptions import Forbidden

from pgbus_flask import PgBus, filters, metrics
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.errors import ConfigError
from pgbus_flask.queries import _base
from pgbus_flask.sweep import sweep
from pgbus_flask.testing import wait_until
from tests.support import ROOT, settings_for, work
from tests.support.procs import describe, free_port, workers
from tests.support.seeds import BIG_TABLES, SEED, nodes, stall
from tests.support.webtools import engine_of, sql
from tests.workflows import (
    CancelsOnError,
    FailsUntil,
    PausesItself,
    Reattempts,
    SkipsOnError,
    ThreeSteps,
    WaitsForever,
)

TOKEN = "scrape-token-0123456789"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of an exposition, parsed by prometheus_client's own parser (as Prometheus would)."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def of(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def series(samples: Samples, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """``{values of labels: value}`` of every sample named ``name``."""
    return {tuple(dict(found).get(label, "") for label in labels): value
            for (n, found), value in samples.items() if n == name}


def scrape(client: FlaskClient, **headers: str) -> Samples:
    response = client.get("/pgbus/metrics", headers=headers)
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.content_type.startswith("text/plain; version=")  # the Prometheus text format
    return parse(response.get_data(as_text=True))


def direct(app: Flask, query: str) -> list[tuple[Any, ...]]:
    url = engine_of(app).settings.database_url
    assert url
    with psycopg.connect(url) as conn:
        return list(conn.execute(query.encode()).fetchall())


# -- the gauges ------------------------------------------------------------------------------------


@pytest.mark.settings(PGBUS_METRICS=True, PGBUS_STALL_THRESHOLD=60, PGBUS_WAITING_THRESHOLD=600)
def test_gauges_match_the_database(app: Flask) -> None:
    engine = engine_of(app)
    with app.app_context():
        finished = [ThreeSteps.start(order_id=i) for i in range(2)]
        paused = [FailsUntil.start(fail_until=5) for _ in range(3)]
        PausesItself.start()
        CancelsOnError.start()
        waiting = WaitsForever.start()
        work(engine)
        stall(engine)  # two Sleeps attempts past their stall deadline
        assert sweep(engine).stalled == 2
        overdue = ThreeSteps.start(order_id=10)
        ThreeSteps.start(order_id=11)  # ready and due now: not overdue
        manual = ThreeSteps.start(order_id=12)
        manual.pause(actor="cli:ops", reason="customer called")
    sql(app, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '2 hours' WHERE workflow_id = %s",
        overdue.workflow_id)
    sql(app, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '1 hour' WHERE workflow_id = %s",
        waiting.workflow_id)
    assert {r.refresh().status for r in finished} == {"finished"}
    assert {r.refresh().status for r in paused} == {"paused"}

    samples = scrape(app.test_client())
    assert of(samples, "pgbus_database_up") == 1
    # Runs by class and status: every status of every class, as the table itself counts them.
    truth = {(cls, status): n for cls, status, n in direct(
        app, "SELECT workflow_class, status, count(*) FROM pgbus_workflows GROUP BY 1, 2")}
    classes = {cls for cls, _ in truth}
    assert classes == {"ThreeSteps", "FailsUntil", "PausesItself", "CancelsOnError", "WaitsForever", "Sleeps"}
    assert series(samples, "pgbus_runs", "workflow_class", "status") == {
        (cls, status): float(truth.get((cls, status), 0)) for cls in classes
        for status in ("ready", "running", "waiting", "paused", "finished", "cancelled")}
    # Stuck runs by class and reason, as the dashboard's overview counts them.
    needing = {key: value for key, value in series(samples, "pgbus_runs_needing_attention", "workflow_class",
                                                      "reason").items() if value}
    assert needing == {("FailsUntil", "paused_error"): 3, ("PausesItself", "paused_manual"): 1,
                       ("Sleeps", "stalled"): 2, ("ThreeSteps", "overdue"): 1, ("ThreeSteps", "paused_manual"): 1,
                       ("WaitsForever", "waiting_overdue"): 1}
    assert {reason for _, reason in series(samples, "pgbus_runs_needing_attention", "workflow_class", "reason")} == {
        "stalled", "paused_error", "paused_manual", "overdue", "waiting_overdue"}
    # The oldest overdue step of ThreeSteps was due two hours ago; no other class has one.
    ages = series(samples, "pgbus_oldest_overdue_step_age_seconds", "workflow_class")
    assert 7200 <= ages[("ThreeSteps",)] < 7200 + 120
    assert {cls for (cls,), age in ages.items() if age} == {"ThreeSteps"}
    assert set(ages) == {(cls,) for cls in classes}


@pytest.mark.settings(PGBUS_METRICS=True)
def test_gauges_follow_a_run_that_finishes(app: Flask) -> None:
    client = app.test_client()
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    assert of(scrape(client), "pgbus_runs", workflow_class="ThreeSteps", status="ready") == 1
    work(engine_of(app))
    assert run.refresh().status == "finished"
    samples = scrape(client)
    assert of(samples, "pgbus_runs", workflow_class="ThreeSteps", status="ready") == 0
    assert of(samples, "pgbus_runs", workflow_class="ThreeSteps", status="finished") == 1


@pytest.mark.settings(PGBUS_METRICS=True)
def test_a_scrape_without_postgresql_says_so_and_keeps_the_counters(app: Flask, monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    from pgbus_flask import queries
    from pgbus_flask.errors import DatabaseUnavailable

    def down(*args: Any, **kwargs: Any) -> Any:
        raise DatabaseUnavailable("connection refused")

    monkeypatch.setattr(queries, "status_counts", down)
    samples = scrape(app.test_client())
    assert of(samples, "pgbus_database_up") == 0
    assert not series(samples, "pgbus_runs", "workflow_class", "status")
    assert of(samples, "pgbus_sweep_actions_total", action="stalled") is not None  # this process's counters
    assert "could not read the gauges" in caplog.text


@pytest.mark.scale  # 20,000 runs and steps
def test_the_oldest_overdue_read_uses_its_index_not_a_scan(engine: Engine) -> None:
    with engine.db.connection() as conn:
        conn.execute(SEED)
        # 100 of the 5,000 ready runs (not "id % 50 = 0": the seeded ids go on from earlier tests' runs,
        # and with an odd number of those no ready run's id is even)
        conn.execute("UPDATE pgbus_workflows SET attention_reason = 'overdue', attention_since = now()"
                     " - interval '1 hour' WHERE id IN (SELECT id FROM pgbus_workflows WHERE status = 'ready'"
                     " ORDER BY id LIMIT 100)")
        conn.execute("ANALYZE pgbus_workflows")
        query = pgsql.SQL("EXPLAIN (FORMAT JSON) ") + filters.oldest_overdue()
        row = conn.execute(query, _base(engine, None, None)).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    found = nodes(plan[0]["Plan"])
    assert "pgbus_workflows_attention_due_groups" in {n.get("Index Name") for n in found}, json.dumps(plan, indent=1)
    assert not {n.get("Relation Name") for n in found if n["Node Type"] == "Seq Scan"} & BIG_TABLES


# -- this process's counters -------------------------------------------------------------------------


@pytest.mark.settings(PGBUS_METRICS=True)
def test_steps_run_here_show_in_the_web_exposition(app: Flask) -> None:
    client = app.test_client()
    before = scrape(client)
    with app.app_context():
        ThreeSteps.start(order_id=1)  # three steps in one job (inline continuation)
        FailsUntil.start(fail_until=5)
    work(engine_of(app))
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return (of(after, name, **labels) or 0) - (of(before, name, **labels) or 0)

    for step in ("reserve", "charge", "ship"):
        assert delta("pgbus_step_attempts_total", workflow_class="ThreeSteps", step=step, outcome="completed") == 1
        assert delta("pgbus_step_duration_seconds_count", workflow_class="ThreeSteps", step=step) == 1
    assert delta("pgbus_step_attempts_total", workflow_class="FailsUntil", step="capture", outcome="failed") == 1
    # One job ran ThreeSteps: only its first step waited in the queue.
    assert delta("pgbus_step_queue_wait_seconds_count", workflow_class="ThreeSteps", step="reserve") == 1
    assert delta("pgbus_step_queue_wait_seconds_count", workflow_class="ThreeSteps", step="charge") == 0


@pytest.mark.settings(PGBUS_METRICS=True, PGBUS_STALL_THRESHOLD=60)
def test_the_sweep_counts_what_it_found(app: Flask) -> None:
    engine = engine_of(app)
    client = app.test_client()
    with app.app_context():
        stall(engine)
    before = scrape(client)
    report = sweep(engine)
    assert report.stalled == 2
    after = scrape(client)

    def delta(name: str, **labels: str) -> float:
        return (of(after, name, **labels) or 0) - (of(before, name, **labels) or 0)

    assert delta("pgbus_sweep_actions_total", action="stalled") == 2
    assert delta("pgbus_sweep_actions_total", action="resent") == 0
    assert delta("pgbus_step_attempts_total", workflow_class="Sleeps", step="slow", outcome="stalled") == 2
    assert delta("pgbus_sweep_duration_seconds_count") == 1
    assert delta("pgbus_sweep_errors_total", part="stalled") == 0
    # Every action shows from the first scrape, at 0 if nothing was done yet.
    assert {action for (action,) in series(after, "pgbus_sweep_actions_total", "action")} == set(metrics.SWEEP_ACTIONS)


def test_a_rolled_back_outcome_is_not_counted(engine: Engine) -> None:
    """Counted once the outcome commits: a transaction that rolls back counts nothing."""
    before = metrics.value("pgbus_step_attempts_total",
                           {"workflow_class": "ThreeSteps", "step": "reserve", "outcome": "completed"}) or 0
    run = ThreeSteps.start(order_id=1)
    with pytest.raises(RuntimeError), engine.db.transaction() as tx:
        from pgbus_flask.runner.attempt import count_attempt

        count_attempt(tx, "ThreeSteps", "reserve", "completed", 0.01)
        raise RuntimeError("rolled back")
    assert metrics.value("pgbus_step_attempts_total",
                         {"workflow_class": "ThreeSteps", "step": "reserve", "outcome": "completed"}) in (None, before)
    work(engine)
    assert run.refresh().status == "finished"
    assert metrics.value("pgbus_step_attempts_total",
                         {"workflow_class": "ThreeSteps", "step": "reserve", "outcome": "completed"}) == before + 1


def test_a_horse_s_observations_reach_its_parent_as_recorded() -> None:
    labels = {"workflow_class": "Shipped", "step": "handed_over", "outcome": "completed"}
    metrics.capture()
    try:
        metrics.step_attempt("Shipped", "handed_over", "completed", 0.3)
        metrics.queue_wait("Shipped", "handed_over", 1.5)
        assert metrics.value("pgbus_step_attempts_total", labels) is None  # kept, not recorded
        data = metrics.encode()
    finally:
        metrics._captured = None
    assert metrics.replay(data) == 3
    assert metrics.value("pgbus_step_attempts_total", labels) == 1
    assert metrics.value("pgbus_step_duration_seconds_sum", {"workflow_class": "Shipped",
                                                              "step": "handed_over"}) == pytest.approx(0.3)
    assert metrics.value("pgbus_step_queue_wait_seconds_bucket", {"workflow_class": "Shipped",
                                                                   "step": "handed_over", "le": "2.5"}) == 1


def test_half_a_message_from_a_killed_horse_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    assert metrics.replay(b'[[0,["Killed","mid","completed"],1.0],[0,["Kil') == 0
    assert metrics.value("pgbus_step_attempts_total", {"workflow_class": "Killed", "step": "mid",
                                                        "outcome": "completed"}) is None
    assert "could not be read" in caplog.text


# -- who may read it ---------------------------------------------------------------------------------


def operator(request: Any) -> str | None:
    """A dashboard auth: the operator a proxy names in a header; Mallory is signed in but no operator."""
    name = request.headers.get("X-Operator")
    if name == "mallory":
        raise Forbidden("Only the ops team may open pgbus.")
    return name


@pytest.mark.settings(PGBUS_METRICS=True, PGBUS_METRICS_TOKEN=TOKEN, PGBUS_DASHBOARD_AUTH=operator)
def test_a_scraper_s_token_or_an_operator_may_read_the_metrics(app: Flask) -> None:
    client = app.test_client()
    assert of(scrape(client, Authorization=f"Bearer {TOKEN}"), "pgbus_database_up") == 1
    assert of(scrape(client, Authorization=f"bearer {TOKEN}"), "pgbus_database_up") == 1  # the scheme's case
    assert of(scrape(client, **{"X-Operator": "alice"}), "pgbus_database_up") == 1  # the dashboard's auth

    nobody = client.get("/pgbus/metrics")
    assert nobody.status_code == 401
    assert nobody.headers["WWW-Authenticate"].startswith("Bearer")
    assert nobody.content_type.startswith("text/plain")
    assert "PGBUS_METRICS_TOKEN" in nobody.get_data(as_text=True)
    assert "pgbus_" not in nobody.get_data(as_text=True)

    for wrong in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer ", f"Basic {TOKEN}", TOKEN):
        refused = client.get("/pgbus/metrics", headers={"Authorization": wrong})
        assert refused.status_code == 401, wrong
        assert "pgbus_" not in refused.get_data(as_text=True)
    wrong_token = client.get("/pgbus/metrics", headers={"Authorization": "Bearer not-the-token-at-all"})
    assert "not accepted" in wrong_token.get_data(as_text=True)
    # An operator signed in to the dashboard reads it whatever else the request carries.
    assert client.get("/pgbus/metrics", headers={"Authorization": "Bearer wrong",
                                                 "X-Operator": "alice"}).status_code == 200
    # A signed-in user the app's auth forbids stays forbidden, as on the dashboard.
    assert client.get("/pgbus/metrics", headers={"X-Operator": "mallory"}).status_code == 403
    # The token opens the metrics, not the dashboard.
    assert client.get("/pgbus/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 401


def closed_app(pg_url: str, redis_url: str, **settings: Any) -> Flask:
    """A production app (not testing, not debug) without PGBUS_DASHBOARD_AUTH: its dashboard is off."""
    app = Flask("closed")
    app.config.update(SECRET_KEY="test", **settings_for(pg_url, redis_url, **settings))
    PgBus(app)
    return app


def test_without_a_token_or_dashboard_auth_the_metrics_are_closed(clean: None, pg_url: str, redis_url: str) -> None:
    app = closed_app(pg_url, redis_url, PGBUS_METRICS=True)
    try:
        client = app.test_client()
        refused = client.get("/pgbus/metrics")
        assert refused.status_code == 401 and "Sign in" in refused.get_data(as_text=True)
        assert client.get("/pgbus/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 401
        assert client.get("/pgbus/").status_code == 403  # the dashboard says why it is off
    finally:
        engine_of(app).close()


def test_a_token_opens_the_metrics_of_a_closed_dashboard(clean: None, pg_url: str, redis_url: str) -> None:
    app = closed_app(pg_url, redis_url, PGBUS_METRICS=True, PGBUS_METRICS_TOKEN=TOKEN)
    try:
        client = app.test_client()
        assert of(scrape(client, Authorization=f"Bearer {TOKEN}"), "pgbus_database_up") == 1
        assert client.get("/pgbus/metrics").status_code == 401
        assert client.get("/pgbus/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 403
    finally:
        engine_of(app).close()


def test_an_open_dashboard_s_metrics_answer_only_its_hosts_without_a_token(clean: None, pg_url: str,
                                                                             redis_url: str) -> None:
    """DNS rebinding: a page on another name, rebound to this address, must not read them; the token still may."""
    app = closed_app(pg_url, redis_url, PGBUS_DASHBOARD_PUBLIC=True, PGBUS_METRICS=True, PGBUS_METRICS_TOKEN=TOKEN)
    try:
        client = app.test_client()
        rebound = client.get("/pgbus/metrics", base_url="http://rebind.attacker.example:5000")
        assert rebound.status_code == 400 and rebound.content_type.startswith("text/plain")
        assert "pgbus_" not in rebound.get_data(as_text=True)
        assert "PGBUS_DASHBOARD_HOSTS" in rebound.get_data(as_text=True)
        assert "<" not in rebound.get_data(as_text=True), "plain text, no HTML"
        assert client.get("/pgbus/metrics", base_url="http://127.0.0.1:5000").status_code == 200
        assert client.get("/pgbus/metrics", base_url="http://rebind.attacker.example:5000",
                          headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    finally:
        engine_of(app).close()


def test_metrics_are_off_by_default(clean: None, pg_url: str, redis_url: str) -> None:
    app = closed_app(pg_url, redis_url, PGBUS_DASHBOARD_PUBLIC=True, PGBUS_METRICS_TOKEN=TOKEN)
    try:
        client = app.test_client()
        assert client.get("/pgbus/metrics").status_code == 404
        assert client.get("/pgbus/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 404
        assert client.get("/pgbus/").status_code == 200
    finally:
        engine_of(app).close()


@pytest.mark.parametrize(("values", "message"), [
    ({"PGBUS_METRICS": True, "PGBUS_DASHBOARD_PREFIX": None}, "PGBUS_DASHBOARD_PREFIX is None"),
    ({"PGBUS_METRICS_TOKEN": "short"}, "at least 16 characters"),
    ({"PGBUS_METRICS_TOKEN": "sixteen chars but spaces"}, "without spaces"),
    ({"PGBUS_METRICS_TOKEN": 1234567890123456789}, "must be a string"),
])
def test_bad_metrics_settings_are_named_without_the_token(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        Settings.load(values)
    token = values.get("PGBUS_METRICS_TOKEN")
    assert not isinstance(token, str) or token not in str(caught.value)


def test_the_token_is_not_in_the_settings_repr() -> None:
    assert TOKEN not in repr(Settings.load({"PGBUS_METRICS_TOKEN": TOKEN}))


@pytest.mark.slow  # starts a process
def test_without_prometheus_client_metrics_are_a_no_op() -> None:
    """An install without the metrics extra: recording does nothing, and what needs it says what to install."""
    code = """
import sys
sys.modules["prometheus_client"] = None  # as if it were not installed
from pgbus_flask import metrics
from pgbus_flask.config import Settings
from pgbus_flask.errors import ConfigError
assert not metrics.AVAILABLE and not metrics.enabled() and metrics.REGISTRY is None
metrics.step_attempt("A", "b", "completed", 0.1); metrics.queue_wait("A", "b", 1.0)
metrics.sweep_done(0.1, {"stalled": 1}); metrics.sweep_error("stalled")
assert metrics.replay(b'[[0,["A","b","completed"],1.0]]') == 0
try:
    Settings.load({"PGBUS_METRICS": True})
except ConfigError as exc:
    print(exc)
from pgbus_flask.worker.cli import main
sys.exit(main(["--metrics-port", "9", "--burst"]))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ROOT, "PGBUS_DATABASE_URL": "postgresql://x/y",
                               "PGBUS_REDIS_URL": "redis://127.0.0.1:1/0"})
    assert "PGBUS_METRICS needs prometheus-client: pip install 'pgbus-flask[metrics]'" in done.stdout, done.stderr
    assert done.returncode == 2, done.stderr
    assert "--metrics-port needs prometheus-client" in done.stderr


# -- a real worker's port ------------------------------------------------------------------------------


def fetch(port: int) -> Samples | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return parse(response.read().decode())
    except OSError:
        return None


#: What the worker's exposition must show once the runs below have ended: attempts by (class, step,
#: outcome), and the steps whose attempt a job delivery started (each waited in the queue).
EXPECTED_ATTEMPTS = {
    ("ThreeSteps", "reserve", "completed"): 2, ("ThreeSteps", "charge", "completed"): 2,
    ("ThreeSteps", "ship", "completed"): 2, ("FailsUntil", "capture", "failed"): 1,
    ("Reattempts", "flaky", "reattempted"): 1, ("Reattempts", "flaky", "completed"): 1,
    ("SkipsOnError", "optional", "skipped"): 1, ("SkipsOnError", "last", "completed"): 1,
    ("PausesItself", "check", "paused"): 1, ("CancelsOnError", "doomed", "cancelled"): 1,
}
EXPECTED_QUEUE_WAITS = {("ThreeSteps", "reserve"): 2, ("FailsUntil", "capture"): 1, ("Reattempts", "flaky"): 2,
                        ("SkipsOnError", "optional"): 1, ("SkipsOnError", "last"): 1, ("PausesItself", "check"): 1,
                        ("CancelsOnError", "doomed"): 1}


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


@pytest.mark.slow
@pytest.mark.parametrize("worker_class", ["pgbus_flask.worker.runner.PgbusWorker",
                                          "pgbus_flask.worker.runner.PgbusForkWorker"])
def test_a_worker_serves_its_attempts_and_durations(engine: Engine, pg_url: str, redis_url: str, log_dir: Path,
                                                    worker_class: str) -> None:
    port = free_port()
    args = ("--no-sweep", "--worker-class", worker_class, "--metrics-port", str(port))
    with workers(pg_url, redis_url, log_dir, count=1, args=args) as procs:
        assert wait_until(lambda: fetch(port), timeout=30, message="the metrics port answers") is not None
        runs = [ThreeSteps.start(order_id=1), ThreeSteps.start(order_id=2), FailsUntil.start(fail_until=5),
                Reattempts.start(fail_until=1), SkipsOnError.start(), PausesItself.start(), CancelsOnError.start()]
        ends = ["finished", "finished", "paused", "finished", "finished", "paused", "cancelled"]

        def ended() -> bool:
            if not procs[0].alive():
                raise AssertionError(describe(procs))
            return [r.refresh().status for r in runs] == ends

        wait_until(ended, timeout=60, message="every run ended")

        def shown() -> Samples | None:
            samples = fetch(port)
            if samples is None:
                return None
            attempts = series(samples, "pgbus_step_attempts_total", "workflow_class", "step", "outcome")
            return samples if attempts == EXPECTED_ATTEMPTS else None

        try:
            samples = wait_until(shown, timeout=15, message="the exposition shows every attempt")
        except TimeoutError:
            shown_now = series(fetch(port) or {}, "pgbus_step_attempts_total", "workflow_class", "step", "outcome")
            raise AssertionError(f"{shown_now}\n{describe(procs)}") from None
    durations = series(samples, "pgbus_step_duration_seconds_count", "workflow_class", "step")
    per_step: dict[tuple[str, ...], float] = {}
    for (cls, step, _outcome), count in EXPECTED_ATTEMPTS.items():
        per_step[(cls, step)] = per_step.get((cls, step), 0) + count
    assert durations == per_step  # every attempt whose code ran has its duration, inline ones included
    assert of(samples, "pgbus_step_duration_seconds_bucket", workflow_class="ThreeSteps", step="reserve",
              le="+Inf") == 2
    assert series(samples, "pgbus_step_queue_wait_seconds_count", "workflow_class", "step") == EXPECTED_QUEUE_WAITS
    # The database agrees: one row per attempt that ended.
    [(ended_attempts,)] = direct_engine(engine, "SELECT count(*) FROM pgbus_workflow_steps"
                                                " WHERE finished_at IS NOT NULL")
    assert ended_attempts == sum(EXPECTED_ATTEMPTS.values())


def direct_engine(engine: Engine, query: str) -> list[tuple[Any, ...]]:
    with engine.db.connection() as conn:
        return list(conn.execute(query.encode()).fetchall())


@pytest.mark.slow
def test_a_worker_s_port_that_is_taken_is_refused(engine: Engine, pg_url: str, redis_url: str) -> None:
    import socket

    from tests.support.procs import worker_env

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "pgbus_flask.worker.cli", "--burst", "--metrics-port",
                               str(port)], env=worker_env(pg_url, redis_url), cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
    assert done.returncode == 2
    assert re.search(rf"cannot serve metrics on 127\.0\.0\.1:{port}: .*in use", done.stderr), done.stderr


# -- the documentation -----------------------------------------------------------------------------------


@pytest.mark.settings(PGBUS_METRICS=True)
def test_every_metric_is_documented(app: Flask) -> None:
    with app.app_context():
        ThreeSteps.start(order_id=1)
    work(engine_of(app))
    sweep(engine_of(app))
    text = app.test_client().get("/pgbus/metrics").get_data(as_text=True)
    names = {family.name for family in text_string_to_metric_families(text)}
    names = {name for name in names if name.startswith("pgbus_") and not name.endswith("_created")}
    doc = (Path(ROOT) / "docs" / "metrics.md").read_text(encoding="utf-8")
    undocumented = sorted(name for name in names
                          if f"`{name}`" not in doc and f"`{name}_total`" not in doc)
    assert len(names) >= 10 and undocumented == []
