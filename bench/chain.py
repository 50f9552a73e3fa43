"""The plain RQ chain of ``bench.steps`` (5 no-op jobs linked by ``depends_on``, the baseline
that keeps nothing), and the RQ helpers the pgbus phases use too."""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Any

from redis import Redis

from bench.common import VENV_BIN, Processes, env_for
from bench.probes import CpuMeter, RedisMonitor, named_redis
from bench.report import STEPS, Result

CHAIN_QUEUE = "bench_chain"


def flush_redis(redis_url: str) -> None:
    client = named_redis(redis_url)
    client.flushdb()
    client.close()


def wait_workers(redis_url: str, count: int, timeout: float = 30.0) -> None:
    from rq import Worker

    client = named_redis(redis_url)
    deadline = time.monotonic() + timeout
    try:
        while len(Worker.all(connection=client)) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} workers did not register within {timeout}s")
            time.sleep(0.1)
    finally:
        client.close()


def jobs_run(redis_url: str) -> int:
    """Jobs the registered workers have run so far (successful and failed), by RQ's own count."""
    from rq import Worker

    client = named_redis(redis_url)
    try:
        return sum(w.successful_job_count + w.failed_job_count for w in Worker.all(connection=client))
    finally:
        client.close()


def record_redis(res: Result, mon: RedisMonitor, idle: float, window: float) -> None:
    """Put what ``mon`` counted on ``res`` (a note if MONITOR failed)."""
    res.redis, res.redis_lua, res.redis_producer = dict(mon.workers()), mon.lua(), dict(mon.bench())
    res.redis_idle, res.redis_window = idle, window
    if mon.error is not None:
        res.notes.append(f"MONITOR failed, counts incomplete: {mon.error!r}")


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
            # result_ttl: the report reads each job's status and times back.
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


def chain_live(args: argparse.Namespace, worker_class: str, label: str, *, monitor: bool = False) -> Result:
    """Workers up first, then N chains enqueued; wait until all 5N jobs finished. With ``monitor``
    the Redis commands are counted (MONITOR slows Redis down: the timing is not comparable)."""
    redis = named_redis(args.redis_url)
    redis.flushdb()
    res = Result(label, workers=args.workers)
    try:
        with Processes() as procs, contextlib.ExitStack() as stack:
            for i in range(args.workers):
                procs.start(rq_worker_argv(args, worker_class, burst=False), env_for("", args.redis_url),
                            os.path.join(args.logdir, f"chain-{label.replace(' ', '_')}-{i}.log"))
            wait_workers(args.redis_url, args.workers)
            cpu = CpuMeter([p.pid for p in procs.procs], redis_url=args.redis_url)
            mon = stack.enter_context(RedisMonitor(args.redis_url)) if monitor else None
            idle = mon.idle_rate() if mon else 0.0
            window = time.monotonic()
            if not monitor:
                cpu.start()
            chains = enqueue_chains(redis, args.runs)
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline and _finished_count(redis) < args.runs * STEPS:
                time.sleep(0.2)
            if not monitor:
                res.cpu = cpu.stop()
            res.jobs = jobs_run(args.redis_url)
            stack.close()
            if mon is not None:
                record_redis(res, mon, idle, time.monotonic() - window)
            procs.stop()
        if procs.leftovers:
            res.notes.append(f"{len(procs.leftovers)} processes forked by the workers were still alive after their"
                             " worker stopped (killed)")
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
    """N chains enqueued first; burst workers drain and exit; what is left is unfinished."""
    redis = named_redis(args.redis_url)
    redis.flushdb()
    res = Result(label, workers=args.workers)
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
        if statuses:
            res.notes.append(f"unfinished by status: {statuses}")
        res.notes.append(f"{late} finished jobs waited > 0.5 s for maintenance")
    finally:
        redis.flushdb()
        redis.close()
    return res


def chain_in_process(redis: Redis, runs: int) -> tuple[float, int]:
    """ms per job of ``runs`` chains drained by one in-process SimpleWorker, and the jobs its
    burst left unrun (RQ's ready-dependents race)."""
    from rq import Queue, SimpleWorker

    from bench.jobs import noop

    redis.flushdb()
    queue = Queue(CHAIN_QUEUE, connection=redis)
    for i in range(runs):
        parent = None
        for s in range(STEPS):
            parent = queue.enqueue(noop, i, s, depends_on=parent, result_ttl=3600)
    worker = SimpleWorker([queue], connection=redis, maintenance_interval=1)
    t = time.perf_counter()
    worker.work(burst=True, logging_level="WARNING")
    done = queue.finished_job_registry.count
    return 1000 * (time.perf_counter() - t) / max(done, 1), runs * STEPS - done
