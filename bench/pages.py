"""Every dashboard page and JSON read at 1,000,000 runs, timed through Flask's test client.

    python -m bench.pages                                  # 1,000,000 ongoing runs (about 10 min, 2.5 GB)
    python -m bench.pages --runs 100000 --repeat 20        # a quicker look
    python -m bench.pages --keep ... / --reuse ...         # keep the seeded database / time a kept one again
    python -m bench.pages --reuse --only insights --pending-deltas 100000   # insights beside unfolded deltas

It seeds ``bench.sweep_cost``'s runs (N ongoing: 40% waiting, 30% ready, 20%
paused on a failed step, 10% running; N/2 finished), plus one run with 3,000
attempts and 20,000 audit events (a step that polls every minute for two
days: 2,999 attempts failed and reattempted, the 3,000th scheduled), and one
with long lists (20,000 signals, 1,000 of them pending and some of the newest
with 40 kB payloads; 2,000 child runs; a fan-out batch of 5,000 children), then
VACUUM ANALYZE. A Flask app with ``PgBus`` (``PGBUS_IMPORT=tests.workflows``,
waiting threshold one day, as in ``bench.sweep_cost``) serves the dashboard;
every page and JSON read is requested ``--repeat`` times after two warm-up
requests, and its p50 / p95 / size are printed: the overview, the runs list
with each filter and its second page, needs attention, one group's ids, a run
page (a seeded paused run, the big run, the run with long lists and an older page of
its signals), a batch page (a seeded one, and the 5,000 children). Then the sweep with
nothing to do (``sweep.sweep(engine)``). Then the pages that count or list
overdue runs (the overview, needs attention, the runs list of waiting_overdue,
their JSON, a /metrics scrape) from a second app whose waiting threshold is 5
minutes, so that every waiting run is overdue (on a signal or, since migration
0007, on a batch: 40% of the ongoing runs need a person), and the reads behind
them (stuck_reason_counts, attention_groups, stats, oldest_overdue,
list_runs). Its database is dropped at the end unless ``--keep``. Timings are printed, never asserted.

The insights pages read the roll-ups and the deltas the sweep has not folded yet: ``--pending-deltas N``
leaves about N of them (:data:`DELTAS_SEED`, 4.7 rows a step: 100,000 is what 21,000 steps write, a
30 s sweep interval at 700 steps/s) beside the roll-ups, unfolded, for those pages to read.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from redis import Redis

from bench.common import DEFAULT_REDIS, DEFAULT_SERVER, db_url, drop_database, pct
from bench.sweep_cost import seed, settle
from pgbus_flask import attention

DB_NAME = "pgbus_bench_pages_{n}"
BIG_RUN = "md5('big')::uuid"

# One run whose step polls every minute for two days: 3,000 attempts of s3, 20,000 audit events.
BIG_SEED = f"""
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             created_at, updated_at)
VALUES ({BIG_RUN}, 'FiveNoop', 'ready', 's3', 'bench', 'bench', now() - interval '3001 minutes', now());

INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                  enqueued_at, started_at, finished_at, outcome, output, created_at)
SELECT {BIG_RUN}, 'FiveNoop', 's' || k, 1, 'completed', now() - interval '3001 minutes',
       now() - interval '3001 minutes', now() - interval '3001 minutes', now() - interval '3001 minutes',
       'completed', 'null'::jsonb, now() - interval '3001 minutes'
FROM generate_series(1, 2) k;

INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                  enqueued_at, job_id, started_at, stall_at, finished_at, outcome, error_class,
                                  error_message, worker, created_at)
SELECT {BIG_RUN}, 'FiveNoop', 's3', k, CASE WHEN k < 3000 THEN 'failed' ELSE 'scheduled' END,
       now() - make_interval(mins => 2999 - k), now() - make_interval(mins => 2999 - k), 'big-' || k,
       CASE WHEN k < 3000 THEN now() - make_interval(mins => 3000 - k) + interval '1 second' END,
       CASE WHEN k < 3000 THEN now() - make_interval(mins => 3000 - k) + interval '301 seconds' END,
       CASE WHEN k < 3000 THEN now() - make_interval(mins => 3000 - k) + interval '3 seconds' END,
       CASE WHEN k < 3000 THEN 'reattempted' END,
       CASE WHEN k < 3000 THEN 'TimeoutError' END,
       CASE WHEN k < 3000 THEN 'the report is not ready yet (poll ' || k || ')' END,
       CASE WHEN k < 3000 THEN 'bench-host:4242' END,
       now() - make_interval(mins => 3000 - k)
