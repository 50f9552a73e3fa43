"""The sweep's cost on ongoing runs with nothing to do, at 10,000 and 100,000 runs.

    python -m bench.sweep_cost                        # 10,000 and 100,000 runs
    python -m bench.sweep_cost --sizes 2000,20000     # quicker

For each size the script seeds, with ``INSERT ... SELECT generate_series``, N
ongoing runs none of which the sweep must touch:

* 40% waiting on a signal with no deadline (1 in 40 of them parked on an open
  fan-out batch of 10 children sent just now),
* 30% ready with their step scheduled a day ahead,
* 20% paused on a failed step (a third of them on StepStalled),
* 10% running an attempt whose stall deadline is an hour ahead,

each with two completed earlier steps, plus N/2 finished runs of 5 completed
steps updated a day ago (inside PGBUS_RETENTION's 30 days), then ANALYZE. The
sweep runs with a stall threshold of a day (``STALL``), so that the children
sent at seed time are not due however long the seed took. It
times ``pgbus_flask.sweep.sweep(engine)`` (median of ``--repeat``) and each of
its parts, prints the EXPLAIN (ANALYZE, BUFFERS) plan of every statement the
sweep sends (captured while it runs), and times the dashboard reads of
``pgbus_flask.queries`` (status counts, stuck reason counts, attention groups,
the ids of one group, a runs page filtered by reason; the stuck counts and
groups again with a 5-minute waiting threshold, so that every waiting run
without a batch is overdue) with the plan of each stuck read and of any slow
read. It also times the stuck-reason query as it was before migration 0002
(one latest-step probe per ongoing run), as a reference, and checks that
``queries.stuck_reason_counts`` gives the same counts. The two sizes are
printed side by side. Its databases are dropped at the end. Timings are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from bench.common import DEFAULT_REDIS, DEFAULT_SERVER, bulk_load, create_database, db_url, drop_database, ms

DB_PREFIX = "pgbus_bench_sweep"
SLOW = 0.050  # a dashboard read slower than this (median) gets its plan printed
# The sweep's stall threshold here: a day, so that the fan-out children "sent just now" stay not due however
# long the seed took (at 1,000,000 runs and more it takes longer than the default 5 minutes, and the sweep
# would then resend them all, 500 a sweep, instead of finding nothing to do).
STALL = 86400

SEED = """
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             paused_at, created_at, updated_at)
SELECT md5('run' || i)::uuid,
       (ARRAY['FiveNoop', 'ThreeSteps', 'WaitsForPayment'])[1 + i % 3],
       CASE WHEN i % 10 < 4 THEN 'waiting' WHEN i % 10 < 7 THEN 'ready' WHEN i % 10 < 9 THEN 'paused'
            ELSE 'running' END,
       's3', 'bench', 'bench',
       CASE WHEN i % 10 IN (7, 8) THEN now() - interval '1 hour' END,
       now() - interval '2 hours', now() - interval '1 hour'
FROM generate_series(%(lo)s, %(hi)s) i;

INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             created_at, updated_at, finished_at)
SELECT md5('done' || i)::uuid, 'FiveNoop', 'finished', 's5', 'bench', 'bench',
       now() - interval '2 days', now() - interval '1 day', now() - interval '1 day'
FROM generate_series(%(lo2)s, %(hi2)s) i;

-- Fan-out: one run in a hundred (1 in 40 waiting runs) parks on an open batch of 10 children sent just now.
INSERT INTO pgbus_batches (workflow_id, step_id, step_name, func, queue, on_child_failure, status, total)
SELECT md5('run' || i)::uuid, 0, 's3', 'tests.workflows.vendor_child', 'pgbus', 'fail', 'open', 10
FROM generate_series(%(lo)s, %(hi)s) i WHERE i % 100 = 0;
INSERT INTO pgbus_batch_children (batch_id, position, args, status, job_id, enqueued_at)
SELECT b.id, p, '[1]'::jsonb, 'pending', 'bench-' || b.id || '-' || p, now()
FROM pgbus_batches b CROSS JOIN generate_series(0, 9) p WHERE b.step_id = 0;

