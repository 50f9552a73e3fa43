"""Scale-out: 1, 2, 4, 8 ``pgbus-worker`` processes against one PostgreSQL and one Redis.

    python -m bench.scale_out                       # 1, 2, 4 and 8 workers, 1,000 runs x 5 steps each
    python -m bench.scale_out --workers 1 2 --runs 500

Each line is one live phase of ``bench.steps`` (inline continuation on, as shipped) with that
many workers: end-to-end steps/s, and the CPU each part spent per step (the workers, the
benchmark database's PostgreSQL backends, the Redis server), so the table shows what
saturates first as workers are added. On this machine all of them share 2 cores, so past
two workers the figures say how the shared servers behave under contention, not how far
separate worker machines would go: PostgreSQL CPU per step is the figure that carries over
(docs/scaling.md turns it into steps/s per PostgreSQL core).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from datetime import datetime

from bench.common import DEFAULT_REDIS, DEFAULT_SERVER, positive
from bench.pgbus_runs import pgbus_live
from bench.report import STEPS, Result, log


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=positive, nargs="+", default=[1, 2, 4, 8], help="worker counts (1 2 4 8)")
    parser.add_argument("--runs", type=positive, default=1000, help="runs of 5 no-op steps per worker count (1000)")
    parser.add_argument("--server-url", default=DEFAULT_SERVER, help="a PostgreSQL URL (its database is not used)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of the benchmark's own (flushed)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds each phase may take at most")
    return parser.parse_args(argv)


def per_step(result: Result, part: str) -> float | None:
    value = result.cpu.get(part)
    return None if value is None or not result.steps else value * 1000 / result.steps


def show(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="pgbus-bench-") as logdir:
        args.logdir = logdir
        print(f"bench.scale_out: {args.runs} runs x {STEPS} no-op steps per line, {os.cpu_count()} cores, "
              f"{datetime.now().astimezone().isoformat(timespec='seconds')}, load average {os.getloadavg()[0]:.2f}")
        for workers in args.workers:
            log(f"{workers} worker(s)")
            phase = argparse.Namespace(**{**vars(args), "workers": workers})
            result, _latencies = pgbus_live(phase, f"{workers} workers")
            results.append(result)
    print(f"\n{'workers':>7}{'steps/s':>9}{'unfinished':>11}{'PG ms/step':>12}{'workers ms/step':>16}"
          f"{'Redis ms/step':>14}{'PG cores busy':>14}{'others':>8}")
    for r in results:
        pg = per_step(r, "postgres")
        print(f"{r.workers:>7}{r.rate:>9.0f}{r.unfinished:>11}{show(pg, '.2f'):>12}"
              f"{show(per_step(r, 'workers'), '.2f'):>16}{show(per_step(r, 'redis'), '.2f'):>14}"
              f"{show(pg * r.rate / 1000 if pg is not None else None, '.2f'):>14}"
              f"{show(r.cpu.get('others_cores'), '.2f'):>8}")
        for note in r.notes:
            print(f"  {r.workers} workers: {note}")
    print("  PG ms/step: CPU of the benchmark database's backends per step; PG cores busy: that times steps/s"
          " (1.00 = one core of PostgreSQL saturated); others: cores every other process kept busy meanwhile.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
