"""A backlog older than the stall threshold: does the sweep feed it?

    python -m bench.backlog                  # 2,000 runs x 5 steps, 3 workers, threshold 2 s
    python -m bench.backlog --threshold 300  # the same with nothing ever overdue
    python -m bench.backlog --runs 500 --repeat 3
    python -m bench.backlog --inline-steps 0   # one step a job (no inline continuation)

What it does, each repeat on a fresh database and a flushed Redis database:

* starts ``--workers`` ``pgbus-worker`` processes (``PgbusWorker``, scheduler on,
  ``--no-sweep``) with ``PGBUS_STALL_THRESHOLD=--threshold`` (and
  ``PGBUS_INLINE_STEPS=--inline-steps`` when given);
* runs the sweep itself, in a thread of this process, every ``--sweep-interval``
  seconds (one sweeper, as the advisory lock makes of the workers' sweep threads),
  so it can add up what each sweep reports;
* starts ``--runs`` ``FiveNoop`` runs as fast as one process can: their first steps
  are a backlog that takes longer than the threshold to drain;
* polls every 0.25 s until every run is finished, noting the queue's length.

It prints, per repeat: steps resent by the sweep (and overdue steps it found still
queued, when the sweep reports them), jobs the workers ran and attempts recorded
(jobs per attempt: 1.0 means no job was wasted), the queue's peak length, end to end
(first run created to last run finished, database clock) and steps/s, the steps
finished in each 10 s window, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
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
)

STEPS = 5
WINDOW = 10


@dataclass
class Outcome:
    runs: int
    resent: int = 0
    overdue_live: int | None = None
    sweeps: int = 0
    sweep_seconds: list[float] = field(default_factory=list)
    sweep_errors: list[str] = field(default_factory=list)
    jobs_run: int = 0
    attempts: int = 0
    completed: int = 0
    queue_peak: int = 0
    seconds: float = float("nan")
    start_seconds: float = float("nan")
    windows: list[int] = field(default_factory=list)
    load: tuple[str, str] = ("", "")
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.completed / self.seconds if self.seconds == self.seconds and self.seconds else float("nan")


def log(msg: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg() -> str:
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


class Sweeper(threading.Thread):
    """The sweep every ``interval`` seconds, adding up what the reports say."""

    def __init__(self, engine: Any, interval: float, outcome: Outcome) -> None:
        super().__init__(name="bench-sweeper", daemon=True)
        self.engine, self.interval, self.outcome = engine, interval, outcome
        self.stopping = threading.Event()

    def run(self) -> None:
        from pgbus_flask.sweep import sweep

        while not self.stopping.wait(self.interval):
            t = time.perf_counter()
            try:
                report = sweep(self.engine)
            except Exception as exc:  # PostgreSQL or Redis hiccup: note it, sweep again
                self.outcome.sweep_errors.append(repr(exc)[:200])
                continue
            if not report.ran:
                continue
            self.outcome.sweeps += 1
            self.outcome.sweep_seconds.append(time.perf_counter() - t)
            self.outcome.resent += report.resent
            live = getattr(report, "overdue_live", None)
            if live is not None:
                self.outcome.overdue_live = (self.outcome.overdue_live or 0) + live
            self.outcome.sweep_errors.extend(report.errors)


def worker_counts(redis: Redis) -> int:
    from rq import Worker

    return sum(w.successful_job_count + w.failed_job_count for w in Worker.all(connection=redis))


def wait_workers(redis: Redis, count: int, timeout: float = 60.0) -> None:
    from rq import Worker

    deadline = time.monotonic() + timeout
    while len(Worker.all(connection=redis)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} workers did not register within {timeout}s")
        time.sleep(0.1)


def one(args: argparse.Namespace, logdir: str, repeat: int) -> Outcome:
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine
    from tests.workflows import FiveNoop

    out = Outcome(args.runs)
    db = create_database(args.server_url, args.db_name)
    redis = Redis.from_url(args.redis_url)
    redis.flushdb()
    threshold = str(args.threshold)
    engine = Engine(Settings.load({"PGBUS_DATABASE_URL": db, "PGBUS_REDIS_URL": args.redis_url,
                                   "PGBUS_STALL_THRESHOLD": threshold})).make_default()
    sweeper = Sweeper(engine, args.sweep_interval, out)
    try:
        with Processes() as procs, psycopg.connect(db, autocommit=True) as poll:
            extra = {"PGBUS_INLINE_STEPS": str(args.inline_steps)} if args.inline_steps is not None else {}
            env = env_for(db, args.redis_url, PGBUS_STALL_THRESHOLD=threshold, PGBUS_SWEEP_INTERVAL="3600", **extra)
            for i in range(args.workers):
                procs.start([os.path.join(VENV_BIN, "pgbus-worker"), "--log-level", "WARNING", "--no-sweep"], env,
                            os.path.join(logdir, f"backlog-{repeat}-{i}.log"))
            wait_workers(redis, args.workers)
            engine.db.pool.wait()
            queue = engine.queue(engine.settings.queue)
            out.load = (loadavg(), "")
            sweeper.start()
            t = time.perf_counter()
            for i in range(args.runs):
                FiveNoop.start(i)
            out.start_seconds = time.perf_counter() - t
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                out.queue_peak = max(out.queue_peak, queue.count)
                row = poll.execute("SELECT count(*) FROM pgbus_workflows WHERE status IN ('ready', 'running',"
                                   " 'waiting', 'paused')").fetchone()
                if row is not None and row[0] == 0:
                    break
                time.sleep(0.25)
            else:
                out.notes.append(f"timed out after {args.timeout}s")
            sweeper.stopping.set()
            sweeper.join(60)
            time.sleep(0.5)  # the last jobs' counters
            out.jobs_run = worker_counts(redis)
            out.load = (out.load[0], loadavg())
            procs.stop()
            out.attempts, out.completed = poll.execute(
                "SELECT count(*), count(*) FILTER (WHERE status = 'completed') FROM pgbus_workflow_steps"
            ).fetchone() or (0, 0)
            span = poll.execute("SELECT min(created_at), extract(epoch FROM max(finished_at) - min(created_at))"
                                " FROM pgbus_workflows WHERE status = 'finished'").fetchone()
            if span and span[1] is not None:
                out.seconds = float(span[1])
                out.windows = [int(n) for (n,) in poll.execute(
                    "SELECT count(s.id) FROM generate_series(0, %s) AS w"
                    " LEFT JOIN pgbus_workflow_steps s ON s.status = 'completed'"
                    " AND floor(extract(epoch FROM s.finished_at - %s) / %s) = w GROUP BY w ORDER BY w",
                    (int(out.seconds // WINDOW), span[0], WINDOW)).fetchall()]
            dup = poll.execute("SELECT count(*) FROM (SELECT workflow_id, step_name FROM pgbus_workflow_steps"
                               " WHERE status = 'completed' GROUP BY 1, 2 HAVING count(*) > 1) x").fetchone()
            if dup and dup[0]:
                out.notes.append(f"{dup[0]} steps completed more than once")
            if out.completed != args.runs * STEPS:
                out.notes.append(f"{args.runs * STEPS - out.completed} steps not completed")
    finally:
        sweeper.stopping.set()
        engine.close()
        redis.flushdb()
        redis.close()
        drop_database(args.server_url, args.db_name)
    return out


def show(out: Outcome) -> None:
    per = out.jobs_run / out.attempts if out.attempts else float("nan")
    live = f", overdue but still queued (not resent): {out.overdue_live}" if out.overdue_live is not None else ""
    took = sorted(out.sweep_seconds) or [float("nan")]
    print(f"  resent by the sweep: {out.resent} in {out.sweeps} sweeps{live}; a sweep took"
          f" {1000 * took[len(took) // 2]:.0f} ms (median), {1000 * took[-1]:.0f} ms (longest)")
    print(f"  jobs run: {out.jobs_run} for {out.attempts} attempts ({per:.2f} jobs per attempt);"
          f" queue peak: {out.queue_peak} jobs")
    print(f"  end to end: {out.seconds:.1f}s, {out.rate:.1f} steps/s ({out.runs} starts took {out.start_seconds:.1f}s)")
    print(f"  steps finished per {WINDOW}s: {' '.join(str(n) for n in out.windows)}")
    print(f"  load average: {out.load[0]} before, {out.load[1]} after")
    for note in out.notes + [f"sweep error: {e}" for e in out.sweep_errors[:5]]:
        print(f"  ! {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.backlog", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", default=DEFAULT_SERVER)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS)
    parser.add_argument("--db-name", default="pgbus_bench_backlog")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=2.0, help="PGBUS_STALL_THRESHOLD, seconds")
    parser.add_argument("--sweep-interval", type=float, default=1.0)
    parser.add_argument("--inline-steps", type=int, default=None,
                        help="PGBUS_INLINE_STEPS for the workers (default: the workers' own setting)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    logdir = tempfile.mkdtemp(prefix="pgbus-bench-backlog-")
    inline = "" if args.inline_steps is None else f", PGBUS_INLINE_STEPS={args.inline_steps}"
    log(f"{args.runs} runs x {STEPS} steps, {args.workers} workers, threshold {args.threshold:g}s{inline}, "
        f"a sweep every {args.sweep_interval:g}s; worker logs in {logdir}")
    for repeat in range(args.repeat):
        out = one(args, logdir, repeat)
        log(f"repeat {repeat + 1} of {args.repeat}")
        show(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