-- Two completed steps per ongoing run, then its current one.
INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                  enqueued_at, started_at, finished_at, outcome, output)
SELECT md5('run' || i)::uuid, (ARRAY['FiveNoop', 'ThreeSteps', 'WaitsForPayment'])[1 + i % 3],
       's' || k, 1, 'completed', now() - interval '2 hours', now() - interval '2 hours',
       now() - interval '2 hours', now() - interval '2 hours', 'completed', 'null'::jsonb
FROM generate_series(%(lo)s, %(hi)s) i CROSS JOIN generate_series(1, 2) k;

INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                  enqueued_at, job_id, started_at, stall_at, finished_at, outcome,
                                  error_class, error_message, waiting_since, timeout_at, batch_id)
SELECT md5('run' || i)::uuid, (ARRAY['FiveNoop', 'ThreeSteps', 'WaitsForPayment'])[1 + i % 3], 's3', 1,
       CASE WHEN i % 10 < 4 THEN 'waiting' WHEN i % 10 < 7 THEN 'scheduled' WHEN i % 10 < 9 THEN 'failed'
            ELSE 'in_progress' END,
       CASE WHEN i % 10 BETWEEN 4 AND 6 THEN now() + interval '1 day' ELSE now() - interval '1 hour' END,
       now() - interval '1 hour', 'job-' || i,
       CASE WHEN i % 10 >= 7 THEN now() - interval '1 hour' END,
       CASE WHEN i % 10 = 9 THEN now() + interval '1 hour' END,
       CASE WHEN i % 10 IN (7, 8) THEN now() - interval '1 hour' END,
       CASE WHEN i % 10 IN (7, 8) THEN 'failed' END,
       CASE WHEN i % 10 IN (7, 8) THEN
           CASE WHEN i % 3 = 0 THEN 'pgbus_flask.errors.StepStalled' ELSE 'ValueError' END END,
       CASE WHEN i % 10 IN (7, 8) THEN 'seeded failure ' || (i % 7) END,
       CASE WHEN i % 10 < 4 THEN now() - interval '10 minutes' END,
       NULL,
       b.id
FROM generate_series(%(lo)s, %(hi)s) i
LEFT JOIN pgbus_batches b ON b.workflow_id = md5('run' || i)::uuid;

UPDATE pgbus_batches b SET step_id = s.id FROM pgbus_workflow_steps s
WHERE s.batch_id = b.id AND b.step_id = 0;

INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                  enqueued_at, started_at, finished_at, outcome, output)
SELECT md5('done' || i)::uuid, 'FiveNoop', 's' || k, 1, 'completed', now() - interval '2 days',
       now() - interval '2 days', now() - interval '2 days', now() - interval '1 day', 'completed', 'null'::jsonb
FROM generate_series(%(lo2)s, %(hi2)s) i CROSS JOIN generate_series(1, 5) k;

