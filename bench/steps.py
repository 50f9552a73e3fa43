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
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

from bench.chain import chain_burst, chain_in_process, chain_live
from bench.common import DEFAULT_REDIS, DEFAULT_SERVER, ms, pct
from bench.dbos_steps import dbos_child, dbos_run
from bench.pgbus_runs import (
    DBOS_DB,
    PLAIN_RQ_WORKER,
    PLAIN_RQ_WORKER_CONFIG,
    pgbus_burst,
    pgbus_live,
    start_latency_idle,
)
from bench.probes import named_redis
from bench.report import STEPS, Result, cpu_table, log, ratio, redis_table, table
from bench.step_costs import in_process, print_in_process, print_round_trips, round_trips


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
    parser.add_argument("--only-fork", action="store_true",
                        help="run the forking-worker phases only (no live, in-process, latency or Redis phases)")
    parser.add_argument("--skip-burst", action="store_true", help="skip the burst (left-unfinished) phases")
    parser.add_argument("--small-burst", type=int, default=100,
                        help="also run the burst phases at this size (default 100; 0: no)")
    parser.add_argument("--skip-dbos", action="store_true", help="skip DBOS Transact")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--dbos-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dbos-db", default=DBOS_DB, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def fork_phases(args: argparse.Namespace,
                start_xacts: float | None) -> tuple[list[Result], list[tuple[Result, Result]]]:
    """The forking workers: PgbusForkWorker inline on, off, on with Flask imported; a plain ``rq worker``
    (RQ's Worker, horses building their engine from PGBUS_*); RQ's own chain on RQ's Worker."""
    log("forking workers: pgbus PgbusForkWorker inline on, off, on with Flask imported; plain rq worker (and"
        " with -c pgbus_flask.rq_config); RQ chain Worker")
    fork = argparse.Namespace(**{**vars(args), "runs": min(args.fork_runs, args.runs)})
    fork_class = "pgbus_flask.worker.runner.PgbusForkWorker"
    pf, _ = pgbus_live(fork, f"pgbus ForkWorker, inline on ({fork.runs})", worker_class=fork_class)
    pfo, _ = pgbus_live(fork, f"pgbus ForkWorker, inline off ({fork.runs})", worker_class=fork_class,
                        inline=False)
    # Flask imported in the worker before it forks: guards finding 1 of bench/RESULTS.md.
    pff, _ = pgbus_live(fork, f"pgbus ForkWorker, on, +flask ({fork.runs})", worker_class=fork_class,
                        imports="tests.workflows,flask")
    prq, _ = pgbus_live(fork, f"pgbus plain rq worker, inline on ({fork.runs})", worker_class=PLAIN_RQ_WORKER)
    ours = [pf, pfo, pff, prq]
    if importlib.util.find_spec("pgbus_flask.rq_config") is not None:  # not in revisions before it
        ours.append(pgbus_live(fork, f"pgbus rq worker -c rq_config, on ({fork.runs})",
                               worker_class=PLAIN_RQ_WORKER_CONFIG)[0])
    cf = chain_live(fork, "rq.worker.Worker", f"RQ chain, Worker (fork) ({fork.runs})")
    for r in ours:
        if r.xacts_per_step is not None and start_xacts is not None:
            r.xacts_steps_only = r.xacts_per_step - start_xacts / STEPS
    return [*ours, cf], [(r, cf) for r in ours]


def fork_only(args: argparse.Namespace) -> None:
    """``--only-fork``: the forking-worker phases and their tables, nothing else."""
    results, pairs = fork_phases(args, None)
    print(f"\n=== bench.steps --only-fork, {results[0].steps // STEPS} runs x {STEPS} steps, {args.workers} workers"
          f" (load average at the end: {os.getloadavg()[0]:.2f}) ===")
    table(results)
    print()
    for a, b in pairs:
        print(f"ratio {a.name} / {b.name}: {ratio(a, b)}")
    cpu_table(results)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"when": datetime.now().astimezone().isoformat(timespec="seconds"), "revision": git_revision(),
                       "runs": args.fork_runs, "workers": args.workers, "results": [r.as_json() for r in results],
                       "load_end": os.getloadavg()}, fh, indent=1, default=str)


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

        if args.only_fork:
            fork_only(args)
            return 0
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
            fork_results, fork_pairs = fork_phases(args, start_xacts)
            results += fork_results
            pairs += fork_pairs

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
