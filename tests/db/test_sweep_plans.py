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
from pgbus_flask.sweep import BATCH, DELETE_BATCH, FIND, PAGE_START
from tests.support.seeds import BIG_TABLES, SEED, nodes

PARAMS: dict[str, tuple[Any, ...] | dict[str, Any]] = {
    "stalled": (BATCH,),
    "overdue": {"threshold": 300.0, "after_at": PAGE_START[0], "after_id": PAGE_START[1], "limit": BATCH},
    "expired_waits": {"after_at": PAGE_START[0], "after_id": PAGE_START[1], "limit": BATCH},
    "lost_children": {"threshold": 300.0, "limit": BATCH},
    "flow": {"limit": BATCH, "late": 10.0},
    "retention_finished": (30 * 86400.0, DELETE_BATCH),
    "retention_cancelled": (30 * 86400.0, DELETE_BATCH),
}
INDEX = {
    "stalled": "pgbus_workflow_steps_in_progress",
    "overdue": "pgbus_workflow_steps_scheduled",
    "expired_waits": "pgbus_workflow_steps_wait_deadline",
    "lost_children": "pgbus_batch_children_awaited_enqueued",
    "flow": "pgbus_workflow_steps_blocked",
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


# Fan-outs in flight, none due: 2,000 open batches of 10 children sent just now, their steps waiting;
# and what cancelled runs leave: 1,000 closed batches whose 10 children stayed pending, sent an hour
# ago, that nothing awaits any more (close_open_batches cleared `awaited`).
FAN_OUTS = """
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by)
SELECT md5('fan' || i)::uuid, 'Seeded', CASE WHEN i <= 2000 THEN 'waiting' ELSE 'cancelled' END, 'only', 'x', 'seed'
FROM generate_series(1, 3000) AS i;
INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                  enqueued_at, waiting_since, finished_at)
SELECT md5('fan' || i)::uuid, 'Seeded', 'only', 1, CASE WHEN i <= 2000 THEN 'waiting' ELSE 'cancelled' END,
       now(), now(), now(), CASE WHEN i > 2000 THEN now() END
FROM generate_series(1, 3000) AS i;
INSERT INTO pgbus_batches (workflow_id, step_id, step_name, func, queue, on_child_failure, status, total)
SELECT s.workflow_id, s.id, s.step_name, 'x.y', 'pgbus', 'fail',
       CASE WHEN s.status = 'waiting' THEN 'open' ELSE 'finished' END, 10
FROM pgbus_workflow_steps s WHERE s.workflow_class = 'Seeded';
UPDATE pgbus_workflow_steps s SET batch_id = b.id FROM pgbus_batches b WHERE b.step_id = s.id;
INSERT INTO pgbus_batch_children (batch_id, position, args, status, job_id, enqueued_at, awaited)
SELECT b.id, p, '[]', 'pending', 'job-' || b.id || '-' || p,
       CASE WHEN b.status = 'open' THEN now() ELSE now() - interval '1 hour' END, b.status = 'open'
FROM pgbus_batches b, generate_series(0, 9) AS p;
ANALYZE pgbus_workflows; ANALYZE pgbus_workflow_steps; ANALYZE pgbus_batches; ANALYZE pgbus_batch_children;
"""


def analyzed_plan(engine: Engine, seed: str, part: str) -> dict[str, Any]:
    """EXPLAIN (ANALYZE, BUFFERS) of a part's statement, serially as the sweep reads it."""
    with engine.db.connection() as conn:
        conn.execute(seed.encode())
        with conn.transaction():
            conn.execute(statement("sweep_serially").encode())
            row = conn.execute(("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement(FIND[part])).encode(),
                               PARAMS[part]).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return plan[0]["Plan"]  # type: ignore[no-any-return]


@pytest.mark.scale  # 30,000 fan-out children
def test_lost_children_reads_no_child_when_none_is_due(engine: Engine) -> None:
    """With 20,000 children in flight and 10,000 that closed batches left pending, none due, the
    statement finds nothing without reading a child: each of its two ranges is empty. A plan that
    reads the pending children and lets the join or a filter drop them (every open batch's, or
    the closed batches' leftovers) fails here."""
    plan = analyzed_plan(engine, FAN_OUTS, "lost_children")
    with engine.db.connection() as conn:
        counts = conn.execute("SELECT count(*) FILTER (WHERE awaited), count(*) FILTER (WHERE NOT awaited)"
                              " FROM pgbus_batch_children WHERE status = 'pending'").fetchone()
    assert counts == (20000, 10000)
    steps = nodes(plan)
    on_children = [n for n in steps if n.get("Relation Name") == "pgbus_batch_children"
                   or str(n.get("Index Name", "")).startswith("pgbus_batch_children")]
    assert on_children and {n.get("Index Name") for n in on_children} == {INDEX["lost_children"]}, \
        json.dumps(plan, indent=1)
    read = sum(n["Actual Rows"] * n["Actual Loops"] + n.get("Rows Removed by Filter", 0) for n in on_children)
    assert read == 0, json.dumps(plan, indent=1)
    assert plan["Actual Rows"] == 0
    buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
    assert buffers < 20, json.dumps(plan, indent=1)  # the children alone fill a few hundred pages


@pytest.mark.scale  # 30,000 fan-out children
def test_the_sweeps_reads_are_planned_for_their_cutoff(engine: Engine) -> None:
    """A sweeper runs the same statements every interval, so after five runs psycopg's prepared
    statement would take PostgreSQL's generic plan. Not knowing the cutoff, that plan expects a share of
    the pending children past it and sets up Memoize caches sized for them before finding the range
    empty (3.6 ms of executor start-up a sweep at ten million runs, bench.sweep_cost). The sweep's
    reads are planned for their parameters every time: here, even where the generic plan is forced."""

    def generic_plan(serially: bool) -> dict[str, Any]:
        with engine.db.connection() as conn:
            with conn.transaction():
                conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
                if serially:
                    conn.execute(statement("sweep_serially").encode())
                conn.execute(("PREPARE lost AS " + statement(FIND["lost_children"])
                              .replace("%(threshold)s", "$1::float8").replace("%(limit)s", "$2::int")).encode())
                row = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lost(300, 500)").fetchone()
            conn.execute("DEALLOCATE lost")
        assert row is not None
        return (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]["Plan"]  # type: ignore[no-any-return]

    with engine.db.connection() as conn:
        conn.execute(FAN_OUTS.encode())
    def conditions(plan: dict[str, Any]) -> str:
        return " ".join(str(n.get("Index Cond", "")) for n in nodes(plan))

    generic = generic_plan(serially=False)
    assert "$1" in conditions(generic), json.dumps(generic, indent=1)  # a plan for any cutoff
    assert [n for n in nodes(generic) if n["Node Type"] == "Memoize"], "it memoizes: what this test is about"
    plan = generic_plan(serially=True)
    assert "$1" not in conditions(plan) and "'00:05:00'" in conditions(plan), json.dumps(plan, indent=1)
    assert plan["Actual Rows"] == 0


# A backlog: 20,000 ready runs whose step was due and sent an hour ago (RQ still holds their jobs, or not).
BACKLOG = """
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by)
SELECT md5('q' || i)::uuid, 'Seeded', 'ready', 'only', 'x', 'seed' FROM generate_series(1, 20000) AS i;
INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at, enqueued_at)
SELECT md5('q' || i)::uuid, 'Seeded', 'only', 1, 'scheduled', now() - interval '1 hour' + i * interval '1 ms',
       now() - interval '1 hour'
FROM generate_series(1, 20000) AS i;
ANALYZE pgbus_workflows; ANALYZE pgbus_workflow_steps;
"""


@pytest.mark.scale  # 20,000 overdue steps
def test_overdue_reads_one_page_of_a_backlog(engine: Engine) -> None:
    """With 20,000 steps overdue, the overdue statement reads the first page in scheduled_at order and
    stops there (an incremental sort only orders the steps due at the same instant by id): no sort of
    every overdue step, no hash of every ready run."""
    plan = analyzed_plan(engine, BACKLOG, "overdue")
    assert plan["Actual Rows"] == BATCH
    steps = nodes(plan)
    assert not [n for n in steps if n["Node Type"] in ("Sort", "Hash")], json.dumps(plan, indent=1)
    scans = [n for n in steps if n.get("Index Name") == INDEX["overdue"]]
    assert scans and sum(n["Actual Rows"] * n["Actual Loops"] for n in scans) <= BATCH + 1, json.dumps(plan, indent=1)


#: Every read of the sweep that runs after sweep_serially, with its parameters.
READS: dict[str, tuple[Any, ...] | dict[str, Any]] = {
    **{FIND[part]: PARAMS[part] for part in ("stalled", "overdue", "expired_waits", "lost_children")},
    "orphaned_parents": (300.0, BATCH),
    "unsettled_child_waits": (300.0, BATCH),
}


@pytest.mark.parametrize("name", list(READS))
def test_the_sweeps_reads_are_never_jit_compiled(engine: Engine, name: str) -> None:
    """At a million runs the planner's estimate of what is past a deadline crosses jit_above_cost, and
    compiling the plan (50-200 ms) cost more than running it to find nothing (bench.sweep_cost): the
    sweep's reads turn JIT off. Here any plan would be compiled (jit_above_cost 0), but those."""

    def explained(serially: bool) -> dict[str, Any]:
        with engine.db.connection() as conn, conn.transaction():
            conn.execute("SET LOCAL jit_above_cost = 0")
            if serially:
                conn.execute(statement("sweep_serially").encode())
            row = conn.execute(("EXPLAIN (ANALYZE, FORMAT JSON) " + statement(name)).encode(), READS[name]).fetchone()
        assert row is not None
        return (row[0] if isinstance(row[0], list) else json.loads(row[0]))[0]  # type: ignore[no-any-return]

    if "JIT" not in explained(serially=False):
        pytest.skip("this PostgreSQL does not JIT-compile (no LLVM, or jit = off)")
    assert "JIT" not in explained(serially=True)


@pytest.mark.scale  # 20,000 paused runs
def test_overdue_reads_one_page_of_steps_paused_runs_keep(engine: Engine) -> None:
    """A run paused while ready keeps its scheduled step, due long ago: 20,000 of them, none overdue.
    The statement reads one page of them, not all (the join to ready runs drops them after)."""
    plan = analyzed_plan(engine, BACKLOG.replace("'ready'", "'paused'"), "overdue")
    with engine.db.connection() as conn, conn.transaction():
        conn.execute(statement("sweep_serially").encode())
        due = conn.execute(statement(FIND["overdue"]).encode(), PARAMS["overdue"]).fetchall()
    assert len(due) == BATCH and not any(row[4] for row in due)
    steps = nodes(plan)
    scans = [n for n in steps if n.get("Index Name") == INDEX["overdue"]]
    assert scans and sum(n["Actual Rows"] * n["Actual Loops"] for n in scans) <= BATCH + 1, json.dumps(plan, indent=1)
    assert not [n for n in steps if n["Node Type"] in ("Sort", "Hash")], json.dumps(plan, indent=1)