FROM generate_series(1, 3000) k;

INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details, created_at)
SELECT s.workflow_id, e.event, CASE WHEN s.attempt = 1 AND s.step_name = 's1' AND e.event = 'started'
                                    THEN 'bench' ELSE 'system' END,
       CASE WHEN e.event = 'started' THEN NULL ELSE s.id END, s.step_name, s.attempt,
       CASE WHEN e.event = 'step_failed'
            THEN jsonb_build_object('error_class', s.error_class, 'error_message', s.error_message)
            WHEN e.event = 'step_reattempted' THEN jsonb_build_object('wait', 60) ELSE '{{}}'::jsonb END,
       s.created_at + e.after
FROM pgbus_workflow_steps s
CROSS JOIN (VALUES (0, 'started', interval '0'), (1, 'step_scheduled', interval '0'),
                   (2, 'step_started', interval '1 second'), (3, 'step_completed', interval '3 seconds'),
                   (4, 'step_failed', interval '3 seconds'), (5, 'step_reattempted', interval '3 seconds'))
           AS e(n, event, after)
WHERE s.workflow_id = {BIG_RUN}
  AND CASE e.event WHEN 'started' THEN s.step_name = 's1'
                   WHEN 'step_scheduled' THEN TRUE
                   WHEN 'step_completed' THEN s.status = 'completed'
                   ELSE s.status = 'failed' END
ORDER BY s.id, e.n;

-- The rest of the 20,000: signals the poller was sent along the way.
INSERT INTO pgbus_workflow_events (workflow_id, event, actor, details, created_at)
SELECT {BIG_RUN}, 'signal_received', 'app', jsonb_build_object('signal', 'report_progress', 'signal_id', i),
       now() - interval '3000 minutes' + i * (interval '3000 minutes' / 20000)
FROM generate_series(1, 20000 - (SELECT count(*) FROM pgbus_workflow_events WHERE workflow_id = {BIG_RUN})) i;
"""


LISTS_RUN = "md5('lists')::uuid"
#: The run with long lists: its signals, child runs and fan-out children.
LISTS = {"signals": 20_000, "pending": 1_000, "children": 2_000, "batch": 5_000}

# A run whose step s1 started 2,000 child runs (all finished) and whose s2 fanned out to 5,000 jobs
# (all done), sent 20,000 signals along the way (the 1,000 newest still pending, as many as
# PGBUS_MAX_PENDING_SIGNALS allows; every tenth of the newest 100 a 40 kB payload); s5 is due in an hour.
LISTS_SEED = f"""
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             created_at, updated_at)
VALUES ({LISTS_RUN}, 'FiveNoop', 'ready', 's5', 'bench', 'bench', now() - interval '1 day', now());

INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             created_at, updated_at, finished_at, parent_workflow_id, parent_step_name)
SELECT md5('lists-child-' || i)::uuid, 'FiveNoop', 'finished', 's5', 'bench', 'bench',
       now() - interval '1 day' + i * interval '1 second', now() - interval '20 hours',
       now() - interval '20 hours', {LISTS_RUN}, 's1'
FROM generate_series(1, {LISTS['children']}) i;

INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                  enqueued_at, started_at, finished_at, outcome, output, created_at, child_ids)
SELECT {LISTS_RUN}, 'FiveNoop', 's' || k, 1, CASE WHEN k < 5 THEN 'completed' ELSE 'scheduled' END,
       CASE WHEN k < 5 THEN now() - interval '1 day' ELSE now() + interval '1 hour' END,
       CASE WHEN k < 5 THEN now() - interval '1 day' END,
       CASE WHEN k < 5 THEN now() - interval '1 day' END,
       CASE WHEN k < 5 THEN now() - interval '19 hours' END,
       CASE WHEN k < 5 THEN 'completed' END, CASE WHEN k < 5 THEN 'null'::jsonb END, now() - interval '1 day',
       CASE WHEN k = 1 THEN ARRAY(SELECT md5('lists-child-' || i)::uuid FROM generate_series(1, {LISTS['children']}) i)
       END
FROM generate_series(1, 5) k;

