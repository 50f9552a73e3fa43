"""Steps per second end to end: pgbus-flask beside a plain RQ chain (and DBOS Transact).

    /work/venv/bin/python -m bench.steps                  # 1,000 runs x 5 no-op steps, 2 workers
    /work/venv/bin/python -m bench.steps --runs 200 --skip-fork --skip-dbos   # a quick look

What it does, in one invocation, on one PostgreSQL and one Redis database:

* **pgbus, live**: 2 ``pgbus-worker`` processes (default worker class, i.e. RQ's
  SimpleWorker; scheduler and sweep on as shipped) wait; the script starts N
  ``FiveNoop`` runs (timing every ``start()``) and polls the database until every
  run is finished. End to end = first run's ``created_at`` to last run's
  ``finished_at`` (database clock). Transactions per step = the database's
  ``xact_commit`` delta (starts included, the script's own polls taken off) / 5N.
* **RQ chain, live**: 2 ``rq worker`` processes (same worker class, same Redis,
  ``--maintenance-interval 1`` and ``--worker-ttl 16`` so an idle worker runs
  maintenance every second) wait; the script enqueues N chains of 5 no-op jobs
  linked by ``depends_on`` and polls until all 5N jobs are finished. End to end
  = first job's ``created_at`` to last job's ``ended_at``. Jobs whose enqueue
  came more than 0.5 s after their parent ended were left for RQ's maintenance
  pass (the ready-dependents race of rq 3.0).
* **burst**: the same N runs / chains are enqueued first, then 2 burst workers
  drain them and exit; what is not finished when both have exited is
  "left unfinished".
* the same live pair with forking workers (``PgbusForkWorker`` / RQ's ``Worker``),
  ``start()`` latency with no worker running, PostgreSQL statements per step
  (counted in-process), and DBOS Transact (5-step workflows, one process, its
  system database on the same PostgreSQL) when ``dbos`` is installed.

Every database and Redis key it makes is dropped/flushed at the end; every
process it starts is killed. Timings are printed, never asserted.
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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from redis import Redis

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

DB_NAME = "pgbus_bench_steps"
DBOS_DB = "pgbus_bench_dbos"
CHAIN_QUEUE = "bench_chain"
STEPS = 5


@dataclass
class Result:
    name: str
    steps: int = 0
    seconds: float = float("nan")
    unfinished: int = 0
    xacts_per_step: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.steps / self.seconds if self.seconds and self.seconds == self.seconds else float("nan")


def log(msg: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def flush_redis(redis_url: str) -> None:
    client = Redis.from_url(redis_url)
    client.flushdb()
    client.close()


def wait_workers(redis_url: str, count: int, timeout: float = 30.0) -> None:
    from rq import Worker

    client = Redis.from_url(redis_url)
    deadline = time.monotonic() + timeout
    try:
        while len(Worker.all(connection=client)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} workers did not register within {timeout}s")
            time.sleep(0.1)
    finally:
        client.close()


# -- pgbus ---------------------------------------------------------------------


def pgbus_worker_argv(worker_class: str | None, burst: bool) -> list[str]:
    argv = [os.path.join(VENV_BIN, "pgbus-worker"), "--log-level", "WARNING"]
    if worker_class:
        argv += ["--worker-class", worker_class]
    if burst:
        argv.append("--burst")
    return argv


def _engine(db: str, redis_url: str) -> Any:
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine

    return Engine(Settings.load({"PGBUS_DATABASE_URL": db, "PGBUS_REDIS_URL": redis_url})).make_default()


def _pgbus_ongoing(conn: psycopg.Connection[Any]) -> int:
    """Runs not yet finished (a cheap poll: the partial index of ongoing runs)."""
    row = conn.execute("SELECT count(*) FROM pgbus_workflows WHERE status IN ('ready', 'running', 'waiting',"
                       " 'paused')").fetchone()
    assert row is not None
    return int(row[0])


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


def pgbus_live(args: argparse.Namespace, worker_class: str | None, label: str,
               imports: str = "tests.workflows") -> tuple[Result, list[float]]:
    """Workers up first, then N starts; poll until all finished."""
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    res = Result(label)
    latencies: list[float] = []
    engine = _engine(db, args.redis_url)
    polls = 0
    try:
        with Processes() as procs, psycopg.connect(db, autocommit=True) as poll:
            for i in range(args.workers):
                procs.start(pgbus_worker_argv(worker_class, burst=False),
                            env_for(db, args.redis_url, PGBUS_IMPORT=imports),
                            os.path.join(args.logdir, f"pgbus-{label.replace(' ', '_')}-{i}.log"))
            wait_workers(args.redis_url, args.workers)
            engine.db.pool.wait()
            before = settle_stats(args.server_url, DB_NAME)
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
            finished = args.runs - ongoing
            span = poll.execute("SELECT extract(epoch FROM max(finished_at) - min(created_at))"
                                " FROM pgbus_workflows WHERE status = 'finished'").fetchone()[0]
            polls += 1
            res.seconds = float(span or "nan")
            res.unfinished, res.notes = _pgbus_check(poll, args.runs)
            polls += 3
            res.steps = args.runs * STEPS - res.unfinished
            if finished < args.runs:
                res.notes.append(f"timed out after {args.timeout}s with {finished}/{args.runs} runs finished")
            poll.close()
            engine.close()
            procs.stop()
        after = settle_stats(args.server_url, DB_NAME)
        res.xacts_per_step = (after - before - polls) / (args.runs * STEPS)
    finally:
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
    return res, latencies


def pgbus_burst(args: argparse.Namespace, label: str = "pgbus burst") -> Result:
    """N runs started first; 2 burst workers drain and exit; what is left is unfinished."""
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    res = Result(label)
    engine = _engine(db, args.redis_url)
    try:
        for i in range(args.runs):
            FiveNoop.start(i)
        engine.close()
        with Processes() as procs:
            t0 = time.perf_counter()
            for i in range(args.workers):
                procs.start(pgbus_worker_argv(None, burst=True), env_for(db, args.redis_url),
                            os.path.join(args.logdir, f"pgbus-burst-{i}.log"))
            if not procs.wait(args.timeout):
                res.notes.append(f"burst workers still running after {args.timeout}s (killed)")
            res.seconds = time.perf_counter() - t0
        with psycopg.connect(db, autocommit=True) as conn:
            res.unfinished, res.notes = _pgbus_check(conn, args.runs)
        res.steps = args.runs * STEPS - res.unfinished
        res.notes.insert(0, "time = burst workers' launch to exit (process start-up included)")
    finally:
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
    return res


def start_latency_idle(args: argparse.Namespace) -> list[float]:
    """N starts with no worker running (nothing else on the machine's 2 cores)."""
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    engine = _engine(db, args.redis_url)
    out: list[float] = []
    try:
        engine.db.pool.wait()
        for i in range(20):  # warm up: imports, pool, prepared statements
            FiveNoop.start(-i)
        for i in range(args.runs):
            t = time.perf_counter()
            FiveNoop.start(i)
            out.append(time.perf_counter() - t)
    finally:
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
    return out


def statements_per_step(args: argparse.Namespace, runs: int = 50) -> dict[str, float]:
    """Round trips to PostgreSQL counted in-process (statements, and BEGIN/COMMIT/SAVEPOINT commands)
    for ``runs`` FiveNoop runs: their starts, then every step run by an in-process SimpleWorker."""
    import psycopg._connection_base as cbase
    from rq import SimpleWorker

    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    engine = _engine(db, args.redis_url)
    counts = {"execute": 0, "command": 0}
    real_execute, real_command = psycopg.Cursor.execute, cbase.BaseConnection._exec_command

    def execute(self: Any, *a: Any, **kw: Any) -> Any:
        counts["execute"] += 1
        return real_execute(self, *a, **kw)

    def command(self: Any, *a: Any, **kw: Any) -> Any:
        counts["command"] += 1
        return real_command(self, *a, **kw)

    try:
        engine.db.pool.wait()
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        cbase.BaseConnection._exec_command = command  # type: ignore[method-assign]
        for i in range(runs):
            FiveNoop.start(i)
        start = dict(counts)
        counts.update(execute=0, command=0)
        worker = SimpleWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
        worker.work(burst=True, logging_level="WARNING")
        steps = dict(counts)
    finally:
        psycopg.Cursor.execute = real_execute  # type: ignore[method-assign]
        cbase.BaseConnection._exec_command = real_command  # type: ignore[method-assign]
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
    return {
        "start_statements": start["execute"] / runs, "start_commands": start["command"] / runs,
        "step_statements": steps["execute"] / (runs * STEPS), "step_commands": steps["command"] / (runs * STEPS),
    }


def breakdown(args: argparse.Namespace, runs: int = 300) -> dict[str, float]:
    """ms per step with one in-process SimpleWorker (no process scheduling in the way): the claim
    transaction, the outcome transaction, the enqueue of the next step, RQ's work around the job;
    and ms per job of a plain RQ chain run the same way."""
    import collections

    from rq import Queue, SimpleWorker

    from bench.jobs import noop
    from pgbus_flask import runner
    from pgbus_flask.engine import Engine
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    engine = _engine(db, args.redis_url)
    spent: collections.Counter[str] = collections.Counter()
    patched: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, key: str) -> None:
        real = getattr(owner, name)
        patched.append((owner, name, real))

        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return real(*a, **kw)
            finally:
                spent[key] += time.perf_counter() - t

        setattr(owner, name, timed)

    try:
        engine.db.pool.wait()
        for i in range(runs):
            FiveNoop.start(i)
        wrap(runner, "claim_attempt", "claim")
        wrap(runner, "record_outcome", "outcome")
        wrap(Engine, "send_step", "enqueue")
        wrap(runner, "run_attempt", "attempt")
        worker = SimpleWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
        t = time.perf_counter()
        worker.work(burst=True, logging_level="WARNING")
        total = time.perf_counter() - t
        for owner, name, real in reversed(patched):
            setattr(owner, name, real)
        patched.clear()
        steps = runs * STEPS
        out = {"pgbus": 1000 * total / steps, "claim": 1000 * spent["claim"] / steps,
               "outcome": 1000 * (spent["outcome"] - spent["enqueue"]) / steps,
               "enqueue": 1000 * spent["enqueue"] / steps,
               "rq": 1000 * (total - spent["attempt"]) / steps}
        engine.redis.flushdb()
        queue = Queue(CHAIN_QUEUE, connection=engine.redis)
        for i in range(runs):
            parent = None
            for s in range(STEPS):
                parent = queue.enqueue(noop, i, s, depends_on=parent, result_ttl=3600)
        worker = SimpleWorker([queue], connection=engine.redis, maintenance_interval=1)
        t = time.perf_counter()
        worker.work(burst=True, logging_level="WARNING")
        done = queue.finished_job_registry.count
        out["chain"] = 1000 * (time.perf_counter() - t) / max(done, 1)
        out["chain_left"] = steps - done
        return out
    finally:
        for owner, name, real in reversed(patched):
            setattr(owner, name, real)
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)


