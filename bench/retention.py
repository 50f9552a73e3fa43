"""Retention at size: the sweep deletes a day of finished runs while 2 workers run steps at full rate.

    python -m bench.retention                          # 1,000,000 runs a day, 3 cycles
    python -m bench.retention --runs 100000 --cycles 2 # a quicker look
    python -m bench.retention --batch 200 --pause 0.05 # tune the deletion

What it does, on a database of its own (``pgbus_bench_retention_<runs>``, or ``--name``):

* starts ``--workers`` ``pgbus-worker`` processes (inline continuation on, as shipped; their own
  sweep runs with ``PGBUS_RETENTION=forever``, so only the benchmark deletes) and a feeder thread
  that keeps about ``--backlog`` ``FiveNoop`` runs ongoing, so the workers never wait for work.
  Steps/s = 5 x runs finished per second (the feeder's starts minus the ongoing runs, polled every
  second through the partial index of ongoing runs).
* then, ``--cycles`` times: seeds ``--runs`` finished ``FiveNoop`` runs with 5 completed steps each
  and the audit events a real ``FiveNoop`` run of this database wrote (copied from one), their
  ``updated_at`` spread over a day ending ``--margin`` before the retention of 1 day (seeded with
  ``INSERT ... SELECT generate_series`` in transactions of 50,000 runs, oldest first, as time
  would have added them, while the feeder waits and the workers' runs are all done, so that no
  row of today's falls among the day's); ``VACUUM (ANALYZE)``; steps/s over ``--window`` seconds ("before"); then
  calls ``pgbus_flask.sweep.sweep(engine)`` back to back (``--pause`` seconds apart) until one
  deletes nothing, with ``DELETE_BATCH=--batch`` and ``DELETE_ROUNDS=--rounds``: steps/s
  meanwhile ("during"), how long it took, the slowest DELETE statement; then waits up to
  ``--vacuum-wait`` s for autovacuum to visit the three big tables (or runs VACUUM itself, said
  so) and prints each run table's heap and index sizes (``pg_table_size``,
  ``pg_relation_size`` of each index), live and dead tuples, and with pgstattuple (``CREATE
  EXTENSION pgstattuple`` if it can) the heap's free and dead percent
  (``pgstattuple_approx``) and each index's leaf density (``pgstatindex``).

The sizes after each cycle should stay flat: the space a deletion frees is used by the next
day's runs. Figures are printed, never asserted. The database is dropped at the end unless
``--keep``; every process started is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import tempfile
import threading
import time
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from bench.chain import flush_redis, wait_workers
from bench.common import DEFAULT_REDIS, DEFAULT_SERVER, Processes, create_database, drop_database, env_for, positive
from bench.pgbus_runs import pgbus_worker_argv
from bench.probes import CpuMeter
from bench.report import STEPS, log

DAY = 86_400
#: The tables a run's rows live in, the biggest first.
TABLES = ("pgbus_workflow_events", "pgbus_workflow_steps", "pgbus_workflows", "pgbus_workflow_signals",
          "pgbus_batches", "pgbus_batch_children")
BIG = TABLES[:3]
CHUNK = 50_000

SEED_RUNS = """
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             created_at, updated_at, finished_at)
SELECT md5('ret-' || %(cycle)s::int || '-' || i)::uuid, 'FiveNoop', 'finished', 's5', %(digest)s, 'bench',
       t.at - interval '2 seconds', t.at, t.at
FROM generate_series(%(lo)s::int, %(hi)s::int) i,
     LATERAL (SELECT now() - make_interval(secs => %(older)s::float8 + (%(n)s::int - i) * 86400.0 / %(n)s::int) AS at) t
"""
# Steps and events skip their triggers (session_replication_role = replica): the foreign keys point at
# runs inserted just before, and the insight trigger would count a day of runs that never ran.
SEED_STEPS = """
INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at, enqueued_at,
                                  job_id, started_at, stall_at, worker, finished_at, outcome, output, created_at)
SELECT md5('ret-' || %(cycle)s::int || '-' || i)::uuid, 'FiveNoop', 's' || k, 1, 'completed', t.at, t.at,
       'ret-' || %(cycle)s::int || '-' || i || '-' || k, t.at, t.at + interval '10 minutes', 'bench-worker', t.at,
       'completed', 'null'::jsonb, t.at
FROM generate_series(%(lo)s::int, %(hi)s::int) i CROSS JOIN generate_series(1, 5) k,
     LATERAL (SELECT now() - make_interval(secs => %(older)s::float8 + (%(n)s::int - i) * 86400.0 / %(n)s::int) AS at) t