INSERT INTO pgbus_batches (workflow_id, step_id, step_name, func, queue, on_child_failure, status, total, done,
                           created_at, finished_at)
SELECT {LISTS_RUN}, id, 's2', 'bench.notify', 'pgbus', 'fail', 'finished', {LISTS['batch']}, {LISTS['batch']},
       now() - interval '1 day', now() - interval '19 hours'
FROM pgbus_workflow_steps WHERE workflow_id = {LISTS_RUN} AND step_name = 's2';
UPDATE pgbus_workflow_steps s SET batch_id = b.id FROM pgbus_batches b
WHERE b.workflow_id = {LISTS_RUN} AND s.id = b.step_id;

INSERT INTO pgbus_batch_children (batch_id, position, args, status, job_id, enqueued_at, finished_at, result)
SELECT b.id, i, jsonb_build_array(i, 'vendor-' || i, jsonb_build_object('order', 1042, 'region', 'eu-west')),
       'done', 'bench-child-' || i, now() - interval '1 day', now() - interval '19 hours',
       to_jsonb('vendor ' || i || ' notified')
FROM pgbus_batches b, generate_series(0, {LISTS['batch']} - 1) i WHERE b.workflow_id = {LISTS_RUN};

INSERT INTO pgbus_workflow_signals (workflow_id, name, payload, idempotency_key, status, sent_by, claimed_at,
                                    consumed_at, created_at)
SELECT {LISTS_RUN}, 'report_progress',
       CASE WHEN i > {LISTS['signals']} - 100 AND i % 10 = 0
            THEN jsonb_build_object('event', 'report.progress', 'id', i,
                                    'blob', (SELECT string_agg(md5(i::text || k::text), '')
                                             FROM generate_series(1, 1250) k))
            ELSE jsonb_build_object('event', 'report.progress', 'id', i, 'done', i % 100,
                                    'note', repeat('progress ', 20)) END,
       'hook-' || i, CASE WHEN pending THEN 'pending' ELSE 'consumed' END, 'webhook',
       CASE WHEN NOT pending THEN at END, CASE WHEN NOT pending THEN at END, at
FROM generate_series(1, {LISTS['signals']}) i,
     LATERAL (SELECT i > {LISTS['signals']} - {LISTS['pending']} AS pending,
                     now() - interval '1 day' + i * interval '1 second' AS at) s;

INSERT INTO pgbus_workflow_events (workflow_id, event, actor, details, created_at)
SELECT {LISTS_RUN}, 'signal_received', 'webhook', jsonb_build_object('signal', 'report_progress', 'signal_id', id),
       created_at
