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

from rq import SimpleWorker

from pgbus_flask.engine import Engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRANSLATIONS = Path(ROOT) / "translations"


def settings_for(pg_url: str, redis_url: str, **extra: Any) -> dict[str, Any]:
    return {"PGBUS_DATABASE_URL": pg_url, "PGBUS_REDIS_URL": redis_url, **extra}


class CountingWorker(SimpleWorker):
    """RQ's SimpleWorker, counting the jobs it ran (with inline continuation a job runs several steps).

    It listens to no commands over Redis pub/sub (nothing sends the in-process worker any): with
    RQ 3.0 and redis-py 8.2, stopping that listener at the end of a burst races with the reply to its
    unsubscribe and now and then waits 60 s (RQ's pub/sub sleep time).
    """

    performed = 0

    def subscribe(self) -> None:
        """No pub/sub listener: see the class's docstring."""

    def perform_job(self, *args: Any, **kwargs: Any) -> bool:
        self.performed += 1
        return super().perform_job(*args, **kwargs)


def work(engine: Engine, queues: list[str] | None = None) -> int:
    """Run every queued job in this process until the queues are empty; how many jobs RQ ran."""
    names = queues or engine.queue_names()
    worker = CountingWorker([engine.queue(n) for n in names], connection=engine.redis)
    worker.work(burst=True, logging_level="WARNING")
    return worker.performed