"""
SEED_EVENTS = """
INSERT INTO pgbus_workflow_events (workflow_id, event, actor, reason, step_name, attempt, details, created_at)
SELECT md5('ret-' || %(cycle)s::int || '-' || i)::uuid, e.event, e.actor, e.reason, e.step_name, e.attempt,
       e.details, t.at
FROM generate_series(%(lo)s::int, %(hi)s::int) i
     CROSS JOIN jsonb_to_recordset(%(events)s) AS e(event text, actor text, reason text, step_name text,
                                                     attempt integer, details jsonb),
     LATERAL (SELECT now() - make_interval(secs => %(older)s::float8 + (%(n)s::int - i) * 86400.0 / %(n)s::int) AS at) t
"""
ONGOING = "SELECT count(*) FROM pgbus_workflows WHERE status IN ('ready', 'running', 'waiting', 'paused')"



def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=positive, default=1_000_000, help="finished runs seeded a cycle (1,000,000)")
    parser.add_argument("--cycles", type=positive, default=3, help="seed a day, delete it: how many times (3)")
    parser.add_argument("--workers", type=positive, default=2, help="pgbus-worker processes (2)")
    parser.add_argument("--backlog", type=positive, default=600, help="ongoing runs the feeder keeps (600)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of the 'before' measure (30)")
    parser.add_argument("--batch", type=positive, default=None, help="DELETE_BATCH (as shipped: 500)")
    parser.add_argument("--rounds", type=positive, default=None, help="DELETE_ROUNDS (as shipped: 20)")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between two sweeps (0: back to back)")
    parser.add_argument("--margin", type=float, default=600.0, help="seconds the newest seeded run is past retention")
    parser.add_argument("--vacuum-wait", type=float, default=600.0,
                        help="seconds to wait for autovacuum after a deletion before running VACUUM (600)")
    parser.add_argument("--horizon-wait", type=float, default=900.0,
                        help="seconds to wait for older transactions on the server to end before that (900)")
    parser.add_argument("--name", default=None, help="database name (pgbus_bench_retention_<runs>)")
    parser.add_argument("--keep", action="store_true", help="keep the database at the end")
    parser.add_argument("--server-url", default=DEFAULT_SERVER, help="a PostgreSQL URL (its database is not used)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of the benchmark's own (flushed)")
    return parser.parse_args(argv)


class Throughput(threading.Thread):
    """Keeps ``backlog`` runs ongoing and samples (time, runs finished) every second."""

    def __init__(self, url: str, backlog: int) -> None:
        super().__init__(name="bench-feeder", daemon=True)
        self.url, self.backlog = url, backlog
        self.started = 0
        self.samples: list[tuple[float, int]] = []
        self.ongoing: list[tuple[float, int]] = []
        self.stopping = threading.Event()
        self.paused = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        from tests.workflows import FiveNoop

        try:
            with psycopg.connect(self.url, autocommit=True) as poll:
                last = 0.0
                while not self.stopping.is_set():
                    ongoing = int(poll.execute(ONGOING).fetchone()[0])  # type: ignore[index]
                    now = time.monotonic()
                    self.ongoing.append((now, ongoing))
                    if now - last >= 1.0:
                        self.samples.append((now, self.started - ongoing))
                        last = now
                    for _ in range(0 if self.paused.is_set() else min(self.backlog - ongoing, 100)):
                        FiveNoop.start(self.started)
                        self.started += 1
                    if ongoing >= self.backlog or self.paused.is_set():
                        self.stopping.wait(0.05)
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def rate(self, since: float, until: float) -> float:
        """Steps/s between two moments (the samples nearest inside them)."""
        inside = [s for s in self.samples if since <= s[0] <= until]
        if len(inside) < 2:
            return float("nan")
        (t0, f0), (t1, f1) = inside[0], inside[-1]
        return STEPS * (f1 - f0) / (t1 - t0)

    def least_ongoing(self, since: float, until: float) -> int:
        """The fewest runs ongoing between two moments: above 0, the workers never waited for work."""
        return min((n for t, n in self.ongoing if since <= t <= until), default=-1)

    def per_second(self, since: float, until: float) -> list[float]:
        inside = [s for s in self.samples if since <= s[0] <= until]
        return [STEPS * (b[1] - a[1]) / (b[0] - a[0]) for a, b in itertools.pairwise(inside)]


def template_events(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    """The audit events of one finished FiveNoop run the workers ran, to copy onto every seeded run."""
    row = conn.execute("SELECT workflow_id FROM pgbus_workflows WHERE status = 'finished' ORDER BY id"
                       " LIMIT 1").fetchone()
    assert row is not None, "no FiveNoop run finished during the warm-up"
    rows = conn.execute("SELECT event, actor, reason, step_name, attempt, details FROM pgbus_workflow_events"
                        " WHERE workflow_id = %s ORDER BY id", (row[0],)).fetchall()
    return [dict(zip(("event", "actor", "reason", "step_name", "attempt", "details"), r, strict=True)) for r in rows]


def seed(url: str, cycle: int, n: int, older: float, events: list[dict[str, Any]], digest: str) -> float:
    began = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        for lo in range(1, n + 1, CHUNK):
            params = {"cycle": cycle, "lo": lo, "hi": min(n, lo + CHUNK - 1), "n": n, "older": older,
                      "digest": digest, "events": Jsonb(events)}
            with conn.transaction():
                conn.execute(SEED_RUNS, params)
                conn.execute("SET LOCAL session_replication_role = replica")
                conn.execute(SEED_STEPS, params)
                conn.execute(SEED_EVENTS, params)
        conn.execute(f"VACUUM (ANALYZE) {', '.join(BIG)}")
    return time.perf_counter() - began


def sizes(conn: psycopg.Connection[Any], stattuple: bool) -> dict[str, Any]:
    """Per table: heap and index bytes, live and dead tuples, and pgstattuple's figures where it is there."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    out: dict[str, Any] = {}
    for table in TABLES:
        heap, live, dead = conn.execute(
            "SELECT pg_table_size(c.oid), s.n_live_tup, s.n_dead_tup FROM pg_class c"
            " JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = %s", (table,)).fetchone()  # type: ignore[misc]
        indexes = conn.execute("SELECT i.relname, pg_relation_size(i.oid) FROM pg_index x"
                               " JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid"
                               " WHERE t.relname = %s ORDER BY 1", (table,)).fetchall()
        entry: dict[str, Any] = {"heap": heap, "live": live, "dead": dead, "indexes": dict(indexes),
                                 "total": heap + sum(size for _, size in indexes)}
        if stattuple and table in BIG:
            free, dead_pct = conn.execute("SELECT approx_free_percent, dead_tuple_percent"
                                          " FROM pgstattuple_approx(%s::regclass)", (table,)).fetchone()  # type: ignore[misc]
            entry["free_pct"], entry["dead_pct"] = free, dead_pct
            entry["density"] = {name: conn.execute("SELECT avg_leaf_density FROM pgstatindex(%s::regclass)",
                                                   (name,)).fetchone()[0]  # type: ignore[index]
                                for name, _ in indexes}
        out[table] = entry
    return out