FROM pgbus_workflow_signals WHERE workflow_id = {LISTS_RUN} ORDER BY id;
"""


@dataclass
class Figure:
    name: str
    p50: float
    p95: float
    status: int | None = None
    size: int | None = None


# Insights roll-ups (pgbus_insights, migration 0008) as 31 days of steady traffic would leave them,
# per class, at the granularity the sweep keeps: runs started, finished and cancelled and attempts
# completed and failed by 5 minutes for two days and by the hour before; the funnel (five steps
# reached), two error classes, and run times and queue waits spread over 8 and 6 bins, by the hour
# for two days and by the day before.
INSIGHTS_SEED = """
WITH fine AS (
    SELECT b, 1 AS scale FROM generate_series(date_bin('5 minutes', now() - interval '2 days',
                                                       timestamptz '2000-01-01 00:00+00'),
                                              now(), interval '5 minutes') b
    UNION ALL
    SELECT b, 12 FROM generate_series(date_trunc('hour', now() - interval '31 days'),
                                      date_trunc('hour', now() - interval '2 days') - interval '1 hour',
                                      interval '1 hour') b
), coarse AS (
    SELECT b, 12 AS scale FROM generate_series(date_trunc('hour', now() - interval '2 days'), now(),
                                               interval '1 hour') b
    UNION ALL
    SELECT b, 288 FROM generate_series(date_trunc('day', now() - interval '31 days', 'UTC'),
                                       date_trunc('day', now() - interval '2 days', 'UTC') - interval '1 day',
                                       interval '1 day') b
), classes AS (SELECT unnest(ARRAY['FiveNoop', 'ThreeSteps', 'WaitsForPayment']) AS cls),
steps AS (SELECT 's' || k AS step, k FROM generate_series(1, 5) k)
INSERT INTO pgbus_insights (workflow_class, bucket, step, kind, label, bin, n, max_ms)
SELECT cls, b, '', kind, '', 0::smallint, 100 * scale, NULL::double precision
FROM fine, classes, unnest(ARRAY['started', 'finished', 'cancelled']) kind
UNION ALL
SELECT cls, b, step, 'attempt', label, 0, CASE label WHEN 'completed' THEN 98 ELSE 3 END * scale, NULL
FROM fine, classes, steps, unnest(ARRAY['completed', 'failed']) label
UNION ALL
SELECT cls, b, '', kind, '', 0, 100 * scale, NULL
FROM coarse, classes, unnest(ARRAY['run_finished', 'run_cancelled']) kind
UNION ALL
SELECT cls, b, step, 'reached', '', 0, (100 - 2 * k) * scale, NULL FROM coarse, classes, steps
UNION ALL
SELECT cls, b, step, 'error', label, 0, (1 + (label = 'TimeoutError')::int) * scale, NULL
FROM coarse, classes, steps, unnest(ARRAY['TimeoutError', 'ValueError']) label
UNION ALL
SELECT cls, b, step, 'duration', '', 10 + d, (20 - abs(d - 4) * 4) * scale, 1.5 ^ (11 + d)
FROM coarse, classes, steps, generate_series(0, 7) d
UNION ALL
SELECT cls, b, step, 'wait', '', 3 + d, (20 - abs(d - 3) * 5) * scale, 1.5 ^ (4 + d)
FROM coarse, classes, steps, generate_series(0, 5) d
"""


# Unfolded insight deltas as the audit trail's trigger writes them within one sweep interval: per step of
# the three classes an attempt (one in 33 failed, with its error), its run time and queue wait bins and the
# next step reached; per fifth step a run started, finished (and its funnel row): 4.7 rows a step, about
# %(n)s rows in all, written in the last 30 s.
DELTAS_SEED = """
INSERT INTO pgbus_insight_deltas (workflow_class, bucket, step, kind, label, bin, n, max_ms)
SELECT (ARRAY['FiveNoop', 'ThreeSteps', 'WaitsForPayment'])[1 + mod(i, 3)],
       date_bin(CASE WHEN v.kind IN ('started', 'finished', 'attempt') THEN interval '5 minutes'
                     ELSE interval '1 hour' END,
                now() - mod(i, 30) * interval '1 second', timestamptz '2000-01-01 00:00+00'),
       v.step, v.kind, v.label, v.bin, 1, v.ms
FROM generate_series(1, %(n)s * 10 / 47) i
CROSS JOIN LATERAL (VALUES
    (true, 's' || (1 + mod(i, 5)), 'attempt', CASE WHEN mod(i, 33) = 0 THEN 'failed' ELSE 'completed' END,
     0::smallint, NULL::double precision),
    (mod(i, 33) = 0, 's' || (1 + mod(i, 5)), 'error', 'TimeoutError', 0::smallint, NULL),
    (true, 's' || (1 + mod(i, 5)), 'duration', '', (10 + mod(i, 8))::smallint, 1.5 ^ (10 + mod(i, 8))),
    (true, 's' || (1 + mod(i, 5)), 'wait', '', (3 + mod(i, 6))::smallint, 1.5 ^ (3 + mod(i, 6))),
    (true, 's' || (1 + mod(i + 1, 5)), 'reached', '', 0::smallint, NULL),
    (mod(i, 5) = 0, '', 'started', '', 0::smallint, NULL),
    (mod(i, 5) = 0, '', 'finished', '', 0::smallint, NULL),
    (mod(i, 5) = 0, '', 'run_finished', '', 0::smallint, NULL)
) AS v(keep, step, kind, label, bin, ms)
WHERE v.keep
"""


def timed(name: str, fn: Callable[[], Any], repeat: int) -> Figure:
    """p50 and p95 of ``repeat`` calls after two warm-up calls; a response's status and size."""
    result: Any = None
    for _ in range(2):
        result = fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    status = getattr(result, "status_code", None)
    size = len(result.get_data()) if hasattr(result, "get_data") else None
    return Figure(name, pct(times, 50), pct(times, 95), status, size)