# -- the plain RQ chain ----------------------------------------------------------


def rq_worker_argv(args: argparse.Namespace, worker_class: str, burst: bool) -> list[str]:
    argv = [os.path.join(VENV_BIN, "rq"), "worker", "--url", args.redis_url, "--worker-class", worker_class,
            "--maintenance-interval", "1", "--logging_level", "WARNING", "--path", os.path.dirname(VENV_BIN)]
    argv += ["--burst"] if burst else ["--worker-ttl", "16"]
    return [*argv, CHAIN_QUEUE]


def enqueue_chains(redis: Redis, runs: int) -> list[list[str]]:
    from rq import Queue

    from bench.jobs import noop

    q = Queue(CHAIN_QUEUE, connection=redis)
    chains = []
    for i in range(runs):
        ids = []
        parent = None
        for s in range(STEPS):
            job = q.enqueue(noop, i, s, depends_on=parent, result_ttl=3600, job_timeout=600)
            ids.append(job.id)
            parent = job
        chains.append(ids)
    return chains


def _chain_report(redis: Redis, chains: list[list[str]]) -> tuple[int, float, int, dict[str, int]]:
    """Unfinished jobs, end-to-end seconds, jobs left for maintenance (enqueued > 0.5 s after their
    parent ended), and the statuses of unfinished jobs."""
    from rq.job import Job, JobStatus

    flat = [jid for chain in chains for jid in chain]
    jobs: dict[str, Any] = {}
    for i in range(0, len(flat), 500):
        for job in Job.fetch_many(flat[i:i + 500], connection=redis):
            if job is not None:
                jobs[job.id] = job
    unfinished = 0
    statuses: dict[str, int] = {}
    first = last = None
    late = 0
    for chain in chains:
        for pos, jid in enumerate(chain):
            job = jobs.get(jid)
            status = job.get_status(refresh=False) if job else None
            if status != JobStatus.FINISHED:
                unfinished += 1
                key = status.value if status else "missing"
                statuses[key] = statuses.get(key, 0) + 1
                continue
            if first is None or job.created_at < first:
                first = job.created_at
            if last is None or job.ended_at > last:
                last = job.ended_at
            if pos:
                parent = jobs.get(chain[pos - 1])
                if parent and parent.ended_at and job.enqueued_at and \
                        (job.enqueued_at - parent.ended_at).total_seconds() > 0.5:
                    late += 1
    span = (last - first).total_seconds() if first and last else float("nan")
    return unfinished, span, late, statuses


