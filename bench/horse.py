"""What one horse of a forking worker costs: CPU, PostgreSQL sessions, and where its time goes.

    python -m bench.horse                        # 100 runs x 5 one-step jobs, both worker kinds
    python -m bench.horse --kind fork --profile  # pgbus' PgbusForkWorker, each horse under cProfile

The script makes a database of its own, starts N ``FiveNoop`` runs with inline continuation off
(so every job is one step), then drains them with ONE burst worker (no sweep, no scheduler):

* ``fork``: ``pgbus-worker --worker-class ...PgbusForkWorker`` (the parent built the engine and
  imported PGBUS_IMPORT's modules before it forks);
* ``rq``: a plain ``rq worker`` (RQ's own forking ``Worker``: the parent has no pgbus engine, each
  horse builds one from the PGBUS_* environment); ``rq-preload``: the same with
  ``-c pgbus_flask.rq_config`` (the parent builds it once, before it forks);
* ``rq-noop``: RQ's own floor: the same number of independent no-op RQ jobs (``bench.jobs.noop``,
  nothing of pgbus) drained by a plain ``rq worker``.

Each worker is ``bench.horse_workers``' measured subclass: per job, the horse's CPU (from
``wait4``), its parent's CPU for the job, and the wall time from fork to reap. The database's
``sessions`` counter (pg_stat_database) says how many PostgreSQL connections the horses opened
per job. ``--pgbouncer session`` (or ``transaction``) puts a PgBouncer in front
(tests/support/pgbouncer.py; its 2 server connections then serve every horse). With ``--profile``
every horse runs under cProfile and the summed profile is printed (in CPU seconds; cProfile slows
the horse down: its times are for where, not how much). Figures are printed, never asserted; the
database is dropped and the Redis database flushed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import psycopg

from bench.common import DEFAULT_REDIS, DEFAULT_SERVER, ROOT, VENV_BIN, create_database, drop_database, positive
from bench.probes import named_redis

DB_NAME = f"pgbus_bench_horse_{os.getpid()}"
KINDS = ("fork", "rq", "rq-preload", "rq-noop")


def _argv(kind: str, redis_url: str) -> list[str]:
    if kind == "fork":
        return [os.path.join(VENV_BIN, "pgbus-worker"), "--burst", "--no-sweep", "--no-scheduler", "--log-level",
                "WARNING", "--worker-class", "bench.horse_workers.MeasuredForkWorker"]
    argv = [os.path.join(VENV_BIN, "rq"), "worker", "--burst", "--url", redis_url, "--logging_level", "WARNING",
            "-w", "bench.horse_workers.MeasuredWorker"]
    if kind == "rq-preload":
        argv += ["-c", "pgbus_flask.rq_config"]
    return [*argv, "bench_noop" if kind == "rq-noop" else "pgbus"]


def _db_counters(server_url: str) -> tuple[int, int]:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT sessions, xact_commit FROM pg_stat_database WHERE datname = %s",
                           (DB_NAME,)).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def measure(args: argparse.Namespace, kind: str, profile_dir: str | None) -> dict[str, Any]:
    """One burst worker of ``kind`` drains ``args.runs`` x 5 one-step jobs; what it cost."""
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    redis = named_redis(args.redis_url)
    redis.flushdb()
    settings = {"PGBUS_DATABASE_URL": db, "PGBUS_REDIS_URL": args.redis_url, "PGBUS_INLINE_STEPS": "0"}
    engine = Engine(Settings.load(settings)).make_default()
    stack = contextlib.ExitStack()
    try:
        if kind == "rq-noop":
            from rq import Queue

            from bench.jobs import noop

            queue = Queue("bench_noop", connection=redis)
            for i in range(args.runs * 5):
                queue.enqueue(noop, i, 0, result_ttl=0)
        else:
            for i in range(args.runs):
                FiveNoop.start(i)
        engine.close()
        with tempfile.NamedTemporaryFile(prefix="pgbus-horse-", suffix=".jsonl", delete=False) as fh:
            out = fh.name
        env = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_")}
        if args.pgbouncer:
            from tests.support.pgbouncer import PgBouncer, pgbouncer_binary

            binary = pgbouncer_binary()
            assert binary, "--pgbouncer: no pgbouncer binary (apt-get install pgbouncer)"
            bouncer = stack.enter_context(contextlib.closing(_Bouncer(PgBouncer(binary, db, pool_mode=args.pgbouncer))))
            settings = {**settings, "PGBUS_DATABASE_URL": bouncer.url,
                        "PGBUS_DATABASE_POOLER": "transaction" if args.pgbouncer == "transaction" else "session"}
        env.update(settings, PGBUS_IMPORT="tests.workflows", BENCH_HORSE_OUT=out,
                   PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""))
        if profile_dir:
            env["BENCH_HORSE_PROFILE"] = profile_dir
        sessions0, xacts0 = _db_counters(args.server_url)
        children0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        done = subprocess.run(_argv(kind, args.redis_url), env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=args.timeout)
        wall = time.perf_counter() - t
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        time.sleep(1.0)  # backends that just ended flush their statistics
        sessions1, xacts1 = _db_counters(args.server_url)
        with open(out) as fh:
            rows = [json.loads(line) for line in fh if line.strip()]
        os.unlink(out)
        with psycopg.connect(db, autocommit=True) as conn:
            completed = len(rows) if kind == "rq-noop" else conn.execute(
                "SELECT count(*) FROM pgbus_workflow_steps WHERE status = 'completed'").fetchone()[0]  # type: ignore[index]
    finally:
        stack.close()
        engine.close()
        redis.flushdb()
        redis.close()
        drop_database(args.server_url, DB_NAME)
    if done.returncode != 0:
        print(f"{kind}: worker exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    jobs = len(rows) or 1
    horse = [1000 * (r["horse_user"] + r["horse_sys"]) for r in rows]
    parent = [1000 * (r["parent_user"] + r["parent_sys"]) for r in rows]
    total_cpu = 1000 * (children.ru_utime + children.ru_stime - children0.ru_utime - children0.ru_stime)
    return {
        "kind": kind, "jobs": len(rows), "completed": completed, "seconds": wall,
        "horse_ms_median": statistics.median(horse) if horse else float("nan"),
        "horse_ms_mean": statistics.fmean(horse) if horse else float("nan"),
        "horse_user_ms": 1000 * statistics.fmean(r["horse_user"] for r in rows) if rows else float("nan"),
        "horse_sys_ms": 1000 * statistics.fmean(r["horse_sys"] for r in rows) if rows else float("nan"),
        "horse_minflt": statistics.fmean(r["horse_minflt"] for r in rows) if rows else float("nan"),
        "parent_ms_mean": statistics.fmean(parent) if parent else float("nan"),
        "wall_ms_median": 1000 * statistics.median(r["wall"] for r in rows) if rows else float("nan"),
        "process_ms_per_job": total_cpu / jobs,  # everything the worker command spent, start-up included
        "sessions_per_job": (sessions1 - sessions0) / jobs,
        "xacts_per_job": (xacts1 - xacts0) / jobs,
        "load": os.getloadavg()[0],
    }


class _Bouncer:
    """A started PgBouncer, stopped by close()."""

    def __init__(self, bouncer: Any) -> None:
        self.bouncer = bouncer
        bouncer.start()
        self.url = bouncer.url

    def close(self) -> None:
        self.bouncer.stop()


def print_profile(folder: str, top: int) -> None:
    files = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".prof")]
    if not files:
        print("no horse profile was written")
        return
    stats = pstats.Stats(files[0], stream=sys.stdout)
    for path in files[1:]:
        stats.add(path)
    stats.files = []  # not one header line per horse
    print(f"\n--- {len(files)} horses under cProfile, summed: by cumulative time ---")
    stats.sort_stats("cumulative").print_stats(top)
    print("--- by own time ---")
    stats.sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=positive, default=100, help="FiveNoop runs, i.e. 5x as many one-step jobs")
    parser.add_argument("--kind", choices=(*KINDS, "all"), default="all")
    parser.add_argument("--repeat", type=int, default=1, help="measure each kind this many times, alternating")
    parser.add_argument("--profile", action="store_true", help="run every horse under cProfile, print the sum")
    parser.add_argument("--profile-dir", help="keep the horses' profiles in this folder (with --profile)")
    parser.add_argument("--top", type=int, default=40, help="profile lines to print")
    parser.add_argument("--pgbouncer", choices=("session", "transaction"),
                        help="put a PgBouncer in this pool mode between the workers and PostgreSQL")
    parser.add_argument("--server-url", default=DEFAULT_SERVER)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of the benchmark's own (flushed)")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    kinds = KINDS if args.kind == "all" else (args.kind,)
    print(f"bench.horse: {args.runs} runs x 5 one-step jobs, one burst worker, {os.cpu_count()} cores,"
          f"{' through PgBouncer (' + args.pgbouncer + ' mode),' if args.pgbouncer else ''}"
          f" load average {os.getloadavg()[0]:.2f}")
    results = []
    for _ in range(args.repeat):
        for kind in kinds:
            with contextlib.ExitStack() as stack:
                folder = None
                if args.profile:
                    folder = args.profile_dir or stack.enter_context(
                        tempfile.TemporaryDirectory(prefix="pgbus-horse-prof-"))
                    os.makedirs(folder, exist_ok=True)
                res = measure(args, kind, folder)
                results.append(res)
                if folder:
                    print_profile(folder, args.top)
    print(f"\n{'kind':<12}{'jobs':>6}{'done':>6}{'horse ms':>10}{'(median)':>10}{'user':>7}{'sys':>7}{'parent':>8}"
          f"{'process':>9}{'wall ms':>9}{'PG sess':>9}{'xacts':>7}{'minflt':>8}{'load':>7}")
    for r in results:
        print(f"{r['kind']:<12}{r['jobs']:>6}{r['completed']:>6}{r['horse_ms_mean']:>10.2f}{r['horse_ms_median']:>10.2f}"
              f"{r['horse_user_ms']:>7.2f}{r['horse_sys_ms']:>7.2f}{r['parent_ms_mean']:>8.2f}"
              f"{r['process_ms_per_job']:>9.2f}{r['wall_ms_median']:>9.2f}{r['sessions_per_job']:>9.2f}"
              f"{r['xacts_per_job']:>7.2f}{r['horse_minflt']:>8.0f}{r['load']:>7.1f}")
    print("  per job (one step): horse ms = the horse's CPU (user + sys, wait4), mean and median; parent = the"
          " worker's own CPU for the job (fork, monitoring); process = all the worker command spent, start-up"
          " included, per job; wall ms = fork to reap, median; PG sess = PostgreSQL sessions opened per job"
          " (pg_stat_database.sessions); minflt = the horse's minor page faults (copy-on-write).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
