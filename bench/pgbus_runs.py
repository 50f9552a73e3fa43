"""The pgbus side of ``bench.steps``: its databases, engine and workers, and the live, burst
and idle-``start()`` phases (inline continuation on or off)."""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Any

import psycopg

from bench.chain import flush_redis, jobs_run, record_redis, wait_workers
from bench.common import VENV_BIN, Processes, create_database, drop_database, env_for, settle_stats
from bench.probes import CpuMeter, RedisMonitor, named_redis, stack_of
from bench.report import STEPS, Result

# The process id keeps two benchmarks on one server out of each other's databases.
DB_NAME = f"pgbus_bench_steps_{os.getpid()}"
DBOS_DB = f"pgbus_bench_dbos_{os.getpid()}"
OFF = {"PGBUS_INLINE_STEPS": "0"}


def inline_env(inline: bool) -> dict[str, str]:
    """The PGBUS_* settings of a worker (or engine) with inline continuation on or off."""
    return {} if inline else OFF


def engine_for(db: str, redis_url: str, inline: bool = True) -> Any:
    """The benchmark's own engine on database URL ``db``, made the process default."""
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine

    engine = Engine(Settings.load({"PGBUS_DATABASE_URL": db, "PGBUS_REDIS_URL": redis_url, **inline_env(inline)}))
    # Named connections, so the Redis counts can tell the starts' enqueues from the workers'.
    engine._redis = named_redis(redis_url)
    return engine.make_default()


#: ``worker_class`` of :func:`pgbus_live` for a plain ``rq worker`` (RQ's forking Worker, no ``-w``):
#: its horses build their engine from the PGBUS_* environment.
PLAIN_RQ_WORKER = "rq worker"
#: The same with ``-c pgbus_flask.rq_config``: the engine built in the parent, before it forks.
PLAIN_RQ_WORKER_CONFIG = "rq worker -c pgbus_flask.rq_config"


def pgbus_worker_argv(worker_class: str | None, burst: bool, redis_url: str = "") -> list[str]:
    if worker_class in (PLAIN_RQ_WORKER, PLAIN_RQ_WORKER_CONFIG):
        argv = [os.path.join(VENV_BIN, "rq"), "worker", "--url", redis_url, "--logging_level", "WARNING"]
        if worker_class == PLAIN_RQ_WORKER_CONFIG:
            argv += ["-c", "pgbus_flask.rq_config"]
        return [*argv, "--burst", "pgbus"] if burst else [*argv, "pgbus"]
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


#: Statements check_runs sends (each an autocommit transaction the xact count takes off).
_CHECK_STATEMENTS = 3


def check_runs(conn: psycopg.Connection[Any], runs: int) -> tuple[int, list[str]]:
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
    engine = engine_for(db, args.redis_url, inline)
    polls = 0
    try:
        stacks: list[str] = []
        with Processes(on_leftover=lambda pid: stacks.append(f"pid {pid}: {stack_of(pid)}")) as procs, \
                psycopg.connect(db, autocommit=True) as poll, contextlib.ExitStack() as stack:
            for i in range(args.workers):
                procs.start(pgbus_worker_argv(worker_class, burst=False, redis_url=args.redis_url),
                            env_for(db, args.redis_url, PGBUS_IMPORT=imports, **inline_env(inline)),
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
            res.unfinished, notes = check_runs(poll, args.runs)
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
    engine = engine_for(db, args.redis_url, inline)
    try:
        for i in range(args.runs):
            FiveNoop.start(i)
        engine.close()
        with Processes() as procs:
            t0 = time.perf_counter()
            for i in range(args.workers):
                procs.start(pgbus_worker_argv(None, burst=True), env_for(db, args.redis_url, **inline_env(inline)),
                            os.path.join(args.logdir, f"pgbus-burst-{i}.log"))
            if not procs.wait(args.timeout):
                res.notes.append(f"burst workers still running after {args.timeout}s (killed)")
            res.seconds = time.perf_counter() - t0
        with psycopg.connect(db, autocommit=True) as conn:
            res.unfinished, res.notes = check_runs(conn, args.runs)
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
    engine = engine_for(db, args.redis_url)
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
