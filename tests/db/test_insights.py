"""Insights per class, from the roll-ups the audit trail's trigger and the sweep keep: the counts
agree with the runs that really ran, each transition counted once."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from flask import Flask

from pgbus_flask import insights, sweep
from pgbus_flask.errors import InvalidInput
from pgbus_flask.sql import statement
from tests.support import work
from tests.support.seeds import nodes
from tests.support.seeds import seed_insights as seed
from tests.support.webtools import engine_of, sql
from tests.workflows import FailsUntil, ThreeSteps


def test_counts_agree_with_what_ran(app: Flask) -> None:
    seed(app)
    engine = engine_of(app)
    three = insights.insights(engine, "ThreeSteps", "1h", ["reserve", "charge", "ship"])
    assert (three.started, three.finished, three.cancelled, three.failed) == (5, 4, 1, 0)
    assert (three.funnel_started, three.funnel_finished, three.funnel_cancelled) == (5, 4, 1)
    by_step = {s.step: s for s in three.steps}
    assert [s.step for s in three.steps] == ["reserve", "charge", "ship"]
    assert by_step["reserve"].reached == 5 and by_step["charge"].reached == 4 and by_step["ship"].reached == 4
    assert by_step["reserve"].stopped_here == 1, "the cancelled run stopped at its first step"
    assert by_step["ship"].completed_attempts == 4 and by_step["ship"].failed_attempts == 0
    for s in three.steps:
        assert s.p50_ms is not None and s.p95_ms is not None and s.max_ms is not None
        assert 0 <= s.p50_ms <= s.p95_ms <= max(s.max_ms, 0.5)
        assert s.queue_p50_ms is not None
    assert sum(b.started for b in three.buckets) == 5 and sum(b.finished for b in three.buckets) == 4

    fails = insights.insights(engine, "FailsUntil", "24h", ["capture", "notify"])
    capture = fails.steps[0]
    assert (capture.reached, capture.completed_attempts, capture.failed_attempts) == (3, 0, 5)
    assert capture.errors == [("TimeoutError", 5)]
    assert capture.now_by_status == {"paused": 3}, "three runs sit paused at capture now"
    assert fails.errors == [("capture", "TimeoutError", 5)] and fails.failed == 5
    assert fails.steps[1].reached == 0 and fails.funnel_finished == 0


def pending_deltas(app: Flask) -> int:
    """The delta rows the sweep has not folded yet."""
    with psycopg.connect(engine_of(app).settings.database_url) as conn:  # type: ignore[arg-type]
        return int(conn.execute("SELECT count(*) FROM pgbus_insight_deltas").fetchone()[0])  # type: ignore[index]


def figures(result: insights.Insights) -> dict[str, object]:
    """Everything a page or the JSON shows of ``result`` but the moment it was read."""
    data = result.as_json()
    return {k: v for k, v in data.items() if k != "until"}


def test_a_run_counts_the_moment_it_commits_and_folding_changes_nothing(app: Flask) -> None:
    """Insights read the deltas the sweep has not folded yet beside the roll-ups: a run that just ended
    is there before any sweep, and the sweep that folds it changes no figure (each transition counts once)."""
    seed(app)
    engine = engine_of(app)
    assert pending_deltas(app) == 0, "the seed's sweep folded everything"
    before = insights.insights(engine, "ThreeSteps", "1h", ["reserve", "charge", "ship"])
    assert (before.started, before.finished) == (5, 4)
    with app.app_context():
        ThreeSteps.start(order_id=7)
        FailsUntil.start(fail_until=9)
        work(engine)
    assert pending_deltas(app) > 0, "nothing folded these runs yet"
    now = insights.insights(engine, "ThreeSteps", "1h", ["reserve", "charge", "ship"])
    assert (now.started, now.finished, now.funnel_started, now.funnel_finished) == (6, 5, 6, 5)
    assert [s.reached for s in now.steps] == [6, 5, 5] and now.steps[2].completed_attempts == 5
    assert sum(b.started for b in now.buckets) == 6 and sum(b.finished for b in now.buckets) == 5
    fails = insights.insights(engine, "FailsUntil", "24h", ["capture", "notify"])
    assert (fails.started, fails.failed, fails.steps[0].failed_attempts) == (4, 6, 6)
    assert fails.steps[0].now_by_status == {"paused": 4} and fails.errors == [("capture", "TimeoutError", 6)]

    sweep.sweep(engine)
    assert pending_deltas(app) == 0
    assert figures(insights.insights(engine, "ThreeSteps", "1h", ["reserve", "charge", "ship"])) == figures(now)
    assert figures(insights.insights(engine, "FailsUntil", "24h", ["capture", "notify"])) == figures(fails)
    sweep.sweep(engine)
    assert figures(insights.insights(engine, "ThreeSteps", "1h", ["reserve", "charge", "ship"])) == figures(now)


def test_a_fold_under_way_or_just_committed_neither_hides_nor_doubles_a_transition(app: Flask) -> None:
    """A read sees the roll-ups and the deltas in one snapshot: while a fold's transaction holds its
    deletes and inserts uncommitted, and once it commits, the figures are the same."""
    seed(app)
    engine = engine_of(app)
    with app.app_context():
        ThreeSteps.start(order_id=8)
        work(engine)
    expected = figures(insights.insights(engine, "ThreeSteps", "24h"))
    assert expected["started"] == 6 and pending_deltas(app) > 0
    with psycopg.connect(engine.settings.database_url) as folding:  # type: ignore[arg-type]
        folded, _ = insights.fold(folding, None)  # in a transaction not committed yet
        assert folded > 0
        assert figures(insights.insights(engine, "ThreeSteps", "24h")) == expected, "while the fold is open"
        folding.commit()
    assert pending_deltas(app) == 0
    assert figures(insights.insights(engine, "ThreeSteps", "24h")) == expected, "after the fold"


def test_failure_rate_per_step(app: Flask) -> None:
    """Each step's failed attempts over the attempts that ended in the window, in its JSON too; a step no
    attempt of ended has none."""
    seed(app)
    engine = engine_of(app)
    fails = insights.insights(engine, "FailsUntil", "24h", ["capture", "notify"])
    capture, notify = fails.steps
    assert (capture.completed_attempts, capture.failed_attempts, capture.failure_rate) == (0, 5, 1.0)
    assert notify.failure_rate is None and notify.as_json()["failure_rate"] is None
    assert all(s.failure_rate == 0.0 for s in insights.insights(engine, "ThreeSteps", "1h").steps)
    with app.app_context():
        run = FailsUntil.start(fail_until=0)  # captures at its first attempt
        work(engine)
        assert run.refresh().status == "finished"
    capture, notify = insights.insights(engine, "FailsUntil", "24h", ["capture", "notify"]).steps
    assert (capture.completed_attempts, capture.failed_attempts) == (1, 5) and notify.failure_rate == 0.0
    assert capture.failure_rate == 5 / 6 and capture.as_json()["failure_rate"] == round(5 / 6, 4) == 0.8333


def test_old_rows_become_hourly_and_expire(app: Flask) -> None:
    seed(app)
    engine = engine_of(app)
    sql(app, "UPDATE pgbus_insights SET bucket = bucket - interval '3 days' + interval '5 minutes'")
    sql(app, "INSERT INTO pgbus_insights (workflow_class, bucket, step, kind, n) VALUES"
             " ('ThreeSteps', now() - interval '40 days', '', 'started', 1)")
    engine.sweep_cursors.pop("insights", None)
    sweep.sweep(engine)
    with psycopg.connect(engine.settings.database_url) as conn:  # type: ignore[arg-type]
        minutes = conn.execute("SELECT count(*) FROM pgbus_insights WHERE bucket <> date_trunc('hour', bucket)"
                               " AND bucket < now() - interval '2 days'").fetchone()[0]  # type: ignore[index]
        expired = conn.execute("SELECT count(*) FROM pgbus_insights WHERE bucket < now() - interval '32 days'"
                               ).fetchone()[0]  # type: ignore[index]
    assert (minutes, expired) == (0, 0)
    week = insights.insights(engine, "ThreeSteps", "7d")
    assert (week.started, week.finished) == (5, 4), "compacting keeps every count"
    assert insights.insights(engine, "ThreeSteps", "1h").started == 0


def test_a_bad_window_is_refused() -> None:
    with pytest.raises(InvalidInput, match="window must be one of 1h, 24h, 7d, 30d, not '2y'"):
        insights.window_of("2y")
    assert insights.window_of(None) == "24h"


def test_percentiles_from_bins() -> None:
    assert insights.percentile({}, 0.5, None) is None
    bins = {insights_bin(10.0): 90, insights_bin(1000.0): 10}
    p50, p95 = insights.percentile(bins, 0.5, 1000.0), insights.percentile(bins, 0.95, 1000.0)
    assert p50 is not None and 10 / 1.5 <= p50 <= 10 * 1.5
    assert p95 is not None and 1000 / 1.5 <= p95 <= 1000


def insights_bin(ms: float) -> int:
    import math

    return 0 if ms < 1 else 1 + math.floor(math.log(ms) / math.log(1.5))


def test_step_events_read_their_step_by_key_and_only_those_that_count_fire(app: Flask) -> None:
    """The trigger reads the one step row an event names by key (no scan of the steps, however small
    the table was when the connection planned it), and an event that counts nothing (step_started,
    a later attempt's step_scheduled) adds no delta."""
    engine = engine_of(app)
    run = ThreeSteps.start(order_id=1)
    url = engine.settings.database_url
    assert url
    with psycopg.connect(url) as conn:
        step_id = conn.execute("SELECT id FROM pgbus_workflow_steps WHERE workflow_id = %s",
                               (run.workflow_id,)).fetchone()[0]
        conn.execute("UPDATE pgbus_workflow_steps SET status = 'completed', started_at = now(),"
                     " finished_at = now() + interval '20 ms' WHERE id = %s", (step_id,))
        conn.execute("DELETE FROM pgbus_insight_deltas")  # what start() added; rolled back below
        conn.execute("ANALYZE pgbus_workflows, pgbus_workflow_steps")  # tiny tables, and the planner knows it
        # (the events' foreign key check reads the run its own way: the steps are what the trigger alone reads)
        scans = "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'pgbus_workflow_steps'"
        scanned = conn.execute(scans).fetchone()[0]
        for event, attempt in (("step_started", 1), ("step_scheduled", 2), ("step_completed", 1)):
            conn.execute("INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt)"
                         " VALUES (%s, %s, 'system', %s, 'reserve', %s)", (run.workflow_id, event, step_id, attempt))
        assert conn.execute(scans).fetchone()[0] == scanned, "the steps were not scanned"
        kinds = conn.execute("SELECT kind, label, step FROM pgbus_insight_deltas").fetchall()
        assert sorted(kinds) == [("attempt", "completed", "reserve"), ("duration", "", "reserve"),
                                 ("wait", "", "reserve")]
        conn.rollback()


# 30 days of roll-ups for three classes as the sweep keeps them (5-minute rows for two days, hourly before;
# the other kinds hourly, then daily), and unfolded deltas of the last half minute: 70,000 and 12,000 rows.
PLAN_SEED = """
INSERT INTO pgbus_insights (workflow_class, bucket, step, kind, label, bin, n)
SELECT cls, b, s, k, '', 0, 1
FROM unnest(ARRAY['ThreeSteps', 'Other', 'Third']) cls,
     (SELECT generate_series(date_bin('5 minutes', now() - interval '2 days', timestamptz '2000-01-01'), now(),
                             interval '5 minutes') AS b
      UNION ALL
      SELECT generate_series(date_trunc('hour', now() - interval '31 days'),
                             date_trunc('hour', now() - interval '2 days') - interval '1 hour', interval '1 hour')) f,
     (VALUES ('', 'started'), ('', 'finished'), ('', 'cancelled'), ('reserve', 'attempt'), ('charge', 'attempt'),
             ('ship', 'attempt'), ('reserve', 'duration'), ('charge', 'reached'))
     AS v(s, k)
ON CONFLICT DO NOTHING;
INSERT INTO pgbus_insight_deltas (workflow_class, bucket, step, kind, label, bin, n)
SELECT (ARRAY['ThreeSteps', 'Other', 'Third'])[1 + mod(i, 3)], date_bin('5 minutes', now(), timestamptz '2000-01-01'),
       'reserve', 'attempt', 'completed', 0, 1
FROM generate_series(1, 12000) i;
ANALYZE pgbus_insights; ANALYZE pgbus_insight_deltas;
"""


@pytest.mark.scale  # 70,000 roll-up rows, 12,000 deltas
def test_a_short_window_reads_its_range_of_the_roll_ups_and_the_deltas_in_one_statement(app: Flask) -> None:
    """An hour of one class is a range of the roll-ups' primary key, not a pass over 30 days of three classes;
    the deltas not folded yet are read in the same statement (one snapshot) and counted."""
    engine = engine_of(app)
    with psycopg.connect(engine.settings.database_url, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute(PLAN_SEED)
        now = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        first = now - timedelta(hours=1)
        params = {"cls": "ThreeSteps", "since": first, "coarse": first.replace(minute=0, second=0, microsecond=0),
                  "width": timedelta(minutes=5), "origin": datetime(2000, 1, 1, tzinfo=timezone.utc)}
        row = conn.execute(("EXPLAIN (FORMAT JSON) " + statement("insights_read")).encode(), params).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    steps = nodes(plan[0]["Plan"])
    indexes = {n.get("Index Name") for n in steps}
    scanned = {n.get("Relation Name") for n in steps if n["Node Type"] == "Seq Scan"}
    assert "pgbus_insights_pkey" in indexes and "pgbus_insights" not in scanned, json.dumps(plan, indent=1)
    assert "pgbus_insight_deltas" in {n.get("Relation Name") for n in steps}
    hour = insights.insights(engine, "ThreeSteps", "1h")
    with psycopg.connect(engine.settings.database_url) as conn:  # type: ignore[arg-type]
        rolled = conn.execute("SELECT sum(n) FROM pgbus_insights WHERE workflow_class = 'ThreeSteps' AND bucket >= %s"
                              " AND step = 'reserve' AND kind = 'attempt'", (hour.since,)).fetchone()[0]  # type: ignore[index]
    attempts = {s.step: s.completed_attempts for s in hour.steps}
    assert 12 <= rolled <= 13 and attempts["reserve"] == rolled + 4000, "the roll-ups and the class's deltas"
