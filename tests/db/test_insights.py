"""Insights per class, from the roll-ups the audit trail's trigger and the sweep keep: the counts
agree with the runs that really ran, each transition counted once."""

from __future__ import annotations

import psycopg
import pytest
from flask import Flask

from pgbus_flask import insights, sweep
from pgbus_flask.errors import InvalidInput
from tests.support import work
from tests.support.seeds import seed_insights as seed
from tests.support.webtools import engine_of, sql
from tests.workflows import ThreeSteps


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


def test_every_transition_counts_once_across_folds(app: Flask) -> None:
    """Sweeping again adds nothing; a delta written after a fold is folded by the next one."""
    seed(app)
    engine = engine_of(app)
    before = insights.insights(engine, "ThreeSteps", "1h").as_json()
    sweep.sweep(engine)
    after = insights.insights(engine, "ThreeSteps", "1h").as_json()
    assert after["steps"] == before["steps"] and after["funnel"] == before["funnel"]
    assert (after["started"], after["finished"]) == (before["started"], before["finished"]) == (5, 4)
    with app.app_context():
        ThreeSteps.start(order_id=7)
        work(engine)
    assert insights.insights(engine, "ThreeSteps", "1h").started == 5, "not folded yet: insights trail a sweep"
    sweep.sweep(engine)
    assert insights.insights(engine, "ThreeSteps", "1h").started == 6


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
