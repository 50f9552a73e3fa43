"""What the Prometheus metrics cost a worker: per step, per forked job, and what the road not taken
(prometheus_client's multiprocess mode) would have cost a forking worker's scrapes.

    python -m bench.metrics_cost                       # about 1 min
    python -m bench.metrics_cost --live-runs 300 --live-fork-runs 100   # also end to end (about 6 more min)

Phases (figures are printed, never asserted):

* **observations**: the calls the runner makes for one step job of ``FiveNoop`` (one queue wait,
  five attempts with their durations), timed in a loop with recording on and off: ns per step.
* **in process**: ``--runs`` FiveNoop runs (inline continuation on, as shipped) drained by an
  in-process RQ ``SimpleWorker``, metrics on and off in turns, ``--rounds`` times: this process's CPU time
  (``time.process_time``: what the worker spends, not PostgreSQL's or Redis's) and wall time per
  step, medians of the rounds. The difference is what recording costs a step on the hot path.
* **forked jobs**: ``--forks`` forks of a child that observes what a FiveNoop job observes, with
  and without handing it to this process in a memory file as ``PgbusForkWorker`` does (the real
  functions), the two taking turns fork by fork: the extra wall time per job.
* **multiprocess mode** (in a child process with ``PROMETHEUS_MULTIPROC_DIR`` set): that many
  horses, each observing the same and exiting, as a fork-per-job worker's would; files left in
  the folder, and how long one scrape of them takes, as they pile up.
* **live** (``--live-runs N``): 2 ``pgbus-worker`` processes (``PgbusWorker``) run N FiveNoop
  runs with metrics on, and with a worker class that turns them off, in the order on, off, off,
  on (the machine drifts); steps/s and worker CPU per step (``bench.steps``'s live phase), the
  mean of the two phases of each. ``--live-fork-runs N``: the same with ``PgbusForkWorker`` and
  inline continuation off (a fork and a memory file per step).

Its database (``pgbus_bench_metrics_<pid>``) is dropped at the end and its Redis database flushed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from typing import Any

from bench.chain import flush_redis
from bench.common import DEFAULT_REDIS, DEFAULT_SERVER, ROOT, create_database, drop_database
from bench.report import STEPS, log
from pgbus_flask import metrics
from pgbus_flask.runner.attempt import count_attempt, queue_wait_of
from pgbus_flask.worker.runner import PgbusForkWorker, PgbusWorker, receive_metrics, scratch_file, send_metrics

DB_NAME = f"pgbus_bench_metrics_{os.getpid()}"
STEP_NAMES = ("s1", "s2", "s3", "s4", "s5")


class MetricsOffWorker(PgbusWorker):
    """``PgbusWorker`` with recording turned off (the live phase's baseline)."""

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        metrics.set_enabled(False)
        super().bootstrap(*args, **kwargs)


class MetricsOffForkWorker(PgbusForkWorker):
    """``PgbusForkWorker`` with recording (and so the horses' files) turned off."""

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        metrics.set_enabled(False)
        super().bootstrap(*args, **kwargs)


def one_job() -> None:
    """What the runner records for one FiveNoop step job with inline continuation."""
    metrics.queue_wait("FiveNoop", "s1", 0.002)
    for name in STEP_NAMES:
        metrics.step_attempt("FiveNoop", name, "completed", 0.00003)


_CLAIMED = {"scheduled_at": datetime(2026, 1, 1, tzinfo=timezone.utc),
            "enqueued_at": datetime(2026, 1, 1, 0, 0, 1, tzinfo=timezone.utc),
            "started_at": datetime(2026, 1, 1, 0, 0, 2, tzinfo=timezone.utc)}


def one_job_as_the_runner_does() -> None:
    """The same through the runner's own hooks: the queue wait from the claimed row's times, and each
    outcome counted by an after-commit callback of its transaction (here a bare one, committed at once)."""
    tx = _Committed()
    if metrics.enabled():
        metrics.queue_wait("FiveNoop", "s1", queue_wait_of(_CLAIMED))
    for name in STEP_NAMES:
        count_attempt(tx, "FiveNoop", name, "completed", 0.00003)  # type: ignore[arg-type]
    for callback in tx.callbacks:
        callback()


class _Committed:
    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def after_commit(self, callback: Any) -> None:
        self.callbacks.append(callback)


def observations(loops: int) -> dict[str, float]:
    """ns per step of the recording calls alone, and through the runner's hooks; on and off."""
    out = {}
    for what, job in (("calls", one_job), ("hooks", one_job_as_the_runner_does)):
        for label, on in (("on", True), ("off", False)):
            metrics.set_enabled(on)
            job()  # the series exist: the steady state
            best = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(loops):
                    job()
                best.append(time.perf_counter() - t)
            out[f"{what} {label}"] = min(best) / (loops * STEPS) * 1e9
    metrics.set_enabled(True)
    return out


def in_process(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Per-step CPU and wall time of an in-process worker, metrics on and off, medians of the rounds."""
    from rq import SimpleWorker

    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine
    from pgbus_flask.testing import empty
    from tests.workflows import FiveNoop

    db = create_database(args.server_url, DB_NAME)
    flush_redis(args.redis_url)
    engine = Engine(Settings.load({"PGBUS_DATABASE_URL": db, "PGBUS_REDIS_URL": args.redis_url})).make_default()
    figures: dict[str, dict[str, list[float]]] = {"on": {"cpu": [], "wall": []}, "off": {"cpu": [], "wall": []}}
    try:
        engine.db.pool.wait()
        for i in range(20):  # warm up: imports, the pool, the series
            FiveNoop.start(-i)
        SimpleWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis).work(
            burst=True, logging_level="WARNING")
        for round_ in range(args.rounds):
            for label in (("on", "off") if round_ % 2 == 0 else ("off", "on")):  # alternate who goes first
                metrics.set_enabled(label == "on")
                for i in range(args.runs):
                    FiveNoop.start(i)
                worker = SimpleWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
                cpu, wall = time.process_time(), time.perf_counter()
                worker.work(burst=True, logging_level="WARNING")
                steps = args.runs * STEPS
                figures[label]["cpu"].append((time.process_time() - cpu) / steps)
                figures[label]["wall"].append((time.perf_counter() - wall) / steps)
                with engine.db.connection() as conn:  # the next round starts from empty tables
                    empty(conn)
    finally:
        metrics.set_enabled(True)
        engine.close()
        drop_database(args.server_url, DB_NAME)
        flush_redis(args.redis_url)
    return {label: {**{k: statistics.median(v) for k, v in parts.items()}, "cpu_min": min(parts["cpu"]),
                     "cpu_max": max(parts["cpu"])} for label, parts in figures.items()}


def forked_jobs(forks: int) -> dict[str, float]:
    """Wall time per fork of a child that observes a FiveNoop job, kept in the child or handed to this process
    as PgbusForkWorker does (a memory file per horse, read once it ended); medians, the two variants taking
    turns fork by fork so that the machine's noise falls on both alike."""
    times: dict[str, list[float]] = {"kept in the horse": [], "handed to the parent": []}
    labels = {"workflow_class": "FiveNoop", "step": "s1", "outcome": "completed"}
    before = metrics.value("pgbus_step_attempts_total", labels) or 0
    for n in range(forks * 2):
        label = list(times)[n % 2]
        t = time.perf_counter()
        if label == "kept in the horse":
            pid = os.fork()
            if pid == 0:
                one_job()
                os._exit(0)
            os.waitpid(pid, 0)
        else:
            out = scratch_file()
            pid = os.fork()
            if pid == 0:
                metrics.capture()
                one_job()
                send_metrics(out, metrics.encode())
                os._exit(0)
            os.waitpid(pid, 0)
            receive_metrics(out)
        times[label].append(time.perf_counter() - t)
    assert metrics.value("pgbus_step_attempts_total", labels) == before + forks, "a horse's observations were lost"
    return {label: statistics.median(values) for label, values in times.items()}


MULTIPROCESS_CHILD = r"""
import os, sys, time
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
attempts = Counter("pgbus_step_attempts", "", ["workflow_class", "step", "outcome"])
duration = Histogram("pgbus_step_duration_seconds", "", ["workflow_class", "step"])
wait = Histogram("pgbus_step_queue_wait_seconds", "", ["workflow_class", "step"])
folder = os.environ["PROMETHEUS_MULTIPROC_DIR"]
done = 0
for target in [int(n) for n in sys.argv[1].split(",")]:
    horse = []
    while done < target:
        t = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            wait.labels("FiveNoop", "s1").observe(0.002)
            for name in ("s1", "s2", "s3", "s4", "s5"):
                attempts.labels("FiveNoop", name, "completed").inc()
                duration.labels("FiveNoop", name).observe(0.00003)
            os._exit(0)
        os.waitpid(pid, 0)
        horse.append(time.perf_counter() - t)
        done += 1
    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    scrapes = []
    for _ in range(3):
        t = time.perf_counter()
        text = generate_latest(registry)
        scrapes.append(time.perf_counter() - t)
    files = os.listdir(folder)
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in files)
    horse.sort()
    print(f"{done} {len(files)} {size} {min(scrapes)} {horse[len(horse) // 2]} {len(text)}", flush=True)
"""


def multiprocess_mode(sizes: list[int]) -> list[dict[str, float]]:
    """Files, bytes and scrape time of prometheus_client's multiprocess mode after N fork-per-job horses."""
    with tempfile.TemporaryDirectory(prefix="pgbus-bench-multiproc-") as folder:
        env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": folder}
        done = subprocess.run([sys.executable, "-c", MULTIPROCESS_CHILD, ",".join(map(str, sizes))], env=env,
                              capture_output=True, text=True, timeout=900, cwd=ROOT)
        if done.returncode != 0:
            raise RuntimeError(done.stderr)
    rows = []
    for line in done.stdout.splitlines():
        horses, files, size, scrape, fork, text = line.split()
        rows.append({"horses": int(horses), "files": int(files), "bytes": int(size), "scrape": float(scrape),
                     "fork": float(fork), "exposition": int(text)})
    return rows


def live(args: argparse.Namespace) -> list[tuple[str, float, float, float]]:
    """2 pgbus-worker processes, metrics on and off in the order on, off, off, on (the machine drifts: a
    phase that always went first would look slower); inline continuation on. With ``--live-fork-runs``
    also PgbusForkWorker with inline continuation off (a fork and a memory file per step: the worst case).
    Per configuration: the mean of its two phases' steps/s, worker CPU per step and others' cores."""
    from bench.pgbus_runs import pgbus_live

    kinds = []
    if args.live_runs:
        kinds.append(("PgbusWorker, inline on", args.live_runs, True, "pgbus_flask.worker.runner.PgbusWorker",
                      "bench.metrics_cost.MetricsOffWorker"))
    if args.live_fork_runs:
        kinds.append(("PgbusForkWorker, inline off", args.live_fork_runs, False,
                      "pgbus_flask.worker.runner.PgbusForkWorker", "bench.metrics_cost.MetricsOffForkWorker"))
    out = []
    for name, runs, inline, on_class, off_class in kinds:
        phase_args = argparse.Namespace(**{**vars(args), "runs": runs, "workers": 2})
        results: dict[str, list[Any]] = {"on": [], "off": []}
        for label in ("on", "off", "off", "on"):
            worker_class = on_class if label == "on" else off_class
            results[label].append(pgbus_live(phase_args, f"{name}, metrics {label}", inline=inline,
                                             worker_class=worker_class)[0])
        for label, phases in results.items():
            rate = statistics.mean(r.rate for r in phases)
            cpu = statistics.mean((r.cpu.get("workers") or float("nan")) / r.steps for r in phases if r.steps)
            others = statistics.mean(r.cpu.get("others_cores") or float("nan") for r in phases)
            out.append((f"{name}, {runs} runs, metrics {label}", rate, cpu, others))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", default=DEFAULT_SERVER, help="a PostgreSQL URL (its database is not used)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of the benchmark's own (flushed)")
    parser.add_argument("--runs", type=int, default=200, help="FiveNoop runs per in-process round (default 200)")
    parser.add_argument("--rounds", type=int, default=6, help="in-process rounds, each on and off (default 6)")
    parser.add_argument("--loops", type=int, default=20000, help="jobs per observations loop (default 20000)")
    parser.add_argument("--forks", type=int, default=300, help="forks per forked-jobs variant (default 300)")
    parser.add_argument("--multiprocess", default="100,1000,5000",
                        help="horses after which the multiprocess folder is scraped (default 100,1000,5000)")
    parser.add_argument("--live-runs", type=int, default=0, help="also the live phase with this many runs")
    parser.add_argument("--live-fork-runs", type=int, default=0,
                        help="also the live phase of PgbusForkWorker, inline off, with this many runs")
    parser.add_argument("--timeout", type=float, default=300, help="seconds a live phase may take at most")
    args = parser.parse_args(argv)
    if not metrics.AVAILABLE:
        print("bench.metrics_cost: prometheus-client is not installed (pip install -e '.[metrics]')")
        return 2
    print(f"bench.metrics_cost: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")

    log(f"observations: {args.loops} FiveNoop jobs' worth of recording calls, on and off")
    obs = observations(args.loops)
    log(f"in process: {args.rounds} rounds of {args.runs} FiveNoop runs, metrics on and off")
    ip = in_process(args)
    log(f"forked jobs: {args.forks} forks without and with the memory file for the parent")
    fj = forked_jobs(args.forks)
    sizes = [int(n) for n in args.multiprocess.split(",") if n]
    log(f"multiprocess mode: scrapes after {', '.join(map(str, sizes))} horses")
    mp = multiprocess_mode(sizes) if sizes else []
    lv = []
    if args.live_runs or args.live_fork_runs:
        log(f"live: {args.live_runs} runs (simple) and {args.live_fork_runs} (forking, inline off) through 2"
            " pgbus-worker processes, metrics on, then off")
        with tempfile.TemporaryDirectory(prefix="pgbus-bench-") as logdir:
            args.logdir = logdir
            lv = live(args)

    print(f"\n=== bench.metrics_cost (load average at the end: {os.getloadavg()[0]:.2f}) ===")
    print(f"per step, recording calls alone: {obs['calls on']:.0f} ns on, {obs['calls off']:.0f} ns off;"
          f" through the runner's hooks: {obs['hooks on']:.0f} ns on, {obs['hooks off']:.0f} ns off")
    on, off = ip["on"], ip["off"]
    cpu_extra = (on["cpu"] - off["cpu"]) * 1e6
    print(f"in-process worker, per step (median of {args.rounds} rounds of {args.runs * STEPS} steps):"
          f" CPU {on['cpu'] * 1e6:.0f} us on, {off['cpu'] * 1e6:.0f} us off ({cpu_extra:+.1f} us,"
          f" {cpu_extra / (off['cpu'] * 1e6) * 100:+.1f}%; rounds ranged {on['cpu_min'] * 1e6:.0f}-"
          f"{on['cpu_max'] * 1e6:.0f} on, {off['cpu_min'] * 1e6:.0f}-{off['cpu_max'] * 1e6:.0f} off);"
          f" wall {on['wall'] * 1e6:.0f} us on, {off['wall'] * 1e6:.0f} us off"
          f" ({(on['wall'] / off['wall'] - 1) * 100:+.1f}%)")
    kept, sent = fj["kept in the horse"], fj["handed to the parent"]
    print(f"forked job (median of {args.forks}): {kept * 1e3:.2f} ms with the observations kept in the horse,"
          f" {sent * 1e3:.2f} ms handed to the parent in a memory file ({(sent - kept) * 1e6:+.0f} us per job)")
    for row in mp:
        print(f"multiprocess mode after {row['horses']:>5} horses: {row['files']:>5} files, "
              f"{row['bytes'] / 1e6:7.1f} MB, one scrape {row['scrape'] * 1e3:8.1f} ms, fork+observe median"
              f" {row['fork'] * 1e3:.2f} ms")
    for name, rate, cpu, others in lv:
        print(f"live, {name} (mean of 2 phases, on-off-off-on): {rate:.1f} steps/s, workers' CPU"
              f" {cpu * 1e6:.0f} us per step, others kept {others:.2f} cores busy")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
