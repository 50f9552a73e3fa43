"""Workflows and a worker class for the process-level tests (tests/processes/test_processes.py).

Worker subprocesses import this module through ``PGBUS_IMPORT`` (and the
worker class through ``--worker-class``), so it must import cleanly with
nothing but the project root on ``sys.path``.
"""

from __future__ import annotations

import os
import signal
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


class SleepsBriefly(Workflow):
    """``slow`` sleeps ``seconds`` on every attempt, well inside its 30 s stall deadline."""

    @step(timeout=timedelta(seconds=30))
    def slow(self) -> str:
        time.sleep(self.kwargs.get("seconds", 2))
        return "slept"

    @step
    def after(self) -> str:
        return "after"


def mark_pid(marker: str) -> None:
    """Write this process's pid to ``marker`` at once (a test waits for the file, then knows whom to kill)."""
    with open(marker + ".tmp", "w") as out:
        out.write(str(os.getpid()))
    os.replace(marker + ".tmp", marker)


def sleepy_child(index: int, marker: str) -> str:
    """Child 0 sleeps a minute the first time it runs (it writes ``marker`` with its pid
    first, so a test knows whom to kill); every other run of any child is quick."""
    if index == 0 and not os.path.exists(marker):
        mark_pid(marker)
        time.sleep(60)
    return f"child {index} done"


class FansOutSleepy(Workflow):
    """A fan-out of ``n`` children of :func:`sleepy_child`."""

    @step
    def fan(self) -> Any:
        marker = self.kwargs["marker"]
        return self.fan_out(sleepy_child, [(i, marker) for i in range(self.kwargs.get("n", 4))],
                            on_child_failure=self.kwargs.get("on_child_failure", "fail"))

    @step
    def after(self) -> Any:
        return self.output_of("fan")["done"]


def endless_child(index: int, marker: str) -> str:
    """A fan-out child that does not finish: it writes ``marker`` with its pid (so a test knows a
    worker took it), then sleeps a minute, longer than any test waits for it."""
    mark_pid(marker)
    time.sleep(60)
    return f"child {index} done"


class FansOutForever(Workflow):
    """A fan-out of ``n`` children of :func:`endless_child`: it waits on its batch as long as they run."""

    @step
    def fan(self) -> Any:
        return self.fan_out(endless_child, [(i, self.kwargs["marker"]) for i in range(self.kwargs.get("n", 3))])

    @step
    def after(self) -> Any:
        return self.output_of("fan")["done"]


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


class CrashesBeforeEnqueueWorker(PgbusWorker):
    """A pgbus worker that dies (SIGKILL to itself) the first time it is about to enqueue a
    step job: after the transaction that scheduled the step committed, before the job
    reached Redis, the narrowest crash window there is. The file named by
    ``PGBUS_TEST_CRASH_MARKER`` records that it happened (and makes it happen once)."""

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        super().bootstrap(*args, **kwargs)
        from pgbus_flask import engine as engine_module

        engine = engine_module._default
        assert engine is not None
        marker = os.environ["PGBUS_TEST_CRASH_MARKER"]
        send_step = engine.send_step

        def crashing_send_step(*a: Any, **kw: Any) -> None:
            if not os.path.exists(marker):
                with open(marker, "w") as out:
                    out.write(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGKILL)
            send_step(*a, **kw)

        engine.send_step = crashing_send_step  # type: ignore[method-assign]


class PausesBeforeClaimWorker(PgbusWorker):
    """A pgbus worker that, on its first job only, stops between RQ's dequeue and pgbus's claim:
    it writes its pid to the file ``PGBUS_TEST_PAUSE_MARKER`` and sleeps a minute (a test
    SIGKILLs it meanwhile). ``PGBUS_TEST_PAUSE_AT`` says where: ``dequeued`` (RQ has moved the
    job to its intermediate list and to its started registry, its status still queued) or
    ``started`` (RQ has marked it started for this worker; the step job has not run)."""

    def bootstrap(self, *args: Any, **kwargs: Any) -> None:
        self.pause_marker = os.environ["PGBUS_TEST_PAUSE_MARKER"]
        self.pause_at = os.environ["PGBUS_TEST_PAUSE_AT"]
        assert self.pause_at in ("dequeued", "started"), self.pause_at
        super().bootstrap(*args, **kwargs)

    def _pause(self, where: str) -> None:
        if where == self.pause_at and not os.path.exists(self.pause_marker):
            mark_pid(self.pause_marker)
            time.sleep(60)

    def prepare_execution(self, job: Any) -> Any:
        execution = super().prepare_execution(job)
        self._pause("dequeued")
        return execution

    def prepare_job_execution(self, job: Any, remove_from_intermediate_queue: bool = False) -> None:
        super().prepare_job_execution(job, remove_from_intermediate_queue)
        self._pause("started")


