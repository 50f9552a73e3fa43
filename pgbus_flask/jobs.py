"""The RQ job functions (RQ finds them by dotted path): a step attempt and a fan-out child.

Nothing a step produced reaches RQ's own storage: the outcome goes to PostgreSQL,
the job returns None, and when recording fails the job raises :class:`StepJobFailed`
with storable text only and no chained exception (RQ saves a failed job's traceback
in Redis, and a lone surrogate in it crashes the worker).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from rq import get_current_job

from . import db, payload, runner
from .definition import fan_out_function
from .engine import resolve_engine
from .errors import ChildFunctionNotAllowed, DatabaseError, PgbusError

log = logging.getLogger("pgbus_flask")

#: Set when the worker running this process's jobs was asked to stop (warm shutdown): the
#: step job in progress finishes its step and enqueues the next instead of running it inline.
#: pgbus-worker's worker classes set it; see pgbus_flask.worker.runner.
SHUTTING_DOWN = threading.Event()


class StepJobFailed(PgbusError):
    """A step or child job could not record its outcome (the sweep will find the attempt)."""


def _guarded(what: str, body: Callable[[], None]) -> None:
    try:
        body()
    except Exception as exc:
        message = f"{what}: {runner.error_name(exc)}: {payload.safe_str(exc)}"
        raise StepJobFailed(message) from None


def run_step(step_id: int) -> None:
    """One delivery of a step: a no-op unless the step is due, scheduled and its run ready.
    It may go on to run the steps after it (inline continuation, see runner.inline)."""
    job = get_current_job()

    def attempt() -> None:
        engine = resolve_engine()
        budget = None
        if job is not None:
            budget = runner.Budget.for_job(engine, queue=job.origin, job_timeout=job.timeout,
                                           stopping=SHUTTING_DOWN.is_set)
        runner.run_attempt(engine, step_id, job.id if job else None, budget)

    _guarded(f"step {step_id}", attempt)


def wake_rate(name: str) -> None:
    """A rate's wake-up (docs/flow-control.md): send the steps waiting for it that its window has
    room for now, and the next wake-up while some still wait."""
    def wake() -> None:
        runner.wake_rate(resolve_engine(), name)

    _guarded(f"rate {name!r}", wake)


def run_child(batch_id: int, position: int) -> None:
    """One fan-out child: run its function, record its result or error once. Only a function a
    registered workflow may fan out runs (see definition.fan_out_function); any other name fails
    the child with ChildFunctionNotAllowed."""
    _guarded(f"batch {batch_id} child {position}", lambda: _run_child(batch_id, position))


def _run_child(batch_id: int, position: int) -> None:
    engine = resolve_engine()
    with engine.db.connection() as conn:
        row = db.fetch_one(conn, "fan_out_child", (batch_id, position))
    if row is None or row["status"] != "pending" or row["step_status"] != "waiting":
        return  # unknown, a redelivery of a child already recorded, or its step was cancelled or skipped
    args, func_path = payload.from_json(row["args"]), row["func"]
    try:
        # Not import_attribute: the name is read from the database, and importing runs code.
        func: Any = fan_out_function(func_path, engine.settings.imports)
        result = func(*args)
    except ChildFunctionNotAllowed as exc:
        log.warning("pgbus: batch %s child %s not run: %s", batch_id, position, exc)
        runner.record_child(engine, batch_id, position, error=exc)
        return
    except Exception as exc:
        runner.record_child(engine, batch_id, position, error=exc)
        return
    try:
        runner.record_child(engine, batch_id, position, result=result)
    except DatabaseError as exc:  # PostgreSQL refused the result itself: the child fails with why
        runner.record_child(engine, batch_id, position, error=exc)