def prepare(args: argparse.Namespace) -> str:
    """The seeded database's URL: seeded now, or kept by an earlier ``--keep`` (then migrated to
    this code's schema, timing each migration it needed: the backfill of 0004 at this size)."""
    from pgbus_flask.migrate import apply

    name = DB_NAME.format(n=args.runs)
    if args.reuse:
        url = db_url(args.server_url, name)
        with psycopg.connect(url, autocommit=True) as conn:
            t = time.perf_counter()
            applied = apply(conn)
            if applied:
                print(f"  migrated {name}: {', '.join(applied)} in {time.perf_counter() - t:.1f} s", flush=True)
            # The seed's running attempts had a stall deadline an hour after seeding: move it on again,
            # so that the sweep still has nothing to do.
            conn.execute("UPDATE pgbus_workflow_steps SET stall_at = now() + interval '1 hour'"
                         " WHERE status = 'in_progress' AND stall_at < now() + interval '10 minutes'")
            # Fold what an earlier run or a seed stopped half way left in the count and delta tables, and
            # give back their empty pages: a deployment's sweep folds them every interval, and unfolded they
            # are what every overview and every sweep's fold would read (bench/RESULTS.md, 9,000,000 runs).
            settle(conn)
            conn.execute("VACUUM ANALYZE")
        print(f"  reusing {name}", flush=True)
        seed_lists(url)
        seed_insights(url, args.pending_deltas)
        return url
    url = seed(args.server_url, args.runs, name)
    t = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        with conn.transaction():
            conn.execute(BIG_SEED.encode())
            attention.refresh(conn, [conn.execute(f"SELECT {BIG_RUN}").fetchone()[0]])  # type: ignore[index]
        conn.execute("VACUUM ANALYZE")
    print(f"  seeded the run with 3,000 attempts and 20,000 events in {time.perf_counter() - t:.1f} s", flush=True)
    seed_lists(url)
    seed_insights(url, args.pending_deltas)
    return url


def seed_lists(url: str) -> None:
    """The run with long lists (:data:`LISTS_SEED`), unless the database has it already."""
    t = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        if conn.execute(f"SELECT 1 FROM pgbus_workflows WHERE workflow_id = {LISTS_RUN}").fetchone():
            return
        with conn.transaction():
            conn.execute(LISTS_SEED.encode())
            attention.refresh(conn, [conn.execute(f"SELECT {LISTS_RUN}").fetchone()[0]])  # type: ignore[index]
        conn.execute("VACUUM ANALYZE")
    print(f"  seeded the run with {LISTS['signals']:,} signals, {LISTS['children']:,} child runs and a batch of"
          f" {LISTS['batch']:,} in {time.perf_counter() - t:.1f} s", flush=True)


def seed_insights(url: str, pending: int = 0) -> None:
    """Replace the insight roll-ups with :data:`INSIGHTS_SEED` (the seed's own events folded or not), and
    the deltas with about ``pending`` unfolded ones (:data:`DELTAS_SEED`)."""
    t = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM pgbus_insight_deltas")
        conn.execute("DELETE FROM pgbus_insights")
        conn.execute(INSIGHTS_SEED.encode())
        rows = conn.execute("SELECT count(*) FROM pgbus_insights").fetchone()[0]  # type: ignore[index]
        conn.execute("VACUUM ANALYZE pgbus_insights")
        if pending:
            conn.execute(DELTAS_SEED.encode(), {"n": pending})
        deltas = conn.execute("SELECT count(*) FROM pgbus_insight_deltas").fetchone()[0]  # type: ignore[index]
        conn.execute("VACUUM ANALYZE pgbus_insight_deltas")
    print(f"  seeded {rows:,} insight rows (30 days of 3 classes) and {deltas:,} unfolded deltas"
          f" in {time.perf_counter() - t:.1f} s", flush=True)