def _finished_count(redis: Redis) -> int:
    from rq import Queue

    return Queue(CHAIN_QUEUE, connection=redis).finished_job_registry.count


def chain_live(args: argparse.Namespace, worker_class: str, label: str) -> Result:
    redis = Redis.from_url(args.redis_url)
    redis.flushdb()
    res = Result(label)
    try:
        with Processes() as procs:
            for i in range(args.workers):
                procs.start(rq_worker_argv(args, worker_class, burst=False), env_for("", args.redis_url),
                            os.path.join(args.logdir, f"chain-{label.replace(' ', '_')}-{i}.log"))
            wait_workers(args.redis_url, args.workers)
            chains = enqueue_chains(redis, args.runs)
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline and _finished_count(redis) < args.runs * STEPS:
                time.sleep(0.2)
            procs.stop()
        res.unfinished, res.seconds, late, statuses = _chain_report(redis, chains)
        res.steps = args.runs * STEPS - res.unfinished
        res.notes.append(f"{late} jobs ({100 * late / (args.runs * STEPS):.1f}%) were enqueued > 0.5 s after their"
                         " parent ended (left for the 1 s maintenance pass)")
        if statuses:
            res.notes.append(f"unfinished by status: {statuses}")
    finally:
        redis.flushdb()
        redis.close()
    return res


