"""Rows several test modules seed: the insights page's runs, stalled runs, the sweep's big tables."""

from __future__ import annotations

from typing import Any

from flask import Flask

from pgbus_flask import attention, runner, sweep
from pgbus_flask.engine import Engine
from tests.flow_workflows import TenantSync
from tests.support import work
from tests.support.webtools import engine_of, sql
from tests.workflows import FailsUntil, Sleeps, ThreeSteps, WaitsForPayment


def seed_insights(app: Flask) -> dict[str, list[str]]:
    engine = engine_of(app)
    with app.app_context():
        done = [ThreeSteps.start(order_id=i) for i in range(4)]
        failing = [FailsUntil.start(fail_until=9) for _ in range(3)]
        cancelled = ThreeSteps.start(order_id=99)
        cancelled.cancel(actor="cli:bob", reason="customer left")
        work(engine)
        for run in failing[:2]:
            run.resume(actor="cli:bob", reason="try again")  # fails again: a second failed attempt each
        work(engine)
    sweep.sweep(engine)
    return {"done": [str(r.workflow_id) for r in done], "failing": [str(r.workflow_id) for r in failing]}


def stall_and_time_out(app: Flask) -> dict[str, str]:
    """A run whose attempt the sweep declared stalled, and one whose signal wait ran out."""
    engine = engine_of(app)
    with app.app_context():
        waiting = WaitsForPayment.start()
        work(engine)
        stalled = ThreeSteps.start(order_id=21)  # its first step's job stays queued, never run
    sql(app, "UPDATE pgbus_workflows SET status = 'running' WHERE workflow_id = %s", stalled.workflow_id)
    sql(app, "UPDATE pgbus_workflow_steps SET status = 'in_progress', started_at = now() - interval '5 minutes',"
        " worker = 'host-7:4242', stall_at = now() - interval '1 minute' WHERE workflow_id = %s",
        stalled.workflow_id)
    sql(app, "UPDATE pgbus_workflow_steps SET timeout_at = now() - interval '1 minute' WHERE workflow_id = %s"
        " AND status = 'waiting'", waiting.workflow_id)
    sweep.sweep(engine)
    with app.app_context():
        assert stalled.refresh().status == "paused" and waiting.refresh().status == "paused"
    return {"swept_stalled": str(stalled.workflow_id), "timed_out": str(waiting.workflow_id)}


def engine_sql(engine: Engine, statement: str, *params: object) -> None:
    """One statement by hand (time moved into the past), with the runs' attention columns brought up
    to date as the runner would keep them."""
    with engine.db.connection() as conn:
        conn.execute(statement, params)  # type: ignore[arg-type]
        attention.refresh_all(conn)


def stall(engine: Engine) -> list[object]:
    """Two Sleeps runs whose attempts are in progress past their stall deadline."""
    runs = [Sleeps.start(seconds=0) for _ in range(2)]
    for run in runs:
        assert runner.claim_attempt(engine, run.latest_step["id"], None) is not None  # type: ignore[index]
    engine_sql(engine,
               "UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second' WHERE status = 'in_progress'")
    return runs


SEED = """
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             updated_at)
SELECT md5('run' || i)::uuid, 'Seeded', (ARRAY['finished', 'waiting', 'ready', 'paused'])[1 + i % 4], 'only', 'x',
       'seed', now()
FROM generate_series(1, 20000) AS i;
INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                  enqueued_at, finished_at)
SELECT md5('run' || i)::uuid, 'Seeded', 'only', 1,
       (ARRAY['completed', 'waiting', 'scheduled', 'failed'])[1 + i % 4], now() + interval '1 day', now(), now()
FROM generate_series(1, 20000) AS i;
INSERT INTO pgbus_batches (workflow_id, step_id, step_name, func, queue, on_child_failure, status, total, done)
SELECT workflow_id, id, step_name, 'x.y', 'pgbus', 'fail', 'finished', 10, 10 FROM pgbus_workflow_steps
WHERE status = 'completed' ORDER BY id LIMIT 500;
INSERT INTO pgbus_batch_children (batch_id, position, args, status, job_id, enqueued_at)
SELECT b.id, p, '[]', 'done', 'job', now() FROM pgbus_batches b, generate_series(0, 9) AS p;
ANALYZE pgbus_workflows; ANALYZE pgbus_workflow_steps; ANALYZE pgbus_batches; ANALYZE pgbus_batch_children;
"""


BIG_TABLES = {"pgbus_workflows", "pgbus_workflow_steps", "pgbus_batch_children"}


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


def in_line(app: Flask) -> str:
    """A run waiting in line for its class's limit (the two before it hold the key's slots): its id."""
    with app.app_context():
        runs = [TenantSync.start(tenant=1) for _ in range(3)]
    for run in runs:
        runner.claim_attempt(engine_of(app), int(run.refresh().steps()[-1]["id"]), None)
    return str(runs[-1].workflow_id)