-- One audit event per run, so the cascade of the retention DELETE has something to look at.
INSERT INTO pgbus_workflow_events (workflow_id, event, actor)
SELECT md5('run' || i)::uuid, 'started', 'bench' FROM generate_series(%(lo)s, %(hi)s) i
UNION ALL SELECT md5('done' || i)::uuid, 'started', 'bench' FROM generate_series(%(lo2)s, %(hi2)s) i;
"""


# The stuck-reason counts as pgbus_flask.queries computed them before migration 0002 (one lateral
# latest-step probe for every paused, ready and waiting run, then a filter), with the rules of migration
# 0007 (paused_error: the latest step failed; waiting_overdue: on a batch too), kept only as a reference:
# the bench checks that queries.stuck_reason_counts gives the same answer, and times both side by side.
REFERENCE_STUCK_COUNTS = """
SELECT workflow_class, reason, count(*) FROM (
  SELECT w.workflow_class, CASE
      WHEN w.status = 'paused' AND s.status = 'failed' AND s.error_class = 'pgbus_flask.errors.StepStalled'
          THEN 'stalled'
      WHEN w.status = 'paused' AND s.status = 'failed' AND s.outcome IS DISTINCT FROM 'paused'
           AND s.outcome IS DISTINCT FROM 'reattempted' THEN 'paused_error'
      WHEN w.status = 'paused' THEN 'paused_manual'
      WHEN w.status = 'ready' AND s.status = 'scheduled' AND s.scheduled_at < %(overdue)s THEN 'overdue'
      WHEN %(waiting)s AND w.status = 'waiting' AND s.status = 'waiting' AND s.timeout_at IS NULL
           AND s.waiting_since < %(waiting_cutoff)s THEN 'waiting_overdue'
    END AS reason
  FROM pgbus_workflows w
  LEFT JOIN LATERAL (SELECT status, error_class, outcome, scheduled_at, timeout_at, waiting_since
                     FROM pgbus_workflow_steps WHERE workflow_id = w.workflow_id ORDER BY id DESC LIMIT 1) s ON TRUE
  WHERE w.status IN ('paused', 'ready', 'waiting')
) x WHERE reason IS NOT NULL GROUP BY 1, 2
"""
# Dashboard reads whose plan is always printed (for the sizes --plans shows), slow or not.
PLANNED = ("stuck_reason_counts", "attention_groups", "attention_ids(biggest group)", "list_runs(reason=paused_error)",
           "stuck_reason_counts, every waiting run overdue")


def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median seconds of ``repeat`` calls after one warm-up call, and the last result."""
    result = fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def capture_statements(fn: Callable[[], Any]) -> list[tuple[str, Any]]:
    """Every (query, params) that ``fn`` sends through ``Cursor.execute`` (``Connection.execute`` goes
    through it too), composed queries rendered as the SQL text sent."""
    seen: list[tuple[str, Any]] = []
    real = psycopg.Cursor.execute

    def execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if isinstance(query, bytes):
            text = query.decode()
        elif isinstance(query, sql.Composable):
            text = query.as_string(self.connection)
        else:
            text = str(query)
        seen.append((text, params))
        return real(self, query, params, **kw)

    psycopg.Cursor.execute = execute  # type: ignore[method-assign]
    try:
        fn()
    finally:
        psycopg.Cursor.execute = real  # type: ignore[method-assign]
    return seen