def targets(url: str) -> dict[str, Any]:
    """Ids the pages are asked for: a paused run, the big run, a batch, a runs page cursor, a group."""
    with psycopg.connect(url) as conn:
        paused = conn.execute("SELECT workflow_id FROM pgbus_workflows WHERE workflow_id = md5('run7')::uuid"
                              ).fetchone()[0]  # type: ignore[index]
        big = conn.execute(f"SELECT {BIG_RUN}").fetchone()[0]  # type: ignore[index]
        batch = conn.execute("SELECT min(id) FROM pgbus_batches").fetchone()[0]  # type: ignore[index]
        middle = conn.execute("SELECT (min(id) + max(id)) / 2 FROM pgbus_workflows").fetchone()[0]  # type: ignore[index]
        lists = conn.execute(f"SELECT {LISTS_RUN}").fetchone()[0]  # type: ignore[index]
        big_batch = conn.execute(f"SELECT id FROM pgbus_batches WHERE workflow_id = {LISTS_RUN}").fetchone()[0]  # type: ignore[index]
        # a page of signals in the middle of the 20,000 (as "Older signals" links to it)
        signals_before = conn.execute(f"SELECT id FROM pgbus_workflow_signals WHERE workflow_id = {LISTS_RUN}"
                                      " ORDER BY id OFFSET 10000 LIMIT 1").fetchone()[0]  # type: ignore[index]
    return {"paused": paused, "big": big, "batch": batch, "middle": middle, "lists": lists, "big_batch": big_batch,
            "signals_before": signals_before}


