"""Deadlines that passed: a step attempt that stalled, and a wait that timed out.

The sweep finds them (:mod:`pgbus_flask.sweep`) and calls the functions here, one
run at a time: each locks the run, checks again that the step is still in the state
the sweep saw (another process may have moved it since), and makes the transition.
Each returns False when there was nothing left to do.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from .. import db, messages, metrics
from ..db import Transaction
from ..errors import StepStalled, WaitTimedOut, WorkflowNotFound
from . import limits
from .policy import fail_attempt
from .rows import Row, error_columns, load_class, lock_run, move_run, move_step, now_of, record_event, spec_of
from .scheduling import advance, next_send, send_after_commit

if TYPE_CHECKING:
    from ..engine import Engine


def fail_stalled(engine: Engine, step_id: int, workflow_id: Any) -> bool:
    """Fail an attempt still in progress past its stall deadline (its worker died or hung) with
    :class:`~pgbus_flask.errors.StepStalled`; the step's error policy decides what follows."""
    with engine.db.transaction() as tx:
        limits.watch(engine, tx)  # the slots the attempt held go to the next in line
        try:
            run = lock_run(tx, workflow_id)
        except WorkflowNotFound:
            return False
        step = db.fetch_one(tx.conn, "stalled_attempt", (step_id,))
        if step is None:
            return False
        exc = StepStalled(step["attempt"], step["step_name"], step["worker"], step["stall_at"])
        record_event(tx, workflow_id, "stall_detected", "system", step=step,
                     details={"worker": step["worker"], "stall_at": step["stall_at"]})
        klass = load_class(engine, run["workflow_class"])
        fail_attempt(engine, tx, run, klass, step, error_columns(exc, trace=False), actor="system")
        tx.after_commit(partial(metrics.step_attempt, run["workflow_class"], step["step_name"], "stalled"))
        return True


def expire_wait(engine: Engine, step_id: int, workflow_id: Any) -> bool:
    """End a wait for a signal whose deadline passed, as the step's ``on_timeout`` says. A paused
    run's wait does not run out while it is paused."""
    with engine.db.transaction() as tx:
        try:
            run = lock_run(tx, workflow_id)
        except WorkflowNotFound:
            return False
        if run["status"] != "waiting":
            return False
        step = db.fetch_one(tx.conn, "expired_wait", (step_id,))
        if step is None:
            return False
        wait_timed_out(engine, tx, run, step)
        return True


def wait_timed_out(engine: Engine, tx: Transaction, run: Row, step: Row) -> None:
    """Apply a waiting step's ``on_timeout`` (the run locked by the caller): fail (WaitTimedOut),
    skip, or continue without a signal."""
    klass = load_class(engine, run["workflow_class"])
    spec = spec_of(klass, step["step_name"])
    on_timeout = spec.on_timeout if spec else "fail"
    wid = run["workflow_id"]
    record_event(tx, wid, "wait_timed_out", "system", step=step,
                 details={"on_timeout": on_timeout, "timeout_at": step["timeout_at"]})
    if on_timeout != "continue" or klass is None:  # the attempt ends here (a continued one runs later)
        tx.after_commit(partial(metrics.step_attempt, run["workflow_class"], step["step_name"], "timed_out"))
    if on_timeout == "skip" and klass is not None:
        skipped = move_step(tx.conn, step["id"], ["waiting"], "skipped", finished_at=now_of(tx),
                            outcome="timed_out")
        record_event(tx, wid, "step_skipped", "system", reason=messages.english("wait_timed_out_skipped", {}),
                     step=skipped, details={"message_code": "wait_timed_out_skipped", "message_params": {}})
        advance(engine, tx, run, klass, step["step_name"], actor="system")
    elif on_timeout == "continue" and klass is not None:
        now = now_of(tx)
        woken = move_step(tx.conn, step["id"], ["waiting"], "scheduled", wait_timed_out=True,
                          scheduled_at=now, enqueued_at=now, **next_send(step))
        move_run(tx.conn, wid, ["waiting"], "ready")
        if woken is not None:
            send_after_commit(engine, tx, klass, woken)
    else:
        exc = WaitTimedOut(spec.wait_for if spec else None, step["timeout_at"])
        fail_attempt(engine, tx, run, klass, step, error_columns(exc, trace=False),
                     actor="system", open_from=("waiting",))
