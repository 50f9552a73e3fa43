"""The sweep's cost follows what it finds: each part starts from its partial index.

Seeds 20,000 runs that give the sweep nothing to do, then reads PostgreSQL's
plan of the statement each part starts from (the figures at 100,000 runs are
in docs/benchmarks.md, from bench/sweep_cost.py).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pgbus_flask.engine import Engine
from pgbus_flask.sweep import BATCH, DELETE_BATCH, FIND_SQL, OVERDUE_START

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

PARAMS: dict[str, tuple[Any, ...]] = {
    "stalled": (BATCH,),
    "overdue": (300.0, 300.0, *OVERDUE_START, BATCH),
    "expired_waits": (BATCH,),
    "lost_children": (300.0, BATCH),
    "retention": (30 * 86400.0, DELETE_BATCH),
}
INDEX = {
    "stalled": "pgbus_workflow_steps_in_progress",
    "overdue": "pgbus_workflow_steps_scheduled",
    "expired_waits": "pgbus_workflow_steps_wait_deadline",
    "lost_children": "pgbus_batch_children_pending_enqueued",
    "retention": "pgbus_workflows_terminal_updated",
}
BIG_TABLES = {"pgbus_workflows", "pgbus_workflow_steps", "pgbus_batch_children"}


def nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(nodes(child))
    return found


@pytest.mark.parametrize("part", list(FIND_SQL))
def test_each_sweep_part_starts_from_its_partial_index(engine: Engine, part: str) -> None:
    assert set(PARAMS) == set(FIND_SQL) == set(INDEX)
    with engine.db.connection() as conn:
        conn.execute(SEED)
        row = conn.execute(("EXPLAIN (FORMAT JSON) " + FIND_SQL[part]).encode(), PARAMS[part]).fetchone()
    assert row is not None
    with engine.db.connection() as conn:
        children = conn.execute("SELECT count(*) FROM pgbus_batch_children").fetchone()
    assert children is not None and children[0] == 5000  # the seed does not depend on earlier tests' ids
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    steps = nodes(plan[0]["Plan"])
    used = {n.get("Index Name") for n in steps}
    scanned = {n.get("Relation Name") for n in steps if n["Node Type"] == "Seq Scan"}
    assert INDEX[part] in used, json.dumps(plan, indent=1)
    assert not scanned & BIG_TABLES, json.dumps(plan, indent=1)
