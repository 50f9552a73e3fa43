"""Scheduling a step and the after-commit enqueue: the only place a step job is sent."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from .. import attention, states
from ..db import Transaction
from ..definition import StepSpec
from ..errors import StepNotDefined, UnknownWorkflow
from .rows import Row, _now, _q, move_run, record_event

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow


def _route(engine: Engine, klass: type[Workflow] | None, step_name: str) -> tuple[str, bool, timedelta]:
    """Queue, at-front and timeout of a step's job: the step's options, then the class's, then the settings'."""
    spec: StepSpec | None = None
    if klass is not None:
        try:
            spec = klass.step_spec(step_name)
        except StepNotDefined:
            spec = None
    queue = (spec.queue if spec else None) or (klass.queue if klass else None) or engine.settings.queue
    priority = (spec.priority if spec and spec.priority is not None else None)
    if priority is None and klass is not None:
        priority = klass.priority
    timeout = (spec.timeout if spec else None) or engine.settings.step_timeout
    return queue, bool(priority and priority > 0), timeout


def send(engine: Engine, klass: type[Workflow] | None, step: Row) -> None:
    """Enqueue ``step``'s job now (callers: after the transaction that wrote it committed)."""
    queue, at_front, timeout = _route(engine, klass, step["step_name"])
    description = f"{step['workflow_class']}.{step['step_name']} #{step['attempt']} (run {step['workflow_id']})"
    engine.send_step(step["id"], step["job_id"], queue, step["scheduled_at"], at_front, timeout, description)


def _send_after_commit(engine: Engine, tx: Transaction, klass: type[Workflow] | None, step: Row) -> None:
    tx.after_commit(lambda: send(engine, klass, step))


def schedule_step(
    engine: Engine,
    tx: Transaction,
    run: Row,
    klass: type[Workflow] | None,
    step_name: str,
    *,
    actor: str,
    delay: float = 0.0,
    reason: str | None = None,
    set_current: bool = True,
) -> Row:
    """A new scheduled attempt of ``step_name`` (due after ``delay`` seconds), sent after commit.
    ``set_current=False`` when the caller already set the run's current step."""
    step = _q(
        tx.conn,
        """
        INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status,
                                          scheduled_at, enqueued_at, job_id)
        SELECT %(wid)s, %(cls)s, %(step)s, COALESCE(MAX(attempt), 0) + 1, 'scheduled',
               now() + make_interval(secs => %(delay)s), now(), %(job)s
        FROM pgbus_workflow_steps WHERE workflow_id = %(wid)s AND step_name = %(step)s
        RETURNING *
        """,
        {"wid": run["workflow_id"], "cls": run["workflow_class"], "step": step_name, "delay": delay,
         "job": str(uuid.uuid4())},
    ).fetchone()
    if set_current:
        tx.conn.execute(
            "UPDATE pgbus_workflows SET current_step = %s, updated_at = now() WHERE workflow_id = %s",
            (step_name, run["workflow_id"]),
        )
    record_event(tx, run["workflow_id"], "step_scheduled", actor, reason=reason, step=step,
                 details={"scheduled_at": step["scheduled_at"]} if delay else None)
    _send_after_commit(engine, tx, klass, step)
    return step  # type: ignore[no-any-return]


def resend_step(engine: Engine, tx: Transaction, klass: type[Workflow] | None, step: Row,
                at: datetime | None = None) -> Row:
    """Send a scheduled step again (a fresh job id and enqueued_at; due at ``at`` if given)."""
    row = _q(
        tx.conn,
        "UPDATE pgbus_workflow_steps SET enqueued_at = now(), job_id = %s,"
        " scheduled_at = COALESCE(%s, scheduled_at) WHERE id = %s AND status = 'scheduled' RETURNING *",
        (str(uuid.uuid4()), at, step["id"]),
    ).fetchone()
    if row is not None:
        _send_after_commit(engine, tx, klass, row)
    return row  # type: ignore[no-any-return]


def advance(engine: Engine, tx: Transaction, run: Row, klass: type[Workflow] | None, after: str, *,
            actor: str) -> Row:
    """Schedule the step after ``after`` (run ready) or finish the run."""
    nxt = klass.next_step(after) if klass is not None else None
    wid = run["workflow_id"]
    if nxt is None and klass is None:
        raise UnknownWorkflow(run["workflow_class"])
    if nxt is None:
        moved = move_run(tx.conn, wid, states.ONGOING, "finished", finished_at=_now(tx), paused_at=None)
        record_event(tx, wid, "finished", actor)
        return moved or run
    step = schedule_step(engine, tx, run, klass, nxt.name, actor=actor, set_current=False)
    # The step first, so that the run's row is written once, already with its attention columns.
    moved = move_run(tx.conn, wid, states.ONGOING, "ready", paused_at=None, current_step=nxt.name,
                     **attention.of_ready(step))
    return moved or run
