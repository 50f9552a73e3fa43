"""The overdue and waiting_overdue runs are counted up to a cap a group: exact below it, a marked lower
bound past it, and a read never reads more of them than the cap (migration 0013)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from psycopg import sql as pgsql

from pgbus_flask import attention, db, filters, queries
from pgbus_flask.engine import Engine
from tests.support import work
from tests.support.seeds import engine_sql as sql
from tests.support.seeds import nodes
from tests.workflows import ThreeSteps, WaitsForever


def waiting_runs(engine: Engine, n: int) -> list[Any]:
    """``n`` WaitsForever runs waiting on their signal (no wait_timeout), the first started first."""
    runs = [WaitsForever.start() for _ in range(n)]
    work(engine, [engine.settings.queue])
    assert {r.refresh().status for r in runs} == {"waiting"}
    return runs


def db_now(engine: Engine) -> Any:
    with engine.db.connection() as conn:
        return db.fetch_one(conn, "now")["now"]  # type: ignore[index]


@pytest.mark.settings(PGBUS_WAITING_THRESHOLD=600)
def test_due_counts_are_exact_below_the_cap_and_marked_past_it(engine: Engine) -> None:
    runs = waiting_runs(engine, 5)
    now = db_now(engine)
    key = ("WaitsForever", "waiting_overdue")
    # Not overdue yet at the database's clock; all five an hour from now (the reads take now=).
    assert queries.stuck_reason_counts(engine) == {}
    later = now + timedelta(hours=1)
    for cap in (5, 6, 10_000):
        exact = queries.stuck_reason_counts(engine, now=later, cap=cap)
        assert exact == {key: 5} and not exact.capped and not exact.any_capped
    capped = queries.stuck_reason_counts(engine, now=later, cap=3)
    assert capped == {key: 3} and capped.capped == {key}

    group = queries.attention_groups(engine, now=later, cap=10)
    assert [(g.workflow_class, g.step_name, g.reason, g.count, g.capped) for g in group] == [
        ("WaitsForever", "wait", "waiting_overdue", 5, False)]
    since = sorted(r.refresh().latest_step["waiting_since"] for r in runs)  # type: ignore[index]
    assert (group[0].first_seen_at, group[0].last_seen_at) == (since[0], since[-1])
    (top,) = queries.attention_groups(engine, now=later, cap=3)
    # a lower bound, but the first and last seen are still the group's ends
    assert (top.count, top.capped, top.first_seen_at, top.last_seen_at) == (3, True, since[0], since[-1])
    assert queries.attention_groups(engine, "WaitsForever", now=later, cap=3) == [top]
    assert queries.attention_groups(engine, "ThreeSteps", now=later, cap=3) == []
    # the bulk verbs' ids are not capped by the count
    assert len(queries.attention_ids(engine, "WaitsForever", "wait", "waiting_overdue", None, now=later)) == 5


@pytest.mark.settings(PGBUS_WAITING_THRESHOLD=600, PGBUS_STALL_THRESHOLD=60)
def test_stats_and_oldest_overdue_count_groups_up_to_the_cap(engine: Engine) -> None:
    waiting_runs(engine, 4)
    sql(engine, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '1 hour' WHERE status = 'waiting'")
    late = [ThreeSteps.start(order_id=i) for i in range(2)]
    sql(engine, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '2 hours'"
        " WHERE workflow_id = ANY(%s)", [r.workflow_id for r in late])
    assert queries.stats(engine) == queries.Stats(ongoing=6, paused=0, attention=6, attention_capped=False)
    assert queries.stats(engine, cap=3) == queries.Stats(ongoing=6, paused=0, attention=5, attention_capped=True)
    counts = queries.stuck_reason_counts(engine, cap=3)
    assert counts == {("WaitsForever", "waiting_overdue"): 3, ("ThreeSteps", "overdue"): 2}
    assert counts.capped == {("WaitsForever", "waiting_overdue")}
    oldest = queries.oldest_overdue(engine)
    assert list(oldest) == ["ThreeSteps"] and 7200 <= oldest["ThreeSteps"] < 7300
    assert queries.oldest_overdue(engine, now=db_now(engine) + timedelta(hours=1))["ThreeSteps"] >= 10_800


def run_ids(engine: Engine, f: queries.RunFilter) -> list[Any]:
    """Every run id the runs list shows for ``f``, page after page."""
    shown: list[Any] = []
    before = None
    while True:
        rows, before = queries.list_runs(engine, queries.RunFilter(**{**f.__dict__, "before": before}))
        shown += [r["workflow_id"] for r in rows]
        if before is None:
            return shown


@pytest.mark.settings(PGBUS_WAITING_THRESHOLD=600)
def test_the_runs_list_of_a_due_reason_is_the_same_past_the_cap(engine: Engine,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    runs = waiting_runs(engine, 5)
    not_yet = waiting_runs(engine, 2)  # waiting, but not for long: not listed
    sql(engine, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '1 hour'"
        " WHERE workflow_id = ANY(%s)", [r.workflow_id for r in runs])
    expected = [r.workflow_id for r in reversed(runs)]  # newest first
    for f in (queries.RunFilter(reason="waiting_overdue", limit=2),
              queries.RunFilter(reason="waiting_overdue", workflow_class="WaitsForever", step="wait",
                                error_class="", limit=2)):
        assert run_ids(engine, f) == expected  # at most the cap due: read from the groups' ranges
        monkeypatch.setattr(queries, "COUNT_CAP", 3)  # more than the cap due: the reason's runs, newest first
        assert run_ids(engine, f) == expected
        # ... reading at most DUE_WINDOW of them a page: the first reads only the two not due yet (the newest),
        # shows none, and its cursor goes on below them
        monkeypatch.setattr(queries, "DUE_WINDOW", 2)
        rows, cursor = queries.list_runs(engine, f)
        assert rows == [] and cursor is not None
        assert run_ids(engine, f) == expected
        monkeypatch.undo()
    assert not {r.workflow_id for r in not_yet} & set(expected)
    assert run_ids(engine, queries.RunFilter(reason="overdue")) == []
    assert run_ids(engine, queries.RunFilter(reason="waiting_overdue", workflow_class="ThreeSteps")) == []


def explained(engine: Engine, query: pgsql.Composable, params: dict[str, Any]) -> list[dict[str, Any]]:
    with engine.db.connection() as conn:
        row = conn.execute(pgsql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + query, params).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return nodes(plan[0]["Plan"])


def rows_read(found: list[dict[str, Any]]) -> int:
    """How many rows the plan's scans of pgbus_workflows read (returned or filtered out), over all their loops."""
    return sum((int(n["Actual Rows"]) + int(n.get("Rows Removed by Filter", 0))) * int(n["Actual Loops"])
               for n in found if n.get("Relation Name") == "pgbus_workflows")


