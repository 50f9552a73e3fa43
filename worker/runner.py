"""RQ worker classes that run pgbus step jobs and the sweep.

``PgbusWorker`` (the default) runs jobs in its own process, like RQ's
``SimpleWorker``: a horse per job costs a fork and a PostgreSQL connection per
job (see docs/scaling.md, "Which worker class"), and a step's state lives in PostgreSQL,
so a crash loses nothing (the sweep finds the stalled attempt). ``PgbusForkWorker`` forks a horse per
job like RQ's ``Worker`` for steps that must not share a process; each horse opens one connection
when its job first needs it (db.HorsePool), and the worker parses the library's statements once,
before it forks (db.prepare_for_fork).

Both work with the plain ``rq worker -w pgbus_flask.worker.runner.PgbusWorker``
command too: with no app they build the engine from ``PGBUS_*`` variables. So does
RQ's own worker class (``rq worker`` with no ``-w``): its horses build the engine
from the same variables when a step job first needs it, but run no sweep; with
``-c pgbus_flask.rq_config`` the worker builds it once, before it forks.

Metrics (``pgbus-worker --metrics-port``): a ``PgbusWorker`` records its steps'
observations where they happen. A ``PgbusForkWorker``'s horse keeps them in a
list and writes it, when its job ends, to a memory file the parent made before
the fork; once the horse has ended, the parent reads the file and records what
it holds in its own metrics, which its server shows. See docs/metrics.md for why
not prometheus_client's multiprocess mode, and what it costs.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
from typing import Any

from rq.worker import SimpleWorker, Worker

from pgbus_flask import db, metrics
from pgbus_flask.engine import engine_from_environ
from pgbus_flask.jobs import SHUTTING_DOWN
from pgbus_flask.sweep import SweepThread

log = logging.getLogger("pgbus_flask")


#: Seconds RQ's command-channel thread waits for a message before it looks at its stop flag.
PUBSUB_WAIT = 1.0


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

    def subscribe(self) -> None:
        """RQ's command channel, listened to by a thread that looks at its stop flag every second.

        RQ starts that thread with ``sleep_time=60``; since redis-py 8.2 stopping it waits for the
        thread, so a worker asked to stop (SIGTERM, ``rq`` commands) could sit up to 60 s before
        it exits. The thread sends nothing while it waits: a shorter wait costs no Redis command.
        """
        me: Any = self
        me.log.info("Worker %s: subscribing to channel %s", me.name, me.pubsub_channel_name)
        me.pubsub = me.connection.pubsub()
        me.pubsub.subscribe(**{me.pubsub_channel_name: me.handle_payload})
        me.pubsub_thread = me.pubsub.run_in_thread(sleep_time=PUBSUB_WAIT, daemon=True,
                                                   exception_handler=me._pubsub_exception_handler)


class PgbusWorker(_PgbusMixin, SimpleWorker):
    """Runs each job in the worker's own process (no fork)."""

    def request_stop(self, signum: Any, frame: Any) -> None:
        SHUTTING_DOWN.set()  # the step job running now continues no further inline
        super().request_stop(signum, frame)


#: What the fork worker sends its horse on a warm shutdown (RQ uses neither USR signal).
HORSE_STOP_SIGNAL = signal.SIGUSR2


class PgbusForkWorker(_PgbusMixin, Worker):
    """Forks a horse per job (RQ's default behaviour); each horse opens its own connection (db.HorsePool).

    Each horse hands the metrics it observed to this process in a memory file of its own.
    """

    #: The file a horse writes its observations to: set before each fork, read once the horse ended.
    _metrics_file: int | None = None

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        db.prepare_for_fork()  # once here, not in every horse

    def execute_job(self, job: Any, queue: Any) -> None:
        try:
            super().execute_job(job, queue)  # fork_work_horse, then monitor_work_horse until the horse ends
        finally:
            out, self._metrics_file = self._metrics_file, None
            if out is not None:
                receive_metrics(out)

    def fork_work_horse(self, job: Any, queue: Any) -> None:
        if metrics.enabled():
            self._metrics_file = scratch_file()
        super().fork_work_horse(job, queue)  # the horse never returns from it (os._exit)

    def perform_job(self, *args: Any, **kwargs: Any) -> bool:
        out = self._metrics_file
        if out is None:
            return bool(super().perform_job(*args, **kwargs))
        metrics.capture()  # this copy of the parent's metrics is never scraped: keep the observations
        try:
            return bool(super().perform_job(*args, **kwargs))
        finally:
            send_metrics(out, metrics.encode())

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


def scratch_file() -> int:
    """A file of no name for one horse's observations: in memory on Linux, else an unlinked temporary file."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("pgbus-horse-metrics", getattr(os, "MFD_CLOEXEC", 0))
    fd, path = tempfile.mkstemp(prefix="pgbus-horse-metrics-")
    os.unlink(path)
    return fd


def send_metrics(fd: int, data: bytes) -> None:
    """In the horse: write its observations to the file its parent reads once the horse has ended
    (a file, not a pipe: it never fills up and blocks the horse, and no thread has to read it)."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        log.warning("pgbus: could not hand this horse's metrics to its worker", exc_info=True)


def receive_metrics(fd: int) -> None:
    """In the parent, once the horse has ended: record what it wrote (nothing if it was killed first;
    half a message from a horse killed while writing is dropped by metrics.replay)."""
    try:
        data = os.pread(fd, os.fstat(fd).st_size, 0)
    except OSError:
        log.warning("pgbus: could not read a horse's metrics", exc_info=True)
        return
    finally:
        os.close(fd)
    metrics.replay(data)


__all__ = ["PgbusForkWorker", "PgbusWorker"]