def explain(url: str, query: str, params: Any, settings: list[str] | None = None, costs: bool = False) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of one statement, inside a transaction that is rolled back, after the
    ``SET LOCAL`` statements the read sent before it (queries.py turns JIT off for the stuck reads)."""
    with psycopg.connect(url) as conn:
        for setting in settings or []:
            conn.execute(setting.encode())
        # With costs, PostgreSQL also prints the JIT compilation a plan paid for (COSTS OFF hides it).
        options = "ANALYZE, BUFFERS" + ("" if costs else ", COSTS OFF")
        rows = conn.execute((f"EXPLAIN ({options}) " + query).encode(), params).fetchall()
        conn.rollback()
    return "\n".join("    " + r[0] for r in rows)


#: Runs a seed transaction writes (and a transaction of the attention rebuild refreshes).
CHUNK = 500_000


def rebuild_in_chunks(conn: psycopg.Connection[Any]) -> None:
    """``attention.rebuild`` in transactions of CHUNK runs each, then the counts in one."""
    from pgbus_flask import db

    top = conn.execute("SELECT COALESCE(max(id), 0) FROM pgbus_workflows").fetchone()[0]  # type: ignore[index]
    for lo in range(0, top + 1, CHUNK):
        conn.execute("SELECT count(*) FROM pgbus_workflows WHERE id >= %s AND id < %s"
                     " AND (status IN ('ready', 'running', 'waiting', 'paused') OR attention_reason IS NOT NULL)"
                     " AND pgbus_workflow_attention(workflow_id)", (lo, lo + CHUNK))
    with conn.transaction():
        db.run(conn, "counts_clear")
        db.run(conn, "counts_recount")


def settle(conn: psycopg.Connection[Any]) -> None:
    """Fold what the seed's rows left to fold (the insight deltas of its audit events, the count rows),
    so that the sweeps timed have nothing to do (the VACUUM after it clears the folded rows)."""
    from pgbus_flask import attention, insights

    while insights.fold(conn, None)[0]:
        pass
    attention.fold(conn)
    # The seed's attention rebuild added two count rows per ongoing run, and its events one delta each: what
    # the sweep folded out of them leaves a heap of thousands of empty pages that its folds would then scan
    # each time (see bench/RESULTS.md). A table the sweep has been folding for a while holds about its keys.
    conn.execute("VACUUM FULL pgbus_run_counts")
    conn.execute("VACUUM FULL pgbus_insight_deltas")


def reuse(server_url: str, name: str) -> str | None:
    """The URL of database ``name`` kept by an earlier ``--keep`` run, brought up to the current
    migrations (then analyzed); None when there is no such database."""
    from pgbus_flask.migrate import apply

    with psycopg.connect(server_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is None:
            return None
    url = db_url(server_url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        apply(conn)
        settle(conn)
        conn.execute("VACUUM ANALYZE")
    print(f"  reusing {name} (kept by an earlier run, migrated)", flush=True)
    return url


def seed(server_url: str, n: int, name: str | None = None) -> str:
    """Seed database ``name`` (default ``pgbus_bench_sweep_N``) with ``SEED`` for ``n`` ongoing runs."""
    name = name or f"{DB_PREFIX}_{n}"
    url = create_database(server_url, name)
    t = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        # In chunks of CHUNK runs, each its own transaction: one transaction of ten million rows would hold
        # back every vacuum on the server for the hour it takes.
        chunks = [(lo, min(lo + CHUNK - 1, n)) for lo in range(1, n + 1, CHUNK)]
        bulk_load(conn, [SEED.replace("%(lo)s", str(lo)).replace("%(hi)s", str(hi))
                         .replace("%(lo2)s", str((lo + 1) // 2)).replace("%(hi2)s", str(hi // 2)).encode()
                         for lo, hi in chunks])
        # The rows went in without the runner: give them the attention columns and counts it keeps.
        rebuild_in_chunks(conn)
        settle(conn)
        conn.execute("VACUUM ANALYZE")
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM pgbus_workflows), (SELECT count(*) FROM pgbus_workflow_steps),"
            " (SELECT count(*) FROM pgbus_batch_children), pg_size_pretty(pg_database_size(current_database()))"
        ).fetchone()
        assert counts is not None
    print(f"  seeded {n:,} ongoing runs (+{n // 2:,} finished): {counts[0]:,} runs, {counts[1]:,} step rows,"
          f" {counts[2]:,} fan-out children, database {counts[3]}, in {time.perf_counter() - t:.1f} s", flush=True)
    return url


def measure(args: argparse.Namespace, n: int) -> dict[str, Any]:
    from pgbus_flask import queries, sweep
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine

    print(f"\n== {n:,} ongoing runs ==", flush=True)
    out: dict[str, Any] = {}
    engines: list[Engine] = []
    try:
        name = f"{args.prefix}_{n}"
        url = (args.reuse and reuse(args.server_url, name)) or seed(args.server_url, n, name)
        engine = Engine(Settings.load({"PGBUS_DATABASE_URL": url, "PGBUS_REDIS_URL": args.redis_url,
                                       "PGBUS_WAITING_THRESHOLD": 86400, "PGBUS_STALL_THRESHOLD": STALL}))
        engines.append(engine)
        engine.db.pool.wait()
        out["sweep"], report = timed(lambda: sweep.sweep(engine), args.repeat)
        out["report"] = report
        for part in sweep.PARTS:
            out[part.__name__] = timed(lambda p=part: p(engine, sweep.SweepReport()), args.repeat)[0]  # type: ignore
        statements = capture_statements(lambda: sweep.sweep(engine))
        out["plans"] = []
        settings = [q for q, _ in statements if q.startswith("SET LOCAL") or "set_config(" in q]
        for query, params in statements:
            sent = query.lstrip("( \n").upper().startswith(("SELECT", "WITH", "INSERT", "UPDATE", "DELETE"))
            if "advisory" in query or query in settings or not sent:
                continue  # the lock, its transaction's BEGIN and ROLLBACK, the settings
            out["plans"].append((query, explain(url, query, params, settings, costs=True)))

        if args.sweep_only:
            return out
        # Every waiting run (on a signal or, since 0007, a batch) is overdue when the waiting threshold is
        # 5 minutes (they have waited 10): the waiting_overdue branch then returns 40% of the ongoing runs.
        overdue_engine = Engine(Settings.load({"PGBUS_DATABASE_URL": url, "PGBUS_REDIS_URL": args.redis_url,
                                               "PGBUS_WAITING_THRESHOLD": 300}))
        engines.append(overdue_engine)
        reads: dict[str, Callable[[], Any]] = {
            "status_counts": lambda: queries.status_counts(engine),
            "stuck_reason_counts": lambda: queries.stuck_reason_counts(engine),
            "stuck_reason_counts(one class)": lambda: queries.stuck_reason_counts(engine, "FiveNoop"),
            "attention_groups": lambda: queries.attention_groups(engine),
        }
        groups = queries.attention_groups(engine)
        if groups:
            group = max(groups, key=lambda g: g.count)
            reads["attention_ids(biggest group)"] = lambda: queries.attention_ids(
                engine, group.workflow_class, group.step_name, group.reason, group.error_class)
        reads["list_runs(first page)"] = lambda: queries.list_runs(engine, queries.RunFilter())
        reads["list_runs(reason=paused_error)"] = lambda: queries.list_runs(
            engine, queries.RunFilter(reason="paused_error"))
        reads["stuck_reason_counts, every waiting run overdue"] = lambda: queries.stuck_reason_counts(overdue_engine)
        reads["attention_groups, every waiting run overdue"] = lambda: queries.attention_groups(overdue_engine)
        out["reads"] = {}
        out["read_plans"] = {}
        for name, fn in reads.items():
            seconds, _ = timed(fn, args.repeat)
            out["reads"][name] = seconds
            if seconds > SLOW or name in PLANNED:
                sent = [s for s in capture_statements(fn) if "now()" not in s[0] or "FROM" in s[0]]
                query, params = max(sent, key=lambda s: len(s[0]))
                settings = [s[0] for s in sent if s[0].startswith("SET LOCAL")]
                out["read_plans"][name] = explain(url, query, params, settings)
        out["groups"] = len(groups)

        # The pre-0002 query as a reference: same counts as queries.stuck_reason_counts, and its time.
        out["reference"] = {}
        out["reference_same"] = {}
        with psycopg.connect(url, autocommit=True) as conn:
            for label, eng in (("stuck_reason_counts", engine),
                               ("stuck_reason_counts, every waiting run overdue", overdue_engine)):
                params, waiting = queries._params(eng, None, None)
                params["waiting"] = waiting

                def reference(p: dict[str, Any] = params) -> dict[tuple[str, str], int]:
                    rows = conn.execute(REFERENCE_STUCK_COUNTS.encode(), p).fetchall()
                    return {(r[0], r[1]): r[2] for r in rows}

                out["reference"][label], answer = timed(reference, args.repeat)
                out["reference_same"][label] = answer == queries.stuck_reason_counts(eng)
    finally:
        for eng in engines:
            eng.close()
        if not args.keep:
            drop_database(args.server_url, f"{args.prefix}_{n}")
    return out


def main(argv: list[str] | None = None) -> int:
    from pgbus_flask import sweep

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="10000,100000", help="ongoing runs to seed, comma-separated")
    parser.add_argument("--repeat", type=int, default=7, help="timed calls per figure (median; one warm-up first)")
    parser.add_argument("--server-url", default=DEFAULT_SERVER)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="only for the engine's settings (not used)")
    parser.add_argument("--plans", choices=("largest", "all", "none"), default="largest",
                        help="print the sweep's plans for the largest size (default), every size, or none")
    parser.add_argument("--keep", action="store_true", help="keep the seeded databases")
    parser.add_argument("--sweep-only", action="store_true",
                        help="time the sweep and print its plans, not the dashboard reads")
    parser.add_argument("--reuse", action="store_true",
                        help="use the databases an earlier --keep run left (migrated to the current schema) instead of"
                             " seeding again: before and after a change on the same rows (implies --keep)")
    parser.add_argument("--prefix", default=DB_PREFIX, help=f"database names: PREFIX_SIZE (default {DB_PREFIX})")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    args.keep = args.keep or args.reuse
    print(f"bench.sweep_cost: sizes {sizes}, median of {args.repeat},"
          f" {datetime.now().astimezone().isoformat(timespec='seconds')}")
    results = {n: measure(args, n) for n in sizes}

    names = [f"{n:,} runs" for n in sizes]
    print("\n" + f"{'sweep (nothing to do)':<34}" + "".join(f"{x:>16}" for x in names))
    for key in ("sweep", *(part.__name__ for part in sweep.PARTS)):
        label = "whole sweep(engine)" if key == "sweep" else f"  part {key.lstrip('_')}"
        print(f"{label:<34}" + "".join(f"{ms(results[n][key]):>16}" for n in sizes))
    print(f"{'  rows it acted on':<34}" + "".join(f"{results[n]['report'].total():>16}" for n in sizes))
    shown = sizes if args.plans == "all" else sizes[-1:] if args.plans == "largest" else []
    if args.sweep_only:
        for n in shown:
            print(f"\n-- plans of every statement of one sweep at {n:,} runs (EXPLAIN ANALYZE, BUFFERS) --")
            for query, plan in results[n]["plans"]:
                print("\n  " + " ".join(query.split())[:300])
                print(plan)
        return 0
    print("\n" + f"{'dashboard reads (queries.py)':<48}" + "".join(f"{x:>16}" for x in names))
    for name in results[sizes[0]]["reads"]:
        print(f"{name:<48}" + "".join(f"{ms(results[n]['reads'].get(name, float('nan'))):>16}" for n in sizes))

    print("\n" + f"{'pre-0002 stuck query (reference)':<48}" + "".join(f"{x:>16}" for x in names))
    for label in results[sizes[0]]["reference"]:
        print(f"{label:<48}" + "".join(f"{ms(results[n]['reference'][label]):>16}" for n in sizes)
              + "   (same counts as queries.stuck_reason_counts: "
              + ", ".join(str(results[n]["reference_same"][label]) for n in sizes) + ")")

    shown = sizes if args.plans == "all" else sizes[-1:] if args.plans == "largest" else []
    for n in shown:
        print(f"\n-- plans of every statement of one sweep at {n:,} runs (EXPLAIN ANALYZE, BUFFERS) --")
        for query, plan in results[n]["plans"]:
            print("\n  " + " ".join(query.split())[:300])
            print(plan)
    for n in sizes:
        for name, plan in results[n]["read_plans"].items():
            if n in shown or results[n]["reads"][name] > SLOW:
                print(f"\n-- dashboard read at {n:,} runs: {name} (median {ms(results[n]['reads'][name])}) --")
                print(plan)
    return 0


if __name__ == "__main__":
    sys.exit(main())