def chain_burst(args: argparse.Namespace, label: str = "RQ chain burst") -> Result:
    redis = Redis.from_url(args.redis_url)
    redis.flushdb()
    res = Result(label)
    try:
        chains = enqueue_chains(redis, args.runs)
        with Processes() as procs:
            t0 = time.perf_counter()
            for i in range(args.workers):
                procs.start(rq_worker_argv(args, "rq.worker.SimpleWorker", burst=True), env_for("", args.redis_url),
                            os.path.join(args.logdir, f"chain-burst-{i}.log"))
            if not procs.wait(args.timeout):
                res.notes.append(f"burst workers still running after {args.timeout}s (killed)")
            res.seconds = time.perf_counter() - t0
        res.unfinished, _span, late, statuses = _chain_report(redis, chains)
        res.steps = args.runs * STEPS - res.unfinished
        res.notes.append("time = burst workers' launch to exit (process start-up included)")
        res.notes.append(f"unfinished by status: {statuses}; {late} finished jobs waited > 0.5 s for maintenance")
    finally:
        redis.flushdb()
        redis.close()
    return res


# -- DBOS Transact -----------------------------------------------------------------


def dbos_child(args: argparse.Namespace) -> None:
    """Runs in a child process: N 5-step DBOS workflows in this one process; prints one JSON line."""
    import logging

    from dbos import DBOS

    from bench.common import db_url, xact_commit

    url = db_url(args.server_url, DBOS_DB)
    DBOS(config={"name": "pgbus-bench", "system_database_url": url, "run_admin_server": False,
                 "log_level": "WARNING"})
    logging.getLogger("dbos").setLevel(logging.WARNING)

    @DBOS.step()
    def noop(i: int, s: int) -> None:
        return None

    @DBOS.workflow()
    def five_noop(i: int) -> int:
        for s in range(STEPS):
            noop(i, s)
        return i

    DBOS.launch()
    for h in [DBOS.start_workflow(five_noop, -1 - i) for i in range(20)]:  # warm up
        h.get_result()
    time.sleep(1.5)
    before = xact_commit(args.server_url, DBOS_DB)
    t0 = time.perf_counter()
    handles = [DBOS.start_workflow(five_noop, i) for i in range(args.runs)]
    done = sum(1 for h in handles if h.get_result() is not None)
    seconds = time.perf_counter() - t0
    DBOS.destroy()
    from bench.common import settle_stats as settle

    after = settle(args.server_url, DBOS_DB)
    import dbos as dbos_module

    print("DBOS_RESULT " + json.dumps({
        "steps": done * STEPS, "seconds": seconds, "unfinished": (args.runs - done) * STEPS,
        "xacts_per_step": (after - before) / (args.runs * STEPS),
        "version": getattr(dbos_module, "__version__", None),
    }), flush=True)


