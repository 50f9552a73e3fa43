"""What a step costs, measured in one process: statements and transactions counted inside
psycopg, time spent in the engine's functions (the per-step breakdown), and round trips
counted on the wire by a proxy in front of PostgreSQL and Redis."""

from __future__ import annotations

import argparse
import time
from typing import Any

import psycopg

from bench.chain import flush_redis
from bench.common import create_database, drop_database
from bench.pgbus_runs import DB_NAME, check_runs, engine_for
from bench.probes import CpuMeter, PgCounter, Timers, TurnCounter, named_redis
from bench.report import STEPS


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
    engine = engine_for(db, args.redis_url, inline)
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
            unfinished, _notes = check_runs(conn, runs + 1)
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
                engine = engine_for(pg.url(db), rd.url(args.redis_url), inline)
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