def vacuum_counts(conn: psycopg.Connection[Any]) -> dict[str, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    rows = conn.execute("SELECT relname, autovacuum_count + vacuum_count FROM pg_stat_user_tables"
                        " WHERE relname = ANY(%s)", (list(BIG),)).fetchall()
    return {name: int(count) for name, count in rows}


#: Transactions that keep VACUUM of this database from removing rows deleted at xid %(mark)s: any that had an
#: xid by then (in any database: every snapshot taken here counts it as running), or a snapshot here older.
HOLDERS = """
SELECT datname, backend_type, now() - xact_start AS open_for, left(query, 60) AS query FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'
  AND ((backend_xid IS NOT NULL AND age(backend_xid) >= age(%(mark)s::text::xid))
       OR (datname = current_database() AND backend_xmin IS NOT NULL AND age(backend_xmin) >= age(%(mark)s::text::xid)))
"""


def wait_for_horizon(conn: psycopg.Connection[Any], timeout: float) -> str:
    """Wait until no transaction on the server is older than now: till then VACUUM keeps what was deleted
    (another database's long INSERT holds it back too, as other benchmarks' seeds do on a shared server)."""
    mark = conn.execute("SELECT pg_current_xact_id()::text").fetchone()[0]  # type: ignore[index]
    began = time.monotonic()
    holders: list[Any] = []
    while time.monotonic() - began < timeout:
        holders = conn.execute(HOLDERS, {"mark": mark}).fetchall()
        if not holders:
            return f"older transactions ended after {time.monotonic() - began:.0f} s"
        time.sleep(2)
    return f"still held after {timeout:.0f} s by {holders[:3]}"


def wait_for_vacuum(conn: psycopg.Connection[Any], before: dict[str, int], timeout: float, horizon_wait: float) -> str:
    """Wait until autovacuum visited each big table since ``before``; VACUUM those it did not reach."""
    horizon = wait_for_horizon(conn, horizon_wait)
    log(f"  vacuum horizon: {horizon}")
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        now = vacuum_counts(conn)
        if all(now[t] > before[t] for t in BIG):
            return f"autovacuum visited all three tables in {time.monotonic() - began:.0f} s"
        time.sleep(5)
    now = vacuum_counts(conn)
    missed = [t for t in BIG if now[t] <= before[t]]
    began = time.monotonic()
    conn.execute(f"VACUUM {', '.join(missed)}")
    return (f"autovacuum had not visited {', '.join(missed)} after {timeout:.0f} s: VACUUM by hand took"
            f" {time.monotonic() - began:.0f} s")


def delete_all(engine: Any, pause: float) -> tuple[float, int, int, list[float]]:
    """Sweeps back to back until one deletes nothing: seconds, runs deleted, sweeps, each sweep's seconds."""
    from pgbus_flask.sweep import sweep

    began = time.perf_counter()
    deleted = sweeps = 0
    took: list[float] = []
    while True:
        t = time.perf_counter()
        report = sweep(engine)
        took.append(time.perf_counter() - t)
        sweeps += 1
        if report.errors:
            raise RuntimeError(f"the sweep failed: {report.errors}")
        deleted += report.deleted_runs
        if not report.deleted_runs:
            return time.perf_counter() - began, deleted, sweeps, took
        if pause:
            time.sleep(pause)


def mb(value: float) -> str:
    return f"{value / 2**20:,.0f}"


def print_sizes(label: str, found: dict[str, Any]) -> None:
    print(f"\n  sizes {label}:")
    print(f"  {'table':<24}{'heap MB':>9}{'idx MB':>8}{'total MB':>9}{'live':>12}{'dead':>12}{'free %':>8}"
          f"{'dead %':>8}")
    for table, e in found.items():
        free = f"{e['free_pct']:.1f}" if "free_pct" in e else "-"
        dead = f"{e['dead_pct']:.1f}" if "dead_pct" in e else "-"
        print(f"  {table:<24}{mb(e['heap']):>9}{mb(e['total'] - e['heap']):>8}{mb(e['total']):>9}"
              f"{e['live']:>12,}{e['dead']:>12,}{free:>8}{dead:>8}")
    for table in BIG:
        e = found[table]
        parts = [f"{name.removeprefix(table + '_') or name} {mb(size)}"
                 + (f" ({e['density'][name]:.0f}% full)" if "density" in e else "")
                 for name, size in e["indexes"].items()]
        print(f"    {table} indexes MB: " + ", ".join(parts))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pgbus_flask import sweep as sweep_module
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine

    if args.batch:
        sweep_module.DELETE_BATCH = args.batch
    if args.rounds:
        sweep_module.DELETE_ROUNDS = args.rounds
    name = args.name or f"pgbus_bench_retention_{args.runs}"
    print(f"bench.retention: {args.runs:,} finished runs a cycle x {args.cycles} cycles, {args.workers} workers,"
          f" DELETE_BATCH {sweep_module.DELETE_BATCH}, DELETE_ROUNDS {sweep_module.DELETE_ROUNDS}, pause"
          f" {args.pause} s, {os.cpu_count()} cores, {datetime.now().astimezone().isoformat(timespec='seconds')},"
          f" load average {os.getloadavg()[0]:.2f}", flush=True)
    url = create_database(args.server_url, name)
    flush_redis(args.redis_url)
    engine = Engine(Settings.load({"PGBUS_DATABASE_URL": url, "PGBUS_REDIS_URL": args.redis_url,
                                   "PGBUS_RETENTION": DAY})).make_default()
    results: list[dict[str, Any]] = []
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
                stattuple = True
            except psycopg.Error as exc:
                log(f"no pgstattuple ({exc.__class__.__name__}): sizes without free and dead percent")
                stattuple = False
        with tempfile.TemporaryDirectory(prefix="pgbus-bench-") as logdir, Processes() as procs, \
                psycopg.connect(url, autocommit=True) as conn:
            for i in range(args.workers):
                procs.start(pgbus_worker_argv(None, burst=False),
                            env_for(url, args.redis_url, PGBUS_RETENTION="forever"),
                            os.path.join(logdir, f"worker-{i}.log"))
            wait_workers(args.redis_url, args.workers)
            feeder = Throughput(url, args.backlog)
            feeder.start()
            time.sleep(10)  # warm up: imports, pools, prepared statements
            events = template_events(conn)
            digest = conn.execute("SELECT definition_digest FROM pgbus_workflows LIMIT 1").fetchone()[0]  # type: ignore[index]
            log(f"workers up; a FiveNoop run writes {len(events)} audit events: seeded runs get the same")
            print_sizes("before the first seed", sizes(conn, stattuple))
            for cycle in range(1, args.cycles + 1):
                # The day seeded went in a day ago, after the runs before it and before the workers' runs
                # of today: it waits for the workers' runs to finish, so that their rows do not fall among
                # the day's in the tables and indexes (where they would keep the day's pages from being freed).
                log(f"cycle {cycle}: seeding {args.runs:,} finished runs once the workers' runs are done")
                feeder.paused.set()
                while int(conn.execute(ONGOING).fetchone()[0]):  # type: ignore[index]
                    time.sleep(0.5)
                seeded = seed(url, cycle, args.runs, DAY + args.margin, events, digest)
                feeder.paused.clear()
                time.sleep(5)  # the backlog fills again
                log(f"cycle {cycle}: seeded in {seeded:.0f} s; measuring {args.window:.0f} s before the deletion")
                meter = CpuMeter([p.pid for p in procs.procs], args.server_url, name)
                t0 = time.monotonic()
                meter.start()
                time.sleep(args.window)
                cpu_before = meter.stop()
                t1 = time.monotonic()
                vacuums = vacuum_counts(conn)
                meter.start()
                seconds, deleted, sweeps, took = delete_all(engine, args.pause)
                cpu_during = meter.stop()
                t2 = time.monotonic()
                log(f"cycle {cycle}: {deleted:,} runs deleted in {seconds:.0f} s by {sweeps} sweeps")
                during = feeder.rate(t1, t2)
                before = feeder.rate(t0, t1)
                log(f"cycle {cycle}: steps/s before {before:.0f}, during {during:.0f}"
                    f" ({1 - during / before:.0%} less), fewest runs ongoing {feeder.least_ongoing(t0, t2)}")
                pg_before = (cpu_before["postgres"] or 0) / (t1 - t0)
                pg_during = (cpu_during["postgres"] or 0) / seconds
                log(f"cycle {cycle}: PostgreSQL cores busy (this database) before {pg_before:.2f}, during"
                    f" {pg_during:.2f}: about {1000 * (pg_during - pg_before) * seconds / max(deleted, 1):.2f} ms of"
                    f" PostgreSQL CPU per run deleted; other processes kept {cpu_before['others_cores'] or 0:.2f}"
                    f" and {cpu_during['others_cores'] or 0:.2f} cores busy")
                vacuum = wait_for_vacuum(conn, vacuums, args.vacuum_wait, args.horizon_wait)
                log(f"cycle {cycle}: {vacuum}")
                if feeder.error:
                    raise RuntimeError(f"the feeder failed: {feeder.error!r}")
                found = sizes(conn, stattuple)
                results.append({"cycle": cycle, "seed": seeded, "before": before, "during": during,
                                "seconds": seconds, "deleted": deleted, "sweeps": sweeps,
                                "sweep_median": statistics.median(took), "sweep_max": max(took),
                                "during_low": min(feeder.per_second(t1, t2) or [float("nan")]),
                                "least_ongoing": feeder.least_ongoing(t0, t2),
                                "vacuum": vacuum, "sizes": found, "load": os.getloadavg()[0]})
                print_sizes(f"after cycle {cycle}", found)
            feeder.stopping.set()
            feeder.join(10)
            procs.stop()
    finally:
        engine.close()
        if not args.keep:
            drop_database(args.server_url, name)
        flush_redis(args.redis_url)
    print(f"\n{'cycle':>5}{'seed s':>8}{'before steps/s':>16}{'during steps/s':>16}{'drop':>7}{'delete s':>10}"
          f"{'runs/s':>9}{'sweeps':>8}{'sweep p50 s':>12}{'sweep max s':>12}{'total MB':>10}{'load':>6}")
    for r in results:
        total = sum(e["total"] for e in r["sizes"].values())
        drop = 1 - r["during"] / r["before"] if r["before"] else float("nan")
        print(f"{r['cycle']:>5}{r['seed']:>8.0f}{r['before']:>16.0f}{r['during']:>16.0f}{drop:>7.0%}"
              f"{r['seconds']:>10.0f}{r['deleted'] / r['seconds']:>9,.0f}{r['sweeps']:>8}{r['sweep_median']:>12.2f}"
              f"{r['sweep_max']:>12.2f}{mb(total):>10}{r['load']:>6.1f}{r['least_ongoing']:>12,}")
    print("  steps/s: 5 x FiveNoop runs finished per second by the workers; drop: 1 - during/before; total MB: the"
          " six run tables with their indexes after the cycle's deletion and vacuum; min backlog: the fewest runs"
          " ongoing while measuring (above 0: the workers never waited for work).")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(main())
