"""Worker classes for ``bench.horse``: a forking worker that records what each horse cost.

Kept apart from ``bench.horse`` and free of pgbus imports at module level, so that a plain
``rq worker -w bench.horse_workers.MeasuredWorker`` parent imports what RQ's own ``Worker``
parent does and nothing more (``MeasuredForkWorker``, pgbus' forking worker, is made on
first access).

With ``BENCH_HORSE_OUT`` set, the worker appends one JSON line per job to that file: the
horse's CPU (user, system, from ``wait4``'s rusage), its wall time from fork to reap, and the
parent's own CPU for the job (fork, monitoring, what RQ does around it). With
``BENCH_HORSE_PROFILE`` set to a folder, each horse runs under cProfile and dumps its stats
there (``horse-PID.prof``), timed in CPU seconds.
"""

from __future__ import annotations

import json
import os
import resource
import time
from typing import Any

from rq.worker import Worker


class _Measured:
    _horse_rusage: Any = None

    def execute_job(self, job: Any, queue: Any) -> None:
        out = os.environ.get("BENCH_HORSE_OUT")
        before = resource.getrusage(resource.RUSAGE_SELF)
        t = time.perf_counter()
        self._horse_rusage = None
        super().execute_job(job, queue)  # type: ignore[misc]
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_SELF)
        horse = self._horse_rusage
        if out and horse is not None:
            row = {"horse_user": horse.ru_utime, "horse_sys": horse.ru_stime, "horse_minflt": horse.ru_minflt,
                   "parent_user": after.ru_utime - before.ru_utime, "parent_sys": after.ru_stime - before.ru_stime,
                   "wall": wall}
            with open(out, "a") as fh:
                fh.write(json.dumps(row) + "\n")

    def wait_for_horse(self) -> Any:
        pid, stat, rusage = super().wait_for_horse()  # type: ignore[misc]
        if rusage is not None:
            self._horse_rusage = rusage
        return pid, stat, rusage

    def main_work_horse(self, job: Any, queue: Any) -> None:
        folder = os.environ.get("BENCH_HORSE_PROFILE")
        if not folder:
            super().main_work_horse(job, queue)  # type: ignore[misc]
            return
        import cProfile

        profile = cProfile.Profile(time.process_time)  # CPU, not wall: the machine may be loaded
        me: Any = self
        real_perform = me.perform_job

        def perform(*args: Any, **kwargs: Any) -> Any:
            profile.enable()
            try:
                return real_perform(*args, **kwargs)
            finally:
                profile.disable()
                profile.dump_stats(os.path.join(folder, f"horse-{os.getpid()}.prof"))

        me.perform_job = perform
        super().main_work_horse(job, queue)  # type: ignore[misc]


class MeasuredWorker(_Measured, Worker):
    """RQ's own forking ``Worker``, measured (what a plain ``rq worker`` runs)."""


def __getattr__(name: str) -> Any:
    if name == "MeasuredForkWorker":
        from pgbus_flask.worker.runner import PgbusForkWorker

        klass = type("MeasuredForkWorker", (_Measured, PgbusForkWorker), {"__module__": __name__})
        globals()[name] = klass
        return klass
    raise AttributeError(name)
