"""Steps per second end to end: pgbus-flask (inline continuation on and off) beside a plain RQ
chain and DBOS Transact, and what a step costs.

    python -m bench.steps                     # 1,000 runs x 5 no-op steps, 2 workers (about 8 min)
    python -m bench.steps --runs 200 --skip-fork --skip-burst --skip-dbos   # a quick look

What it does, in one invocation, on one PostgreSQL server and one Redis database, in order:

* **live** (first: these are the figures other processes disturb most): 2 ``pgbus-worker``
  processes (default worker class, i.e. RQ's SimpleWorker; scheduler and sweep on as
  shipped) wait, with inline continuation on (as shipped) or off (``PGBUS_INLINE_STEPS=0``);
  the script starts N ``FiveNoop`` runs (timing every ``start()``) and polls the database
  until every run is finished. End to end = first run's ``created_at`` to last run's
  ``finished_at`` (database clock). Transactions per step = the database's ``xact_commit``
  delta (the script's own polls taken off) / 5N, with the starts, and without them (the
  starts' transactions, counted in process, taken off). Then the same for 2 ``rq worker``
  processes and N chains of 5 no-op jobs linked by ``depends_on``
  (``--maintenance-interval 1``, ``--worker-ttl 16``: an idle worker runs maintenance
  every second), end to end = first job's ``created_at`` to last job's ``ended_at``; and
  DBOS Transact (N 5-step workflows in one process, its system database on the same
  PostgreSQL) when ``dbos`` is installed. CPU time of the workers, the database's
  backends and the Redis server is read from /proc and INFO, with what every other
  process on the machine spent meanwhile.
* **in process**: one in-process ``SimpleWorker`` runs 300 runs with inline continuation
  on, then off, then 300 plain RQ chains; the script counts every statement and BEGIN /
  COMMIT / SAVEPOINT the starts and the steps send (:class:`bench.probes.PgCounter`) and
  times the claim, the outcome, the enqueue and RQ's work around the job
  (:class:`bench.probes.Timers`): the per-step breakdown. Then 50 runs (and chains) again
  through a TCP proxy in front of each server that counts round trips
  (:class:`bench.probes.TurnCounter`).
* ``start()`` latency with no worker running.
* **Redis commands**: the live phases again at ``--redis-runs`` runs with MONITOR on,
  counting the commands the workers send per job (the benchmark's own counted apart).
* optionally **burst** (runs enqueued first, burst workers drain and exit: what is left is
  "unfinished") and **forking workers**.

Every database and Redis key it makes is dropped/flushed at the end (its database names
carry the process id); every process it starts, and every process they fork, is killed.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from typing import Any

import psycopg

from bench.chain import (
    chain_burst,
    chain_in_process,
    chain_live,
    flush_redis,
    jobs_run,
    record_redis,
    wait_workers,
)
from bench.common import (
    DEFAULT_REDIS,
    DEFAULT_SERVER,
    VENV_BIN,
    Processes,
    create_database,
    drop_database,
    env_for,
    ms,
    pct,
    settle_stats,
)
from bench.dbos_steps import dbos_child, dbos_run
from bench.probes import CpuMeter, PgCounter, RedisMonitor, Timers, TurnCounter, named_redis, stack_of
from bench.report import STEPS, Result, cpu_table, log, ratio, redis_table, table

# The process id keeps two benchmarks on one server out of each other's databases.
DB_NAME = f"pgbus_bench_steps_{os.getpid()}"
DBOS_DB = f"pgbus_bench_dbos_{os.getpid()}"
OFF = {"PGBUS_INLINE_STEPS": "0"}


def _mode(inline: bool) -> dict[str, str]:
    return {} if inline else OFF


def _engine(db: str, redis_url: str, inline: bool = True) -> Any:
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine

    engine = Engine(Settings.load({"PGBUS_DATABASE_URL": db, "PGBUS_REDIS_URL": redis_url, **_mode(inline)}))
    # Named connections, so the Redis counts can tell the starts' enqueues from the workers'.
    engine._redis = named_redis(redis_url)
    return engine.make_default()


# -- pgbus, live ---------------------------------------------------------------------


def pgbus_worker_argv(worker_class: str | None, burst: bool) -> list[str]:
    argv = [os.path.join(VENV_BIN, "pgbus-worker"), "--log-level", "WARNING"]
    if worker_class:
        argv += ["--worker-class", worker_class]
    if burst:
        argv.append("--burst")
    return argv


def _pgbus_ongoing(conn: psycopg.Connection[Any]) -> int:
    """Runs not yet finished (a cheap poll: the partial index of ongoing runs)."""
    row = conn.execute("SELECT count(*) FROM pgbus_workflows WHERE status IN ('ready', 'running', 'waiting',"
                       " 'paused')").fetchone()
    assert row is not None
    return int(row[0])


#: Statements _pgbus_check sends (each an autocommit transaction the xact count takes off).
_CHECK_STATEMENTS = 3


def _pgbus_check(conn: psycopg.Connection[Any], runs: int) -> tuple[int, list[str]]:
    """Steps not completed (of the 5N expected), and anything odd (several attempts of a step)."""
    completed = conn.execute("SELECT count(*) FROM pgbus_workflow_steps WHERE status = 'completed'").fetchone()[0]
    notes = []
    multi = conn.execute("SELECT count(*) FROM pgbus_workflow_steps WHERE attempt > 1").fetchone()[0]
    if multi:
        notes.append(f"{multi} steps took more than one attempt")
    dup = conn.execute("SELECT count(*) FROM (SELECT workflow_id, step_name FROM pgbus_workflow_steps"
                       " WHERE status = 'completed' GROUP BY 1, 2 HAVING count(*) > 1) x").fetchone()[0]
    if dup:
        notes.append(f"{dup} steps completed more than once")
    return runs * STEPS - int(completed), notes


def pgbus_live(args: argparse.Namespace, label: str, *, inline: bool = True, worker_class: str | None = None,
               imports: str = "tests.workflows", monitor: bool = False) -> tuple[Result, list[float]]:
    """Workers up first, then N starts; poll until all finished. With ``monitor`` the workers'
    Redis commands are counted (and the timing is not comparable)."""
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    res = Result(label, workers=args.workers)
    latencies: list[float] = []
    engine = _engine(db, args.redis_url, inline)
    polls = 0
    try:
        stacks: list[str] = []
        with Processes(on_leftover=lambda pid: stacks.append(f"pid {pid}: {stack_of(pid)}")) as procs, \
                psycopg.connect(db, autocommit=True) as poll, contextlib.ExitStack() as stack:
            for i in range(args.workers):
                procs.start(pgbus_worker_argv(worker_class, burst=False),
                            env_for(db, args.redis_url, PGBUS_IMPORT=imports, **_mode(inline)),
                            os.path.join(args.logdir, f"pgbus-{label.replace(' ', '_')}-{i}.log"))
            wait_workers(args.redis_url, args.workers)
            engine.db.pool.wait()
            before = settle_stats(args.server_url, DB_NAME)
            cpu = CpuMeter([p.pid for p in procs.procs], args.server_url, DB_NAME, args.redis_url)
            mon = stack.enter_context(RedisMonitor(args.redis_url)) if monitor else None
            idle = mon.idle_rate() if mon else 0.0
            window = time.monotonic()
            if not monitor:
                cpu.start()
            for i in range(args.runs):
                t = time.perf_counter()
                FiveNoop.start(i)
                latencies.append(time.perf_counter() - t)
            deadline = time.monotonic() + args.timeout
            ongoing = args.runs
            while time.monotonic() < deadline:
                ongoing = _pgbus_ongoing(poll)
                polls += 1
                if not ongoing:
                    break
                time.sleep(0.2)
            if not monitor:
                res.cpu = cpu.stop()
            res.jobs = jobs_run(args.redis_url)
            stack.close()
            if mon is not None:
                record_redis(res, mon, idle, time.monotonic() - window)
            finished = args.runs - ongoing
            span = poll.execute("SELECT extract(epoch FROM max(finished_at) - min(created_at))"
                                " FROM pgbus_workflows WHERE status = 'finished'").fetchone()[0]
            polls += 1
            res.seconds = float(span or "nan")
            res.unfinished, notes = _pgbus_check(poll, args.runs)
            res.notes += notes
            polls += _CHECK_STATEMENTS
            res.steps = args.runs * STEPS - res.unfinished
            if finished < args.runs:
                res.notes.append(f"timed out after {args.timeout}s with {finished}/{args.runs} runs finished")
            poll.close()
            engine.close()
            procs.stop()
        if stacks:
            res.notes.append(f"{len(stacks)} processes forked by the workers were still alive after their worker"
                             " stopped (killed); what they were doing:\n" + "\n".join(stacks))
        after = settle_stats(args.server_url, DB_NAME)
        if not monitor:
            total = after - before - polls
            res.xacts_per_step = total / (args.runs * STEPS)
    finally:
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
    return res, latencies


def pgbus_burst(args: argparse.Namespace, label: str, *, inline: bool = True) -> Result:
    """N runs started first; burst workers drain and exit; what is left is unfinished."""
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    res = Result(label, workers=args.workers)
    engine = _engine(db, args.redis_url, inline)
    try:
        for i in range(args.runs):
            FiveNoop.start(i)
        engine.close()
        with Processes() as procs:
            t0 = time.perf_counter()
            for i in range(args.workers):
                procs.start(pgbus_worker_argv(None, burst=True), env_for(db, args.redis_url, **_mode(inline)),
                            os.path.join(args.logdir, f"pgbus-burst-{i}.log"))
            if not procs.wait(args.timeout):
                res.notes.append(f"burst workers still running after {args.timeout}s (killed)")
            res.seconds = time.perf_counter() - t0
        with psycopg.connect(db, autocommit=True) as conn:
            res.unfinished, res.notes = _pgbus_check(conn, args.runs)
            res.jobs = int(conn.execute("SELECT count(DISTINCT job_id) FROM pgbus_workflow_steps").fetchone()[0])
        res.steps = args.runs * STEPS - res.unfinished
        res.notes.insert(0, "time = burst workers' launch to exit (process start-up included); jobs = distinct"
                            " job ids on the attempts")
    finally:
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
    return res


def start_latency_idle(args: argparse.Namespace) -> tuple[list[float], float | None]:
    """N starts with no worker running; and the cores other processes kept busy meanwhile."""
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    engine = _engine(db, args.redis_url)
    out: list[float] = []
    try:
        engine.db.pool.wait()
        for i in range(20):  # warm up: imports, pool, prepared statements
            FiveNoop.start(-i)
        cpu = CpuMeter([], args.server_url, DB_NAME, args.redis_url)
        cpu.start()
        for i in range(args.runs):
            t = time.perf_counter()
            FiveNoop.start(i)
            out.append(time.perf_counter() - t)
        others = cpu.stop()["others_cores"]
    finally:
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
    return out, others


# -- in process: round trips and the per-step breakdown ------------------------------------


def in_process(args: argparse.Namespace, inline: bool, runs: int) -> dict[str, Any]:
    """``runs`` FiveNoop runs started, then drained by one in-process SimpleWorker. What the
    starts send PostgreSQL (per start) and what the steps send (per step), and where a step's
    time goes (ms per step): the first claim of a job, the outcome transaction (with the
    inline claim of the next step when it continues), the enqueue of the next step, the rest
    of the step job (pgbus's Python around the transactions and the step's code), and RQ's
    own work around the job."""
    from rq import SimpleWorker

    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    engine = _engine(db, args.redis_url, inline)
    steps = (runs + 1) * STEPS  # the warm-up run's steps run too
    try:
        engine.db.pool.wait()
        FiveNoop.start(-1)  # warm up the pool's connection and the imports
        with PgCounter() as pg:
            with Timers() as start_timers:
                start_timers.time("enqueue", "pgbus_flask.engine", "Engine.send_step")
                t = time.perf_counter()
                for i in range(runs):
                    FiveNoop.start(i)
                start_total = time.perf_counter() - t
            start = pg.reset()
            with Timers() as timers:
                timers.time("job", "pgbus_flask.jobs", "run_step")
                timers.time("claim", "pgbus_flask.runner.attempt", "claim_attempt")
                timers.time("outcome", "pgbus_flask.runner.attempt", "record_outcome")
                timers.time("inline", "pgbus_flask.runner.inline", "continue_inline")
                timers.time("enqueue", "pgbus_flask.engine", "Engine.send_step")
                worker = SimpleWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
                cpu = CpuMeter([], args.server_url, DB_NAME, args.redis_url)
                cpu.start()
                t = time.perf_counter()
                worker.work(burst=True, logging_level="WARNING")
                total = time.perf_counter() - t
                others = cpu.stop()["others_cores"]
            step = pg.reset()
        with psycopg.connect(db, autocommit=True) as conn:
            unfinished, _notes = _pgbus_check(conn, runs + 1)
            jobs = int(conn.execute("SELECT count(DISTINCT job_id) FROM pgbus_workflow_steps").fetchone()[0])
        s, c = timers.seconds, timers.calls
        out: dict[str, Any] = {
            "start": {k: v / runs for k, v in start.items()},
            "start_ms": {"total": 1000 * start_total / runs, "enqueue": 1000 * start_timers.seconds["enqueue"] / runs},
            "step": {k: v / steps for k, v in step.items()},
            "ms": {
                "total": 1000 * total / steps,
                "rq": 1000 * (total - s["job"]) / steps,
                "claim": 1000 * s["claim"] / steps,
                "outcome": 1000 * (s["outcome"] - s["enqueue"]) / steps,
                "inline": 1000 * s["inline"] / steps,
                "enqueue": 1000 * s["enqueue"] / steps,
                "rest": 1000 * (s["job"] - s["claim"] - s["outcome"]) / steps,
                "pg_wait": 1000 * step["wait_seconds"] / steps,
            },
            "jobs_per_step": jobs / steps,
            "claims_per_step": c["claim"] / steps,
            "unfinished": unfinished,
            "missing": timers.missing,
            "others_cores": others,
        }
        return out
    finally:
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)


def _host_port(url: str, default: int) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or default


def round_trips(args: argparse.Namespace, runs: int = 50) -> dict[str, Any]:
    """Round trips (TCP turns, counted by a proxy in front of each server) to PostgreSQL and to
    Redis: per start(), per step with inline continuation on and off (one in-process
    SimpleWorker), and per job and per chain of the plain RQ chain. A burst worker's own
    start-up and exit (measured on an empty queue) are taken off."""
    from rq import Queue, SimpleWorker

    from bench.chain import CHAIN_QUEUE
    from bench.jobs import noop
    from tests.workflows import FiveNoop

    def drain(queues: list[Any], connection: Any) -> None:
        SimpleWorker(queues, connection=connection).work(burst=True, logging_level="WARNING")

    out: dict[str, Any] = {}
    for inline in (True, False):
        db = create_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
        try:
            with TurnCounter(*_host_port(args.server_url, 5432)) as pg, \
                    TurnCounter(*_host_port(args.redis_url, 6379)) as rd:
                engine = _engine(pg.url(db), rd.url(args.redis_url), inline)
                try:
                    queues = [engine.queue(n) for n in engine.queue_names()]
                    engine.db.pool.wait()
                    FiveNoop.start(-1)  # warm up: connections, imports
                    drain(queues, engine.redis)
                    pg.take(), rd.take()
                    drain(queues, engine.redis)  # nothing to do: the worker's own turns
                    idle_pg, idle_rd = pg.take(), rd.take()
                    for i in range(runs):
                        FiveNoop.start(i)
                    start = {"pg": pg.take() / runs, "redis": rd.take() / runs}
                    drain(queues, engine.redis)
                    steps = runs * STEPS
                    out["inline on" if inline else "inline off"] = {
                        "start": start,
                        "step": {"pg": (pg.take() - idle_pg) / steps, "redis": (rd.take() - idle_rd) / steps},
                    }
                finally:
                    engine.close()
        finally:
            drop_database(args.server_url, DB_NAME)
            flush_redis(args.redis_url)
    with TurnCounter(*_host_port(args.redis_url, 6379)) as rd:
        redis = named_redis(rd.url(args.redis_url))
        try:
            redis.flushdb()
            queue = Queue(CHAIN_QUEUE, connection=redis)
            drain([queue], redis)
            rd.take()
            drain([queue], redis)
            idle = rd.take()
            for i in range(runs):
                parent = None
                for s in range(STEPS):
                    parent = queue.enqueue(noop, i, s, depends_on=parent, result_ttl=3600)
            enqueue = rd.take() / runs
            drain([queue], redis)
            out["chain"] = {"start": {"redis": enqueue}, "step": {"redis": (rd.take() - idle) / (runs * STEPS)}}
        finally:
            redis.flushdb()
            redis.close()
    return out


def _round_trips(label: str, d: dict[str, float], per: str) -> str:
    kinds = " + ".join(f"{d.get(k, 0):.2f} {k}" for k in ("BEGIN", "COMMIT", "SAVEPOINT", "ROLLBACK") if d.get(k))
    return (f"{label}: {d.get('statements', 0):.2f} statements + {kinds or 'no transaction commands'}"
            f" = {d.get('transactions', 0):.2f} transactions {per}")


def print_round_trips(trips: dict[str, Any], runs: int) -> None:
    print(f"\nround trips, counted by a TCP proxy in front of each server ({runs} runs, one in-process"
          " SimpleWorker; a turn = the client sends after the server answered):")
    print(f"  {'':<34}{'PostgreSQL':>11}{'Redis':>8}")
    on = trips["inline on"]
    print(f"  {'start()':<34}{on['start']['pg']:>11.2f}{on['start']['redis']:>8.2f}")
    for name in ("inline on", "inline off"):
        x = trips[name]["step"]
        print(f"  {'each step, ' + name:<34}{x['pg']:>11.2f}{x['redis']:>8.2f}")
    ch = trips["chain"]
    print(f"  {'RQ chain: the enqueue of a chain':<34}{'-':>11}{ch['start']['redis']:>8.2f}")
    print(f"  {'RQ chain: each job':<34}{'-':>11}{ch['step']['redis']:>8.2f}")
    print("  (a burst worker's own start-up and exit, measured on an empty queue, taken off; no sweep runs here)")


def print_in_process(modes: dict[str, dict[str, Any]], chain: tuple[float, int], runs: int) -> None:
    print(f"\nPostgreSQL statements, counted in process ({runs} runs, one in-process SimpleWorker):")
    first = next(iter(modes.values()))
    print("  " + _round_trips("start()", first["start"], "per start"))
    for name, m in modes.items():
        print("  " + _round_trips(f"each step, {name}", m["step"], "per step"))
    print("  waiting for PostgreSQL's answers (ms):")
    for name, d in [("per start()", first["start"])] + [(f"per step, {n}", m["step"]) for n, m in modes.items()]:
        kinds = ", ".join(f"{k.removeprefix('wait_')} {1000 * v:.2f}" for k, v in sorted(d.items())
                          if k.startswith("wait_") and k != "wait_seconds")
        print(f"    {name:<22} {1000 * d.get('wait_seconds', 0):.2f} = {kinds}")
    for name, m in modes.items():
        x = m["start_ms"]
        wait = 1000 * m["start"].get("wait_seconds", 0)
        print(f"  start() in process, {name} run: {x['total']:.2f} ms = waiting for PostgreSQL {wait:.2f} + enqueue"
              f" of the first step {x['enqueue']:.2f} + the rest (Python) {x['total'] - wait - x['enqueue']:.2f}")
    print(f"\nper-step breakdown, ms per step ({runs} runs, one in-process SimpleWorker, no worker process"
          " in the way):")
    print(f"  {'':<22}{'total':>7}{'RQ job':>8}{'claim tx':>9}{'outcome tx':>11}{'(inline':>8}{'enqueue':>8}"
          f"{'other':>7}{'PG wait':>9}{'steps/s':>9}{'jobs/step':>10}{'others':>8}")
    for name, m in modes.items():
        x = m["ms"]
        print(f"  {'pgbus ' + name:<22}{x['total']:>7.2f}{x['rq']:>8.2f}{x['claim']:>9.2f}{x['outcome']:>11.2f}"
              f"{x['inline']:>7.2f}){x['enqueue']:>8.2f}{x['rest']:>7.2f}{x['pg_wait']:>9.2f}"
              f"{1000 / x['total']:>9.0f}{m['jobs_per_step']:>10.2f}"
              f"{m['others_cores'] if m['others_cores'] is not None else float('nan'):>8.2f}")
    print(f"  {'RQ chain job':<22}{chain[0]:>7.2f}{chain[0]:>8.2f}{'':>52}{1000 / chain[0]:>9.0f}{1:>10.2f}"
          f"   ({chain[1]} of {runs * STEPS} jobs left unrun by its burst)")
    print("  RQ job: the worker's work around each job (dequeue, job bookkeeping in Redis), per step;"
          " claim tx: a job's first claim; outcome tx: the outcome transaction, the inline claim of the next"
          " step included (its CTE in brackets), the enqueue after commit taken off; other: the rest of the"
          " step job (pgbus's Python, the step's code); PG wait: all time spent waiting for PostgreSQL's"
          " answers (part of claim and outcome); others: cores other processes kept busy meanwhile.")
    for name, m in modes.items():
        if m["missing"]:
            print(f"  {name}: not timed (the engine has no {', '.join(m['missing'])})")
        if m["unfinished"]:
            print(f"  {name}: {m['unfinished']} steps left unfinished by the in-process burst")


# -- main ----------------------------------------------------------------------------


def git_revision() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "pgbus_flask", "worker"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + (" (engine files modified)" if dirty else "")
    except Exception:
        return "unknown"


def _latency(label: str, values: list[float]) -> str:
    return (f"start() latency, {len(values)} starts, {label}: p50 {ms(pct(values, 50))}, p95 {ms(pct(values, 95))},"
            f" max {ms(max(values))}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000, help="runs (and RQ chains) of 5 steps (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--server-url", default=DEFAULT_SERVER, help="a PostgreSQL URL (its database is not used)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of the benchmark's own (flushed)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds each phase may take at most")
    parser.add_argument("--in-process-runs", type=int, default=300,
                        help="runs for the in-process round trips and breakdown (default 300)")
    parser.add_argument("--round-trip-runs", type=int, default=50,
                        help="runs (and chains) whose round trips a proxy counts (default 50)")
    parser.add_argument("--redis-runs", type=int, default=200,
                        help="runs (and chains) of the MONITOR phases counting Redis commands (default 200; 0: no)")
    parser.add_argument("--skip-fork", action="store_true", help="skip the forking-worker phases")
    parser.add_argument("--fork-runs", type=int, default=200,
                        help="runs (and chains) for the forking-worker phases (default 200: they are slow)")
    parser.add_argument("--skip-burst", action="store_true", help="skip the burst (left-unfinished) phases")
    parser.add_argument("--small-burst", type=int, default=100,
                        help="also run the burst phases at this size (default 100; 0: no)")
    parser.add_argument("--skip-dbos", action="store_true", help="skip DBOS Transact")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--dbos-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dbos-db", default=DBOS_DB, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dbos_child:
        dbos_child(args)
        return 0

    with tempfile.TemporaryDirectory(prefix="pgbus-bench-") as logdir:
        args.logdir = logdir
        print(f"bench.steps: {args.runs} runs x {STEPS} no-op steps, {args.workers} workers, "
              f"{os.cpu_count()} cores, {datetime.now().astimezone().isoformat(timespec='seconds')},"
              f" load average {os.getloadavg()[0]:.2f}, pgbus-flask at {git_revision()}")

        # The live phases first: their figures are the ones other processes disturb most.
        log("live: pgbus inline on, pgbus inline off, RQ chain (SimpleWorker)")
        on, on_lat = pgbus_live(args, "pgbus inline on, SimpleWorker")
        off, off_lat = pgbus_live(args, "pgbus inline off, SimpleWorker", inline=False)
        ch = chain_live(args, "rq.worker.SimpleWorker", "RQ chain, SimpleWorker")
        results = [on, off, ch]
        pairs = [(on, ch), (off, ch)]
        dbos = None
        if not args.skip_dbos:
            log("DBOS Transact")
            dbos = dbos_run(args, DBOS_DB)
            results.append(dbos)

        log(f"in process: statements and per-step breakdown ({args.in_process_runs} runs, inline on, off; chain),"
            f" then round trips through a proxy ({args.round_trip_runs} runs)")
        modes = {"inline on": in_process(args, True, args.in_process_runs),
                 "inline off": in_process(args, False, args.in_process_runs)}
        redis = named_redis(args.redis_url)
        try:
            chain_ip = chain_in_process(redis, args.in_process_runs)
        finally:
            redis.flushdb()
            redis.close()
        trips = round_trips(args, args.round_trip_runs)
        # "Steps only": the starts' transactions (counted in process) taken off.
        start_xacts = modes["inline on"]["start"].get("transactions", 0.0)
        for r in (on, off):
            if r.xacts_per_step is not None:
                r.xacts_steps_only = r.xacts_per_step - start_xacts / STEPS

        log("start() latency with no worker running")
        idle_lat, idle_others = start_latency_idle(args)

        sampled: list[Result] = []
        if args.redis_runs:
            log(f"Redis commands per job: the live pairs again at {args.redis_runs} runs, MONITOR on")
            small = argparse.Namespace(**{**vars(args), "runs": args.redis_runs})
            sampled = [pgbus_live(small, "pgbus inline on", monitor=True)[0],
                       pgbus_live(small, "pgbus inline off", inline=False, monitor=True)[0],
                       chain_live(small, "rq.worker.SimpleWorker", "RQ chain", monitor=True)]

        if not args.skip_burst:
            log("burst: pgbus inline on, off, then RQ chain")
            burst = [pgbus_burst(args, "pgbus burst, inline on"), pgbus_burst(args, "pgbus burst, inline off",
                                                                                inline=False),
                     chain_burst(args, "RQ chain burst")]
            results += burst
            pairs += [(burst[0], burst[2]), (burst[1], burst[2])]
            if args.small_burst and args.small_burst < args.runs:
                small = argparse.Namespace(**{**vars(args), "runs": args.small_burst})
                burst = [pgbus_burst(small, f"pgbus burst, inline on ({small.runs} runs)"),
                         pgbus_burst(small, f"pgbus burst, inline off ({small.runs} runs)", inline=False),
                         chain_burst(small, f"RQ chain burst ({small.runs} chains)")]
                results += burst
                pairs += [(burst[0], burst[2]), (burst[1], burst[2])]
        if not args.skip_fork:
            log("forking workers: pgbus PgbusForkWorker inline on, off, on with Flask imported; RQ chain Worker")
            fork = argparse.Namespace(**{**vars(args), "runs": min(args.fork_runs, args.runs)})
            fork_class = "pgbus_flask.worker.runner.PgbusForkWorker"
            pf, _ = pgbus_live(fork, f"pgbus ForkWorker, inline on ({fork.runs})", worker_class=fork_class)
            pfo, _ = pgbus_live(fork, f"pgbus ForkWorker, inline off ({fork.runs})", worker_class=fork_class,
                                inline=False)
            # Flask imported in the worker before it forks: guards finding 1 of docs/benchmarks.md.
            pff, _ = pgbus_live(fork, f"pgbus ForkWorker, on, +flask ({fork.runs})", worker_class=fork_class,
                                imports="tests.workflows,flask")
            cf = chain_live(fork, "rq.worker.Worker", f"RQ chain, Worker (fork) ({fork.runs})")
            for r in (pf, pfo, pff):
                if r.xacts_per_step is not None:
                    r.xacts_steps_only = r.xacts_per_step - start_xacts / STEPS
            results += [pf, pfo, pff, cf]
            pairs += [(pf, cf), (pfo, cf), (pff, cf)]

        print(f"\n=== bench.steps, {args.runs} runs x {STEPS} steps, {args.workers} workers"
              f" (load average at the end: {os.getloadavg()[0]:.2f}) ===")
        table(results)
        print()
        if dbos is not None and dbos.steps:
            print(f"ratio {on.name} / {dbos.name}: {ratio(on, dbos)}   (target: at least 2x)")
            print(f"ratio {off.name} / {dbos.name}: {ratio(off, dbos)}")
        print(f"ratio {on.name} / {ch.name}: {ratio(on, ch)}   (target: at least 1.5x)")
        print(f"ratio {off.name} / {ch.name}: {ratio(off, ch)}   (target: at least 1x)")
        for a, b in pairs[2:]:
            print(f"ratio {a.name} / {b.name}: {ratio(a, b)}")
        print(f"transactions per step, {on.name}: {on.xacts_per_step or float('nan'):.2f} with the starts,"
              f" {on.xacts_steps_only or float('nan'):.2f} steps only (target: 1.2 or fewer);"
              f" inline off: {off.xacts_per_step or float('nan'):.2f} and {off.xacts_steps_only or float('nan'):.2f}")
        cpu_table(results)
        redis_table(sampled)

        print()
        print(_latency("no worker running", idle_lat) + f"   (target: p50 1 ms or less; other processes kept"
              f" {idle_others if idle_others is not None else float('nan'):.2f} cores busy meanwhile)")
        print(_latency(f"while {args.workers} workers run them, inline on", on_lat))
        print(_latency(f"while {args.workers} workers run them, inline off", off_lat))
        print_round_trips(trips, args.round_trip_runs)
        print_in_process(modes, chain_ip, args.in_process_runs)

        if args.json:
            with open(args.json, "w") as fh:
                json.dump({
                    "when": datetime.now().astimezone().isoformat(timespec="seconds"), "revision": git_revision(),
                    "runs": args.runs, "workers": args.workers, "results": [r.as_json() for r in results],
                    "redis": [r.as_json() for r in sampled], "in_process": modes, "round_trips": trips,
                    "chain_in_process": {"ms_per_job": chain_ip[0], "left": chain_ip[1]},
                    "start_idle": {"p50": pct(idle_lat, 50), "p95": pct(idle_lat, 95), "max": max(idle_lat),
                                   "others_cores": idle_others},
                    "start_live_on": {"p50": pct(on_lat, 50), "p95": pct(on_lat, 95), "max": max(on_lat)},
                    "start_live_off": {"p50": pct(off_lat, 50), "p95": pct(off_lat, 95), "max": max(off_lat)},
                    "load_end": os.getloadavg(),
                }, fh, indent=1, default=str)
        if any(r.unfinished for r in results if r.name.startswith("pgbus")):
            for name in sorted(os.listdir(logdir)):
                with open(os.path.join(logdir, name), errors="replace") as fh:
                    tail = fh.read()[-1500:]
                if tail.strip():
                    print(f"\n--- {name} (tail) ---\n{tail}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
