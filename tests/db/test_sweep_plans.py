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
from pgbus_flask.sql import statement
from pgbus_flask.sweep import BATCH, DELETE_BATCH, FIND, OVERDUE_START
from tests.support.seeds import BIG_TABLES, SEED, nodes

PARAMS: dict[str, tuple[Any, ...]] = {
    "stalled": (BATCH,),
    "overdue": (300.0, 300.0, *OVERDUE_START, BATCH),
    "expired_waits": (BATCH,),
    "lost_children": (300.0, BATCH),
    "retention_finished": (30 * 86400.0, DELETE_BATCH),
    "retention_cancelled": (30 * 86400.0, DELETE_BATCH),
}
INDEX = {
    "stalled": "pgbus_workflow_steps_in_progress",
    "overdue": "pgbus_workflow_steps_scheduled",
    "expired_waits": "pgbus_workflow_steps_wait_deadline",
    "lost_children": "pgbus_batch_children_pending_enqueued",
    "retention_finished": "pgbus_workflows_finished_updated",
    "retention_cancelled": "pgbus_workflows_cancelled_updated",
}


@pytest.mark.scale  # 20,000 runs and steps
@pytest.mark.parametrize("part", list(FIND))
def test_each_sweep_part_starts_from_its_partial_index(engine: Engine, part: str) -> None:
    assert set(PARAMS) == set(FIND) == set(INDEX)
    with engine.db.connection() as conn:
        conn.execute(SEED)
        row = conn.execute(("EXPLAIN (FORMAT JSON) " + statement(FIND[part])).encode(), PARAMS[part]).fetchone()
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
