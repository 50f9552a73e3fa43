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

Metrics (``pgbus-worker --metrics-port``): a ``PgbusWorker`` records its steps'
observations where they happen. A ``PgbusForkWorker``'s horse keeps them in a
list and writes it, when its job ends, to a pipe the parent opened before the
fork; one thread of the parent reads every horse's pipe and records what comes
in its own metrics, which its server shows. See docs/metrics.md for why not prometheus_client's
multiprocess mode, and what it costs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import threading
from typing import Any

from rq.worker import SimpleWorker, Worker

from pgbus_flask import metrics
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
    """Forks a horse per job (RQ's default behaviour); pools are reopened in the horse.

    Each horse sends the metrics it observed to this process through a pipe of its own.
    """

    #: The write end of the pipe to the parent, in the horse (and in the parent while it forks).
    _metrics_pipe: int | None = None

    def fork_work_horse(self, job: Any, queue: Any) -> None:
        if not metrics.enabled():
            super().fork_work_horse(job, queue)
            return
        read_end, write_end = os.pipe()
        self._metrics_pipe = write_end
        try:
            super().fork_work_horse(job, queue)  # the horse never returns from it (os._exit)
        except BaseException:
            os.close(read_end)
            raise
        finally:
            self._metrics_pipe = None
            os.close(write_end)  # the horse's copy is now the only one: its exit ends the read
        HorseMetrics.of_process().watch(read_end)

    def perform_job(self, *args: Any, **kwargs: Any) -> bool:
        out = self._metrics_pipe
        if out is None:
            return bool(super().perform_job(*args, **kwargs))
        metrics.capture()  # this copy of the parent's metrics is never scraped: keep the observations
        try:
            return bool(super().perform_job(*args, **kwargs))
        finally:
            _send_metrics(out, metrics.encode())

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


def _send_metrics(fd: int, data: bytes) -> None:
    """In the horse: write its observations to the parent and close the pipe."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except OSError:  # the parent is gone: nobody would show them
        log.debug("pgbus: could not send this horse's metrics to its worker", exc_info=True)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


class HorseMetrics(threading.Thread):
    """In a forking worker: one thread reading every horse's pipe, recording each horse's observations
    in this process's metrics once the horse has closed its pipe (it exited).

    One thread for all horses rather than one a job: starting a thread costs more than the rest of
    the pipe's round (docs/metrics.md has the figures), and a pipe a horse's own child keeps open
    then holds nothing up but itself.
    """

    _instance: HorseMetrics | None = None
    _lock = threading.Lock()
    pid = 0  # the process it reads for

    def __init__(self) -> None:
        super().__init__(name="pgbus-horse-metrics", daemon=True)
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._new: list[int] = []
        self._received: dict[int, bytearray] = {}

    @classmethod
    def of_process(cls) -> HorseMetrics:
        """This process's reader, started on first use (a horse that forks again starts its own)."""
        with cls._lock:
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = cls()
                cls._instance.pid = os.getpid()
                cls._instance.start()
            return cls._instance

    def watch(self, fd: int) -> None:
        """Read ``fd`` (a horse's pipe) until it closes, then record what came."""
        with self._lock:
            self._new.append(fd)
        os.write(self._wake_write, b"\0")

    def run(self) -> None:
        while True:
            for key, _events in self._selector.select():
                fd = int(key.fd)
                if fd == self._wake_read:
                    with contextlib.suppress(BlockingIOError):
                        os.read(fd, 4096)
                    with self._lock:
                        new, self._new = self._new, []
                    for pipe in new:
                        self._received[pipe] = bytearray()
                        self._selector.register(pipe, selectors.EVENT_READ)
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except OSError:
                    log.warning("pgbus: could not read a horse's metrics", exc_info=True)
                    chunk = b""
                if chunk:
                    self._received[fd] += chunk
                    continue
                self._selector.unregister(fd)
                os.close(fd)
                try:
                    metrics.replay(bytes(self._received.pop(fd)))
                except Exception:  # the reader must outlive any one horse's message
                    log.exception("pgbus: could not record a horse's metrics")


__all__ = ["PgbusForkWorker", "PgbusWorker"]
