"""Shared helpers of the benchmarks: databases of their own, pg_stat_database counters,
worker processes that are always killed, percentiles.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)
DEFAULT_SERVER = os.environ.get("PGBUS_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
DEFAULT_REDIS = os.environ.get("PGBUS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/9")

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a bench phase with no worker, run or job
    would measure nothing)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def db_url(server_url: str, name: str) -> str:
    from pgbus_flask.testing import with_database

    return with_database(server_url, name)


def create_database(server_url: str, name: str, *, migrate: bool = True, template: str | None = None) -> str:
    """Drop and create database ``name`` (migrated unless told otherwise); returns its URL."""
    from pgbus_flask.migrate import apply

    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    url = db_url(server_url, name)
    if migrate and template is None:
        with psycopg.connect(url, autocommit=True) as conn:
            apply(conn)
    return url


def bulk_load(conn: psycopg.Connection[Any], chunks: Sequence[bytes]) -> None:
    """Run seed ``chunks`` (each in its own transaction) the way a bulk load goes fast: the indexes
    that back no constraint dropped first and built again after (one sorted build each instead of millions of random
    inserts), and triggers and foreign-key checks off while they run (``session_replication_role``:
    the seed's rows are consistent by construction; the caller rebuilds what the triggers keep)."""
    indexes = conn.execute(
        "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i"
        " JOIN pg_class c ON c.oid = i.indrelid"
        " WHERE c.relnamespace = 'public'::regnamespace AND c.relname LIKE 'pgbus%'"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)").fetchall()
    with conn.transaction():
        for name, _ in indexes:
            conn.execute(f"DROP INDEX {name}")
    try:
        for chunk in chunks:
            with conn.transaction():
                conn.execute("SET LOCAL session_replication_role = replica")
                conn.execute(chunk)
    finally:  # a seed stopped half way still has its indexes: --reuse would time it without them
        conn.execute("SET maintenance_work_mem = '1GB'")
        for _, definition in indexes:
            conn.execute(definition.encode())
        conn.execute("RESET maintenance_work_mem")


def drop_database(server_url: str, name: str) -> None:
    with contextlib.suppress(Exception), psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def xact_commit(server_url: str, name: str) -> int:
    """Committed transactions of database ``name`` so far (read from another database, so the
    read itself is not counted); the statistics of backends that are still busy may lag ~1 s."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                                (name,)).fetchone()[0])  # type: ignore[index]


def settle_stats(server_url: str, name: str, timeout: float = 15.0) -> int:
    """xact_commit once it has stopped moving (every backend flushed its counters)."""
    last = xact_commit(server_url, name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(1.2)
        now = xact_commit(server_url, name)
        if now == last:
            return now
        last = now
    return last


def env_for(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        PGBUS_DATABASE_URL=database_url,
        PGBUS_REDIS_URL=redis_url,
        PGBUS_IMPORT="tests.workflows",
    )
    env.update(extra)
    return env


def descendants(pid: int) -> list[int]:
    """Processes below ``pid`` now (read from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class Processes:
    """Worker processes started by a benchmark; all are killed on exit, whatever happens.

    Their descendants too, even those in a process group of their own (an RQ horse calls
    setpgrp): one still alive once its worker has stopped is handed to ``on_leftover``
    (to look at it) before it is killed, and listed in ``leftovers``.
    """

    def __init__(self, on_leftover: Callable[[int], Any] | None = None) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self.on_leftover = on_leftover
        self.leftovers: list[int] = []

    def start(self, argv: Sequence[str], env: dict[str, str], log_path: str) -> subprocess.Popen[bytes]:
        log = open(log_path, "ab")  # noqa: SIM115
        proc = subprocess.Popen(list(argv), env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def wait(self, timeout: float) -> bool:
        """Wait for every process to exit; False if some are still running at ``timeout``."""
        deadline = time.monotonic() + timeout
        for proc in self.procs:
            left = deadline - time.monotonic()
            try:
                proc.wait(max(left, 0.01))
            except subprocess.TimeoutExpired:
                return False
        return True

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (RQ's warm shutdown) to each process group, then SIGKILL what is left."""
        below = [pid for proc in self.procs if proc.poll() is None for pid in descendants(proc.pid)]
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        # Forking workers leave horses/scheduler children in the group: end them too.
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in below:
            if os.path.exists(f"/proc/{pid}") and not _zombie(pid):
                self.leftovers.append(pid)
                if self.on_leftover is not None:
                    with contextlib.suppress(Exception):
                        self.on_leftover(pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        self.procs.clear()

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@contextlib.contextmanager
def timer() -> Iterator[list[float]]:
    box: list[float] = []
    start = time.perf_counter()
    try:
        yield box
    finally:
        box.append(time.perf_counter() - start)


def pct(values: Sequence[float], p: float) -> float:
    """The p-th percentile (nearest rank) of ``values``."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"