class ReattemptsLater(Workflow):
    """``poll`` asks for a reattempt 2 s later on its first attempt: a future step that only
    RQ's scheduler (in ``pgbus-worker``) sends at its time."""

    @step
    def poll(self) -> str:
        if self.attempt == 1:
            self.reattempt(wait=2)
        return f"ready on attempt {self.attempt}"


def create_app() -> Any:
    """A Flask app with PgBus configured from the ``PGBUS_*`` environment, for
    ``pgbus-worker --app tests.proc_workflows:create_app``."""
    from flask import Flask

    from pgbus_flask import PgBus

    app = Flask("pgbus_proc_app")
    app.config.update({k: v for k, v in os.environ.items() if k.startswith("PGBUS_")})
    PgBus(app)
    return app


# -- outcomes PostgreSQL cannot hold as they are (NUL, lone surrogates) -------------------


def hostile_child(text: str, mode: str) -> dict[str, str]:
    """A fan-out child that returns ``text`` or raises with it."""
    if mode == "raise":
        raise RuntimeError(text)
    return {"t": text, text: "as a key"}


class HostileOutcome(Workflow):
    """``produce`` ends with ``text`` in its outcome, as ``case`` says: raised (the step
    is skipped on error, so ``after`` still runs), returned, a pause reason (first
    attempt only), or in a fan-out child's result and error. ``after`` reports
    whether the stored output came back exactly."""

    @step(on_error="skip")
    def produce(self) -> Any:
        text, case = self.kwargs["text"], self.kwargs["case"]
        if case == "raise":
            raise RuntimeError(text)
        if case == "pause" and self.attempt == 1:
            self.pause(text)
        if case == "fan_out":
            return self.fan_out(hostile_child, [(text, "return"), (text, "raise")], on_child_failure="ignore")
        return {"text": text, text: [text]}

    @step
    def after(self) -> dict[str, Any]:
        text, case = self.kwargs["text"], self.kwargs["case"]
        if case == "raise":  # skipped on its error: no output to compare (the test reads the error)
            return {"exact": True}
        output = self.output_of("produce")
        if case == "fan_out":
            return {"exact": output["results"] == [{"t": text, text: "as a key"}, None]}
        return {"exact": output == {"text": text, text: [text]}}


class InlineChain(Workflow):
    """Three quick steps with a 3 s stall deadline, so a step job runs them all inline;
    ``second`` first writes its pid to the file ``marker`` and, on its first attempt only,
    sleeps ``seconds``."""

    @step(timeout=timedelta(seconds=3))
    def first(self) -> str:
        return "first"

    @step(timeout=timedelta(seconds=3))
    def second(self) -> str:
        marker = self.kwargs["marker"]
        with open(marker + ".tmp", "w") as out:
            out.write(str(os.getpid()))
        os.replace(marker + ".tmp", marker)
        if self.attempt == 1:
            time.sleep(self.kwargs.get("seconds", 60))
        return "second"

    @step(timeout=timedelta(seconds=3))
    def third(self) -> str:
        return "third"


class ChargesOrder(Workflow):
    """A transactional step that marks an order paid in the app's own table, then (first
    attempt only, when ``marker`` is given) writes its pid to ``marker`` and sleeps a minute."""

    @step(transactional=True, timeout=timedelta(seconds=3))
    def mark_paid(self) -> str:
        order = self.kwargs["order"]
        self.conn.execute("INSERT INTO app_payments (order_id, attempt) VALUES (%s, %s)", (order, self.attempt))
        marker = self.kwargs.get("marker")
        if marker and self.attempt == 1:
            with open(marker + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.replace(marker + ".tmp", marker)
            time.sleep(60)
        return f"order {order} paid"

    @step
    def receipt(self) -> str:
        return "receipt for " + self.output_of("mark_paid")