def dbos_run(args: argparse.Namespace) -> Result:
    res = Result("DBOS Transact (1 process)")
    try:
        import importlib.metadata

        version = importlib.metadata.version("dbos")
    except Exception:
        res.notes.append("not installed (pip install dbos) - skipped")
        return res
    drop_database(args.server_url, DBOS_DB)
    try:
        proc = subprocess.run([sys.executable, "-m", "bench.steps", "--dbos-child", "--runs", str(args.runs),
                               "--server-url", args.server_url], capture_output=True, text=True,
                              timeout=args.timeout + 120, cwd=os.path.dirname(os.path.dirname(__file__)))
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("DBOS_RESULT ")), None)
        if line is None:
            res.notes.append(f"did not run (exit {proc.returncode}): {(proc.stderr or proc.stdout)[-600:]}")
            return res
        data = json.loads(line.removeprefix("DBOS_RESULT "))
        res.steps, res.seconds, res.unfinished = data["steps"], data["seconds"], data["unfinished"]
        res.xacts_per_step = data["xacts_per_step"]
        res.notes.append(f"dbos {version}; system database on the same PostgreSQL; workflows started with"
                         " DBOS.start_workflow in one process, time = first start to last result")
    except subprocess.TimeoutExpired:
        res.notes.append("timed out")
    finally:
        drop_database(args.server_url, DBOS_DB)
    return res


# -- report --------------------------------------------------------------------------


def table(results: list[Result]) -> None:
    print(f"\n{'what':<36}{'steps':>7}{'seconds':>9}{'steps/s':>9}{'unfinished':>12}{'xacts/step':>12}")
    for r in results:
        xs = f"{r.xacts_per_step:.2f}" if r.xacts_per_step is not None else "-"
        print(f"{r.name:<36}{r.steps:>7}{r.seconds:>9.2f}{r.rate:>9.0f}{r.unfinished:>12}{xs:>12}")
    for r in results:
        for note in r.notes:
            print(f"  {r.name}: {note}")


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