@pytest.mark.scale  # 3,000 runs overdue
@pytest.mark.settings(PGBUS_WAITING_THRESHOLD=600)
def test_a_due_read_reads_at_most_the_cap_of_each_group(engine: Engine) -> None:
    with engine.db.connection() as conn:
        conn.execute("""
            INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest,
                                         started_by)
            SELECT md5('due' || i)::uuid, 'Seeded' || (i % 2), 'waiting', 'only', 'x', 'seed'
            FROM generate_series(1, 3000) AS i;
            INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                              waiting_since)
            SELECT md5('due' || i)::uuid, 'Seeded' || (i % 2), 'only', 1, 'waiting', now() - interval '2 hours',
                   now() - interval '1 hour' - i * interval '1 second'
            FROM generate_series(1, 3000) AS i""")
        attention.refresh_all(conn)
        conn.execute("ANALYZE pgbus_workflows")
    params = queries._base(engine, None, "Seeded0", 100)
    assert queries.stuck_reason_counts(engine, cap=100) == {("Seeded0", "waiting_overdue"): 100,
                                                           ("Seeded1", "waiting_overdue"): 100}
    assert queries.stuck_reason_counts(engine, cap=1500) == {("Seeded0", "waiting_overdue"): 1500,
                                                             ("Seeded1", "waiting_overdue"): 1500}
    reasons = ("overdue", "waiting_overdue")
    for name, query in (("stuck counts", filters.stuck_counts(reasons, by_class=False)),
                        ("stats", filters.stats(reasons)),
                        ("attention groups", filters.attention_groups(reasons, by_class=False)),
                        ("one class's groups", filters.attention_groups(reasons, by_class=True)),
                        ("due ids", filters.due_ids("waiting_overdue", False, False, False))):
        found = explained(engine, query, {**params, "limit": 200})
        assert "pgbus_workflows" not in {n.get("Relation Name") for n in found if n["Node Type"] == "Seq Scan"}, name
        assert "pgbus_workflows_attention_due_groups" in {n.get("Index Name") for n in found}, name
        # two groups of 1,500 due runs: each counted up to 101, plus a few probes (the skip scan, the ends)
        assert rows_read(found) <= 2 * 101 + 20, (name, rows_read(found))