def measure(args: argparse.Namespace, url: str) -> list[Figure]:
    from flask import Flask

    from pgbus_flask import PgBus, queries, sweep

    app = Flask("bench_pages")
    # A stall threshold of a day: the seed's fan-out children were "sent just now" and the big run's
    # step is due a minute after seeding, so that with --reuse, or a slow seed, the sweep still has
    # nothing to do (what it does find is what bench.sweep_cost measures).
    app.config.update(TESTING=True, SECRET_KEY="bench", PGBUS_DATABASE_URL=url, PGBUS_REDIS_URL=args.redis_url,
                      PGBUS_IMPORT="tests.workflows", PGBUS_WAITING_THRESHOLD=86400, PGBUS_STALL_THRESHOLD=86400)
    PgBus(app)
    engine = app.extensions["pgbus"]
    client = app.test_client()
    ids = targets(url)
    group = max(queries.attention_groups(engine), key=lambda g: g.count)
    smallest = min(queries.attention_groups(engine), key=lambda g: g.count)

    def page(path: str | tuple[str, dict[str, str]]) -> Callable[[], Any]:
        address, headers = path if isinstance(path, tuple) else (path, {})
        return lambda: client.get(address, headers=headers)

    group_query = (f"workflow_class={group.workflow_class}&reason={group.reason}&step={group.step_name}"
                   f"&error_class={group.error_class or ''}")
    pages: list[tuple[str, str | tuple[str, dict[str, str]]]] = [
        ("overview", "/pgbus/"),
        ("api overview", "/pgbus/api/overview"),
        ("runs", "/pgbus/runs"),
        ("runs, second page", f"/pgbus/runs?before={ids['middle']}"),
        ("runs, class", "/pgbus/runs?workflow_class=ThreeSteps"),
        ("runs, status paused", "/pgbus/runs?status=paused"),
        ("runs, status running", "/pgbus/runs?status=running"),
        ("runs, status cancelled (none)", "/pgbus/runs?status=cancelled"),
        ("runs, class and status", "/pgbus/runs?workflow_class=WaitsForPayment&status=ready"),
        ("runs, step", "/pgbus/runs?step=s3"),
        ("runs, step (none)", "/pgbus/runs?step=nowhere"),
        ("runs, reason stalled", "/pgbus/runs?reason=stalled"),
        ("runs, reason paused_error", "/pgbus/runs?reason=paused_error"),
        ("runs, reason paused_manual (none)", "/pgbus/runs?reason=paused_manual"),
        ("runs, reason overdue (none)", "/pgbus/runs?reason=overdue"),
        ("runs, reason waiting_overdue (none)", "/pgbus/runs?reason=waiting_overdue"),
        ("runs, one attention group", f"/pgbus/runs?{group_query}"),
        ("runs, subject", "/pgbus/runs?subject=Order%201042"),
        ("runs, text: run id prefix", f"/pgbus/runs?text={str(ids['paused'])[:8]}"),
        ("runs, text: subject (none)", "/pgbus/runs?text=Order%201042"),
        ("api runs", "/pgbus/api/runs"),
        ("api runs, reason paused_error", "/pgbus/api/runs?reason=paused_error"),
        ("api runs, status cancelled (none)", "/pgbus/api/runs?status=cancelled"),
        ("attention", "/pgbus/attention"),
        ("api attention", "/pgbus/api/attention"),
        ("run page (paused run)", f"/pgbus/runs/{ids['paused']}"),
        ("api run (paused run)", f"/pgbus/api/runs/{ids['paused']}"),
        ("run page (3,000 attempts)", f"/pgbus/runs/{ids['big']}"),
        ("api run (3,000 attempts)", f"/pgbus/api/runs/{ids['big']}"),
        ("run page (20,000 signals, 2,000 children)", f"/pgbus/runs/{ids['lists']}"),
        ("run page, live refresh (same run)", (f"/pgbus/runs/{ids['lists']}", {"X-Pgbus-Live": "1"})),
        ("run page, older signals (same run)", f"/pgbus/runs/{ids['lists']}?signals_before={ids['signals_before']}"),
        ("api run (20,000 signals, 2,000 children)", f"/pgbus/api/runs/{ids['lists']}"),
        ("batch page", f"/pgbus/batches/{ids['batch']}"),
        ("api batch", f"/pgbus/api/batches/{ids['batch']}"),
        ("batch page (5,000 children)", f"/pgbus/batches/{ids['big_batch']}"),
        ("batch page, children after 2,500", f"/pgbus/batches/{ids['big_batch']}?after=2500"),
        ("api batch (5,000 children)", f"/pgbus/api/batches/{ids['big_batch']}"),
        ("insights, 1h", "/pgbus/classes/FiveNoop/insights?window=1h"),
        ("insights, 24h", "/pgbus/classes/FiveNoop/insights?window=24h"),
        ("insights, 7d", "/pgbus/classes/FiveNoop/insights?window=7d"),
        ("insights, 30d", "/pgbus/classes/FiveNoop/insights?window=30d"),
        ("api insights, 30d", "/pgbus/api/classes/FiveNoop/insights?window=30d"),
    ]
    if args.only:
        pages = [p for p in pages if any(word in p[0] for word in args.only.split(","))]
    figures = []
    for name, path in pages:
        figure = timed(name, page(path), args.repeat)
        figures.append(figure)
        print(f"  {name:<44}{figure.p50 * 1000:>9.1f}{figure.p95 * 1000:>9.1f} ms"
              f"{figure.status:>6}{(figure.size or 0) / 1024:>10.1f} KiB", flush=True)
    reads: list[tuple[str, Callable[[], Any]]] = [
        ("queries.attention_ids (biggest group)", lambda: queries.attention_ids(
            engine, group.workflow_class, group.step_name, group.reason, group.error_class)),
        ("queries.attention_ids (smallest group)", lambda: queries.attention_ids(
            engine, smallest.workflow_class, smallest.step_name, smallest.reason, smallest.error_class)),
        ("sweep, nothing to do", lambda: sweep.sweep(engine)),
    ]
    report = sweep.sweep(engine)
    assert report.ran and report.total() == 0, report
    if args.only:
        reads = [r for r in reads if any(word in r[0] for word in args.only.split(","))]
    for name, fn in reads:
        figure = timed(name, fn, args.repeat)
        figures.append(figure)
        print(f"  {name:<44}{figure.p50 * 1000:>9.1f}{figure.p95 * 1000:>9.1f} ms", flush=True)

    # Every waiting run overdue: an app whose waiting threshold is 5 minutes (the seed's runs have waited 10),
    # so that 40% of the ongoing runs need a person (on a signal or, since 0007, a batch). Its pages, then
    # the reads behind them.
    overdue_app = Flask("bench_pages_overdue")
    overdue_app.config.update(TESTING=True, SECRET_KEY="bench", PGBUS_DATABASE_URL=url,
                              PGBUS_REDIS_URL=args.redis_url, PGBUS_IMPORT="tests.workflows",
                              PGBUS_WAITING_THRESHOLD=300, PGBUS_STALL_THRESHOLD=86400, PGBUS_METRICS=True,
                              PGBUS_METRICS_TOKEN="bench-token-0123456789")
    PgBus(overdue_app)
    overdue = overdue_app.extensions["pgbus"]
    overdue_client = overdue_app.test_client()
    waiting = max((g for g in queries.attention_groups(overdue) if g.reason == "waiting_overdue"),
                  key=lambda g: g.count, default=None)
    waiting_query = (f"workflow_class={waiting.workflow_class}&reason=waiting_overdue&step={waiting.step_name}"
                     f"&error_class={waiting.error_class or ''}" if waiting else "reason=waiting_overdue")
    second = overdue_client.get("/pgbus/api/runs?reason=waiting_overdue").get_json().get("next_before")
    overdue_pages: list[tuple[str, str | tuple[str, dict[str, str]]]] = [
        ("40% overdue: overview", "/pgbus/"),
        ("40% overdue: api overview", "/pgbus/api/overview"),
        ("40% overdue: attention", "/pgbus/attention"),
        ("40% overdue: api attention", "/pgbus/api/attention"),
        ("40% overdue: attention, one class", "/pgbus/attention?workflow_class=ThreeSteps"),
        ("40% overdue: runs, reason waiting_overdue", "/pgbus/runs?reason=waiting_overdue"),
        ("40% overdue: runs, waiting_overdue, 2nd page", f"/pgbus/runs?reason=waiting_overdue&before={second}"),
        ("40% overdue: runs, one waiting_overdue group", f"/pgbus/runs?{waiting_query}"),
        ("40% overdue: api runs, reason waiting_overdue", "/pgbus/api/runs?reason=waiting_overdue"),
        ("40% overdue: runs, reason overdue (none)", "/pgbus/runs?reason=overdue"),
        ("40% overdue: metrics scrape", ("/pgbus/metrics", {"Authorization": "Bearer bench-token-0123456789"})),
    ]
    if args.only:
        overdue_pages = [p for p in overdue_pages if any(word in p[0] for word in args.only.split(","))]
    references: list[tuple[str, Callable[[], Any]]] = [
        ("stuck_reason_counts, 40% waiting_overdue", lambda: queries.stuck_reason_counts(overdue)),
        ("attention_groups, 40% waiting_overdue", lambda: queries.attention_groups(overdue)),
        ("stats (host app's card), 40% waiting_overdue", lambda: queries.stats(overdue)),
        ("oldest_overdue, 40% waiting_overdue", lambda: queries.oldest_overdue(overdue)),
        ("list_runs(reason=waiting_overdue), 40%", lambda: queries.list_runs(
            overdue, queries.RunFilter(reason="waiting_overdue"))),
    ]
    if args.only:
        references = [r for r in references if any(word in r[0] for word in args.only.split(","))]
    try:
        for name, path in overdue_pages:
            address, headers = path if isinstance(path, tuple) else (path, {})
            figure = timed(name, lambda a=address, h=headers: overdue_client.get(a, headers=h), args.repeat)
            figures.append(figure)
            print(f"  {name:<44}{figure.p50 * 1000:>9.1f}{figure.p95 * 1000:>9.1f} ms"
                  f"{figure.status:>6}{(figure.size or 0) / 1024:>10.1f} KiB", flush=True)
        for name, fn in references:
            figure = timed(name, fn, args.repeat)
            figures.append(figure)
            print(f"  {name:<44}{figure.p50 * 1000:>9.1f}{figure.p95 * 1000:>9.1f} ms", flush=True)
    finally:
        overdue.close()
        app.extensions["pgbus"].close()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000_000, help="ongoing runs to seed (plus half as many "
                                                                       "finished ones)")
    parser.add_argument("--repeat", type=int, default=30, help="timed requests per page (after two warm-ups)")
    parser.add_argument("--only", help="time only the pages whose name contains one of these comma-separated words")
    parser.add_argument("--server-url", default=DEFAULT_SERVER)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database the script may flush")
    parser.add_argument("--pending-deltas", type=int, default=0,
                        help="insight deltas left unfolded beside the roll-ups (about; default 0)")
    parser.add_argument("--keep", action="store_true", help="keep the seeded database")
    parser.add_argument("--reuse", action="store_true", help="time a database kept by an earlier --keep")
    args = parser.parse_args(argv)
    print(f"bench.pages: {args.runs:,} ongoing runs, {args.repeat} requests a page,"
          f" {datetime.now().astimezone().isoformat(timespec='seconds')}", flush=True)
    try:
        url = prepare(args)
        print(f"\n  {'page or read':<44}{'p50':>9}{'p95':>9}    {'HTTP':>6}{'size':>14}", flush=True)
        measure(args, url)
    finally:
        if not args.keep:
            drop_database(args.server_url, DB_NAME.format(n=args.runs))
        Redis.from_url(args.redis_url).flushdb()  # anything the sweep sent
    return 0


if __name__ == "__main__":
    sys.exit(main())