def ratio(a: Result, b: Result) -> str:
    return f"{a.rate / b.rate:.2f}x" if b.rate and b.rate == b.rate else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000, help="runs (and RQ chains) of 5 steps (default 1000)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--server-url", default=DEFAULT_SERVER, help="a PostgreSQL URL (its database is not used)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of the benchmark's own (flushed)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds each phase may take at most")
    parser.add_argument("--skip-fork", action="store_true", help="skip the forking-worker pair")
    parser.add_argument("--fork-runs", type=int, default=200,
                        help="runs (and chains) for the forking-worker pair (default 200: it is slow)")
    parser.add_argument("--skip-burst", action="store_true", help="skip the burst (left-unfinished) pair")
    parser.add_argument("--small-burst", type=int, default=100,
                        help="also run the burst pair at this size (default 100; 0: no)")
    parser.add_argument("--skip-dbos", action="store_true", help="skip DBOS Transact")
    parser.add_argument("--dbos-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dbos_child:
        dbos_child(args)
        return 0

    with tempfile.TemporaryDirectory(prefix="pgbus-bench-") as logdir:
        args.logdir = logdir
        print(f"bench.steps: {args.runs} runs x {STEPS} no-op steps, {args.workers} workers, "
              f"{os.cpu_count()} cores, {datetime.now().astimezone().isoformat(timespec='seconds')},"
              f" load average {os.getloadavg()[0]:.2f}, pgbus-flask at {git_revision()}")
        log("pgbus, SimpleWorker (PgbusWorker), live")
        pg, live_lat = pgbus_live(args, None, "pgbus SimpleWorker")
        log("RQ chain, SimpleWorker, live")
        ch = chain_live(args, "rq.worker.SimpleWorker", "RQ chain SimpleWorker")
        results = [pg, ch]
        pairs = [(pg, ch)]
        if not args.skip_burst:
            log("burst: pgbus, then RQ chain")
            pb, cb = pgbus_burst(args), chain_burst(args)
            results += [pb, cb]
            pairs.append((pb, cb))
            if args.small_burst and args.small_burst < args.runs:
                small = argparse.Namespace(**{**vars(args), "runs": args.small_burst})
                pbs = pgbus_burst(small, f"pgbus burst ({args.small_burst} runs)")
                cbs = chain_burst(small, f"RQ chain burst ({args.small_burst} chains)")
                results += [pbs, cbs]
                pairs.append((pbs, cbs))
        if not args.skip_fork:
            log("forking workers: pgbus PgbusForkWorker, RQ chain Worker, live")
            fork_args = argparse.Namespace(**{**vars(args), "runs": min(args.fork_runs, args.runs)})
            pf, _ = pgbus_live(fork_args, "pgbus_flask.worker.runner.PgbusForkWorker",
                               f"pgbus ForkWorker ({fork_args.runs} runs)")
            cf = chain_live(fork_args, "rq.worker.Worker", f"RQ chain Worker ({fork_args.runs} chains)")
            # The same with Flask imported in the worker before it forks (PGBUS_IMPORT=...,flask): what
            # the suggested fix of resolve_engine() gives (each horse otherwise imports Flask itself).
            pff, _ = pgbus_live(fork_args, "pgbus_flask.worker.runner.PgbusForkWorker",
                                f"pgbus ForkWorker +flask ({fork_args.runs})", imports="tests.workflows,flask")
            results += [pf, pff, cf]
            pairs += [(pf, cf), (pff, cf)]
        dbos = None
        if not args.skip_dbos:
            log("DBOS Transact")
            dbos = dbos_run(args)
            results.append(dbos)
        log("start() latency with no worker running; statements per step")
        idle_lat = start_latency_idle(args)
        stmts = statements_per_step(args)
        log("per-step breakdown, one in-process SimpleWorker")
        cost = breakdown(args)
        # Nothing to clean up in logdir unless a phase failed: show the tail of worker logs then.
        table(results)
        print(f"(load average at the end: {os.getloadavg()[0]:.2f})\n")
        for a, b in pairs:
            print(f"ratio {a.name} / {b.name}: {ratio(a, b)}")
        if dbos is not None and dbos.steps:
            print(f"ratio {pg.name} / {dbos.name}: {ratio(pg, dbos)}")
        print(f"\nstart() latency, {len(idle_lat)} starts, no worker running: p50 {ms(pct(idle_lat, 50))},"
              f" p95 {ms(pct(idle_lat, 95))}, max {ms(max(idle_lat))}")
        print(f"start() latency, {len(live_lat)} starts while 2 workers run them: p50 {ms(pct(live_lat, 50))},"
              f" p95 {ms(pct(live_lat, 95))}, max {ms(max(live_lat))}")
        print(f"PostgreSQL round trips (in-process count): start() {stmts['start_statements']:.1f} statements"
              f" + {stmts['start_commands']:.1f} BEGIN/SAVEPOINT/COMMIT; each step"
              f" {stmts['step_statements']:.1f} statements + {stmts['step_commands']:.1f} BEGIN/COMMIT")
        print(f"one in-process SimpleWorker, 300 runs: pgbus {cost['pgbus']:.2f} ms/step ({1000 / cost['pgbus']:.0f}"
              f" steps/s) = claim tx {cost['claim']:.2f} + outcome tx {cost['outcome']:.2f} + enqueue next"
              f" {cost['enqueue']:.2f} + RQ around the job {cost['rq']:.2f} ms; plain RQ chain"
              f" {cost['chain']:.2f} ms/job ({1000 / cost['chain']:.0f} jobs/s; its burst left"
              f" {cost['chain_left']:.0f} of {300 * STEPS} jobs unrun); ratio {cost['chain'] / cost['pgbus']:.2f}x")
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
