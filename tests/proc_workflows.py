"""Workflows and a worker class for the process-level tests (tests/test_processes.py).

Worker subprocesses import this module through ``PGBUS_IMPORT`` (and the
worker class through ``--worker-class``), so it must import cleanly with
nothing but the project root on ``sys.path``.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from pgbus_flask import Workflow, step
from pgbus_flask.worker.runner import PgbusWorker


class SleepsOnce(Workflow):
    """``slow`` sleeps ``seconds`` on its first attempt only (2 s stall deadline), so a
    retry after a crash is quick even though a run's arguments never change."""

    @step(timeout=timedelta(seconds=2))
    def slow(self) -> str:
        if self.attempt == 1:
            time.sleep(self.kwargs.get("seconds", 60))
        return f"woke on attempt {self.attempt}"

    @step
    def after(self) -> str:
        return "after " + str(self.output_of("slow"))


class TripleDeliveryWorker(PgbusWorker):
    """A pgbus worker whose engine enqueues every job it sends three times
    (``engine.deliveries = 3``), so duplicate delivery is exercised for every
    step, not only for the first one the test process sends."""

    deliveries = 3

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        from pgbus_flask import engine as engine_module

        assert engine_module._default is not None
        engine_module._default.deliveries = self.deliveries
