"""Inline continuation: a step job that completes a step may claim and run the next one itself.

docs/architecture.md, "Inline continuation". When a step completes, its run is
still ``running`` (no pause or cancel committed meanwhile), the next step is
due now, routes to the queue this job came from, waits for no signal, and the
job's :class:`Budget` allows it, the outcome transaction also claims the next
step: one statement locks the run (before any step row; for a plain completion
it is the transaction's first, see ``attempt.record_outcome``), completes this
attempt, inserts the next attempt already ``in_progress`` (started_at,
stall_at, the job's id, the worker), moves the run's current step and writes
the same three audit events the two-job path writes (``step_completed``,
``step_scheduled``, ``step_started``). Nothing is enqueued. A worker that dies
afterwards leaves an ``in_progress`` attempt with a stall deadline, which the
sweep finds as it finds any other.

Otherwise the outcome transaction schedules the next step and the after-commit
hook enqueues it, as with one step a job.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from .. import db, payload, states
from ..db import Transaction
from ..definition import StepSpec
from .rows import Row, now_of, worker_name
from .scheduling import route

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow


def _never() -> bool:
    return False


@dataclass
class Budget:
    """What one step job may still run inline after its first step.

    ``steps`` more steps, none started after ``until`` (``time.monotonic()``), each only
    if RQ's timeout for the job (``job_deadline``) leaves room for that step's whole
    stall deadline plus :data:`states.JOB_TIMEOUT_MARGIN`, only for steps routed to
    ``queue``, and only while ``stopping()`` (the worker's warm shutdown) is false.
    """

    steps: int
    until: float
    queue: str
    job_deadline: float | None = None
    stopping: Callable[[], bool] = field(default=_never)

    @classmethod
    def for_job(cls, engine: Engine, *, queue: str, job_timeout: float | None,
                stopping: Callable[[], bool] = _never) -> Budget | None:
        """The budget of a step job that started now; None when inline continuation is off."""
        settings = engine.settings
        if settings.inline_steps <= 0:
            return None
        now = time.monotonic()
        return cls(
            steps=settings.inline_steps,
            until=now + settings.inline_seconds.total_seconds(),
            queue=queue,
            job_deadline=now + job_timeout if job_timeout and job_timeout > 0 else None,
            stopping=stopping,
        )

    def allows(self, queue: str, timeout_seconds: float) -> bool:
        if self.steps <= 0 or queue != self.queue:
            return False
        now = time.monotonic()
        if now >= self.until:
            return False
        if self.job_deadline is not None and now + timeout_seconds + states.JOB_TIMEOUT_MARGIN > self.job_deadline:
            return False
        return not self.stopping()


@dataclass(frozen=True)
class Continued:
    """The next step, claimed in the outcome transaction of the step before it."""

    run: Row
    step: Row
    spec: StepSpec




def continue_inline(engine: Engine, tx: Transaction, run: Row, step: Row, klass: type[Workflow],
                    output: Any, budget: Budget | None, job_id: str | None,
                    not_before: datetime | None = None) -> Continued | None:
    """Complete ``step`` and claim the step after it in this transaction, when the budget and
    the next step allow (see the module's docstring); None when the caller must complete and
    advance the usual way (nothing was written then). A next step that is not due now (its
    ``wait``, or ``not_before``: the step's ``self.sleep()``) or whose ``wait_until`` its own
    job must evaluate never runs inline."""
    if budget is None or run["status"] != "running" or tx.buffered:
        return None
    nxt = klass.next_step(step["step_name"])
    if nxt is None or nxt.wait_for or nxt.wait or nxt.wait_until or nxt.concurrency or nxt.rate:
        return None  # (a step with its own limit or rate is claimed by its job, which takes them)
    if not_before is not None and not_before > now_of(tx):
        return None
    queue, timeout = route(engine, klass, nxt.name, run.get("priority"))
    if not budget.allows(queue, timeout.total_seconds()):
        return None
    worker = worker_name()
    row = db.fetch_one(tx, "continue_inline", {
        "output": Jsonb(output), "done": step["id"], "wid": run["workflow_id"], "cls": run["workflow_class"],
        "step": nxt.name, "timeout": timeout.total_seconds(), "job": job_id, "worker": worker,
        "rev": engine.settings.app_revision, "nothing": Jsonb({}),
        "started": Jsonb(payload.to_json({"worker": worker})),
    })
    if row is None:
        return None
    budget.steps -= 1
    return Continued({**run, "current_step": nxt.name}, row, nxt)
