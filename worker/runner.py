"""RQ worker classes that run pgbus step jobs and the sweep.

``PgbusWorker`` (the default) runs jobs in its own process, like RQ's
``SimpleWorker``: a horse per job costs a fork and a fresh pool connection
per step (see docs/benchmarks.md), and a step's state lives in PostgreSQL,
so a crash loses nothing (the sweep finds the stalled attempt). ``PgbusForkWorker`` forks a horse per
job like RQ's ``Worker`` for steps that must not share a process.

Both work with the plain ``rq worker -w pgbus_flask.worker.runner.PgbusWorker``
command too: with no app they build the engine from ``PGBUS_*`` variables. So does
RQ's own worker class (``rq worker`` with no ``-w``): its horses build the engine
from the same variables when a step job first needs it, but run no sweep.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

from rq.worker import SimpleWorker, Worker

from pgbus_flask.engine import engine_from_environ
from pgbus_flask.jobs import SHUTTING_DOWN
from pgbus_flask.sweep import SweepThread

log = logging.getLogger("pgbus_flask")


class _PgbusMixin:
    """Makes sure an engine exists and runs the sweep thread while the worker lives."""

    sweep_enabled = True
    _sweeper: SweepThread | None = None

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        engine = engine_from_environ()  # the pgbus-worker's own, or one from PGBUS_*
        super().bootstrap(*args, **kwargs)  # type: ignore[misc]
        if self.sweep_enabled:
            self._sweeper = SweepThread(engine)
            self._sweeper.start()

    def teardown(self) -> None:
        if self._sweeper is not None:
            self._sweeper.stop()
        super().teardown()  # type: ignore[misc]


class PgbusWorker(_PgbusMixin, SimpleWorker):
    """Runs each job in the worker's own process (no fork)."""

    def request_stop(self, signum: Any, frame: Any) -> None:
        SHUTTING_DOWN.set()  # the step job running now continues no further inline
        super().request_stop(signum, frame)


#: What the fork worker sends its horse on a warm shutdown (RQ uses neither USR signal).
HORSE_STOP_SIGNAL = signal.SIGUSR2


class PgbusForkWorker(_PgbusMixin, Worker):
    """Forks a horse per job (RQ's default behaviour); pools are reopened in the horse."""

    def setup_work_horse_signals(self) -> None:
        super().setup_work_horse_signals()
        signal.signal(HORSE_STOP_SIGNAL, lambda signum, frame: SHUTTING_DOWN.set())

    def handle_warm_shutdown_request(self) -> None:
        super().handle_warm_shutdown_request()
        if self.horse_pid:
            try:
                os.kill(self.horse_pid, HORSE_STOP_SIGNAL)
            except OSError:  # the horse may have just ended
                log.debug("pgbus: could not tell the horse to stop continuing inline", exc_info=True)


__all__ = ["PgbusForkWorker", "PgbusWorker"]
