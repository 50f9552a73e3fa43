"""PostgreSQL CPU per start() and per step, measured in one process with nothing else on the database.

    python -m bench.pg_step_cpu                          # 300 runs x 5 no-op steps, 3 times
    python -m bench.pg_step_cpu --what-if drop.sql       # the same after running drop.sql on the schema

``bench.scale_out``'s PostgreSQL CPU per step also holds its polls, the sweep and each phase's idle
seconds, spread over the steps: on a loaded machine, where a phase runs for a minute, those weigh. Here
one engine starts N ``FiveNoop`` runs, then one in-process ``SimpleWorker`` (inline continuation on,
as shipped) drains them; the CPU the database's backends spent (read from /proc) is divided by the
starts, then by the steps. Each repeat gets a fresh database (its name carries the process id), so
every connection plans its statements on small tables, as a new installation does. ``--what-if``
runs an SQL file on each fresh database after the migrations (drop a trigger, an index...) to see
what a part of the schema costs. Figures are printed, never asserted; compare in one sitting.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

import psycopg

from bench.chain import flush_redis
from bench.common import DEFAULT_REDIS, DEFAULT_SERVER, create_database, drop_database
from bench.pgbus_runs import engine_for
from bench.probes import backend_pids, cpu_of, cpu_spent
from bench.report import STEPS


def one(args: argparse.Namespace, name: str, what_if: str) -> tuple[float, float]:
    """(ms of PostgreSQL CPU per start, per step) on a fresh database."""
    from rq import SimpleWorker

    from tests.workflows import FiveNoop

    db = create_database(args.server_url, name)
    flush_redis(args.redis_url)
    if what_if:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute(what_if.encode())
    engine: Any = engine_for(db, args.redis_url, True)
    try:
        engine.db.pool.wait()

        def drain() -> None:
            queues = [engine.queue(q) for q in engine.queue_names()]
            SimpleWorker(queues, connection=engine.redis).work(burst=True, logging_level="WARNING")

        FiveNoop.start(-1)  # warm up: the pool's connections, imports, prepared statements
        drain()
        pids = backend_pids(args.server_url, name)
        before = cpu_of(pids)
        for i in range(args.runs):
            FiveNoop.start(i)
        starts = cpu_spent(before, cpu_of(pids)) or 0.0
        before = cpu_of(pids)
        drain()
        steps = cpu_spent(before, cpu_of(pids)) or 0.0
        if not set(backend_pids(args.server_url, name)) <= set(pids):
            print("  (a connection opened while draining: its CPU is not counted)")
        with psycopg.connect(db, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pgbus_workflows WHERE status <> 'finished'").fetchone()
            if row and row[0]:
                print(f"  {row[0]} runs left unfinished")
        return 1000 * starts / args.runs, 1000 * steps / (args.runs * STEPS)
    finally:
        engine.close()
        drop_database(args.server_url, name)
        flush_redis(args.redis_url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="runs of 5 no-op steps per repeat (300)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh databases measured one after another (3)")
    parser.add_argument("--what-if", default="", help="an SQL file run on each fresh database after migrating")
    parser.add_argument("--server-url", default=DEFAULT_SERVER, help="a PostgreSQL URL (its database is not used)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of the benchmark's own (flushed)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.repeat < 1:
        parser.error("--runs and --repeat must be at least 1")
    what_if = ""
    if args.what_if:
        with open(args.what_if, encoding="utf-8") as fh:
            what_if = fh.read()
    starts: list[float] = []
    steps: list[float] = []
    for _ in range(args.repeat):
        s, t = one(args, f"pgbus_bench_pgcpu_{os.getpid()}", what_if)
        starts.append(s)
        steps.append(t)
    print(f"bench.pg_step_cpu: {args.runs} runs x {STEPS} no-op steps, {args.repeat} fresh databases, load average"
          f" {os.getloadavg()[0]:.2f}{', what-if ' + args.what_if if args.what_if else ''}")
    for label, values in (("start()", starts), ("step", steps)):
        print(f"  PostgreSQL CPU per {label + ':':<9} {min(values):.3f}-{max(values):.3f} ms"
              f" (median {statistics.median(values):.3f})")
    print(f"  per step with its share of the start (start / {STEPS}): "
          f"{statistics.median(steps) + statistics.median(starts) / STEPS:.3f} ms (medians)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
