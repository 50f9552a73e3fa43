"""Scheduling a step and the after-commit enqueue: the only place a step job is sent.

Every send of a step has a job id of its own, made from the step row: ``pgbus-step-<id>``
for the first, ``pgbus-step-<id>-send<n>`` for the n-th (the row's ``sends``). A new send
never meets an id RQ already holds (RQ would overwrite that job and push its id a second
time, and the earlier job's cleanup would then delete the new one), and a send that
replaces a job still waiting in RQ withdraws it, so a step has one live job at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .. import attention, db, flow, states
from ..db import Transaction
from ..definition import StepSpec
from ..errors import UnknownWorkflow
from .rows import Row, load_class, move_run, now_of, record_event, run_ended, spec_of

if TYPE_CHECKING:
    from ..engine import Engine, StepJob
    from ..workflow import Workflow


def route(engine: Engine, klass: type[Workflow] | None, step_name: str,
          run_priority: int | None = None) -> tuple[str, timedelta]:
    """The RQ queue (its priority band, see :func:`priority_of`) and timeout of a step's job: the
    step's options, then the class's, then the settings'."""
    spec = spec_of(klass, step_name)
    queue = (spec.queue if spec else None) or (klass.queue if klass else None) or engine.settings.queue
    timeout = (spec.timeout if spec else None) or engine.settings.step_timeout
    return flow.band(queue, priority_of(klass, spec, run_priority)), timeout


def priority_of(klass: type[Workflow] | None, spec: StepSpec | None, run_priority: int | None) -> int:
    """A step's priority: the run's own (``start(..., priority=)``), else the step's, else the class's, else 0."""
    if run_priority is not None:
        return run_priority
    if spec is not None and spec.priority is not None:
        return spec.priority
    return (klass.priority if klass is not None else None) or 0


#: The first part of every step job's id (the step row's id follows).
JOB_PREFIX = "pgbus-step-"


def step_job_id(step_id: int, send: int) -> str:
    """The RQ job id of the ``send``-th job sent for step row ``step_id``."""
    return f"{JOB_PREFIX}{step_id}" if send <= 1 else f"{JOB_PREFIX}{step_id}-send{send}"


def next_send(step: Row) -> dict[str, Any]:
    """The columns of the step's next send (for ``move_step`` and the resends)."""
    sends = step["sends"] + 1
    return {"sends": sends, "job_id": step_job_id(step["id"], sends)}


def step_job(engine: Engine, klass: type[Workflow] | None, step: Row, replaces: str | None = None,
              priority: int | None = None) -> StepJob:
    """The job of ``step``; ``priority``: its run's own (else the row's ``run_priority``, when read with it)."""
    from ..engine import StepJob

    queue, timeout = route(engine, klass, step["step_name"], step.get("run_priority") if priority is None else priority)
    description = f"{step['workflow_class']}.{step['step_name']} #{step['attempt']} (run {step['workflow_id']})"
    return StepJob(step["id"], step["job_id"], queue, step["scheduled_at"], timeout, description,
                   replaces=replaces if replaces != step["job_id"] else None, workflow_id=step["workflow_id"],
                   workflow_class=step["workflow_class"], step_name=step["step_name"], attempt=step["attempt"])


def send(engine: Engine, klass: type[Workflow] | None, step: Row, priority: int | None = None) -> None:
    """Enqueue ``step``'s job now (callers: after the transaction that wrote it committed)."""
    engine.send_step(step_job(engine, klass, step, priority=priority))


def send_after_commit(engine: Engine, tx: Transaction, klass: type[Workflow] | None, step: Row, *,
                      replaces: str | None = None, priority: int | None = None) -> None:
    """Send ``step``'s job once ``tx`` commits (never if it rolls back), withdrawing the job it
    ``replaces`` if that one is still queued or scheduled; ``priority``: its run's own."""
    job = step_job(engine, klass, step, replaces, priority)
    tx.after_commit(lambda: engine.send_step(job))


def schedule_step(
    engine: Engine,
    tx: Transaction,
    run: Row,
    klass: type[Workflow] | None,
    step_name: str,
    *,
    actor: str,
    delay: float = 0.0,
    at: datetime | None = None,
    wait_until_pending: bool = False,
    reason: str | None = None,
    set_current: bool = True,
) -> Row:
    """A new scheduled attempt of ``step_name``, sent after commit: due after ``delay`` seconds,
    or at ``at`` when that is later. ``wait_until_pending``: its step's wait_until is still to be
    evaluated, by its job (see attempt.py). ``set_current=False`` when the caller already set the
    run's current step."""
    # The row's id is drawn first so that its first job id (step_job_id(id, 1)) is written with it.
    step = db.fetch_one(
        tx.conn, "schedule_step",
        {"wid": run["workflow_id"], "cls": run["workflow_class"], "step": step_name, "delay": delay, "at": at,
         "prefix": JOB_PREFIX, "pending": wait_until_pending},
    )
    assert step is not None
    if set_current:
        db.run(tx.conn, "set_current_step", (step_name, run["workflow_id"]))
    later = (delay or at is not None) and step["scheduled_at"] > now_of(tx)
    record_event(tx, run["workflow_id"], "step_scheduled", actor, reason=reason, step=step,
                 details={"scheduled_at": step["scheduled_at"]} if later else None)
    send_after_commit(engine, tx, klass, step, priority=run.get("priority"))
    return step  # type: ignore[no-any-return]


def resend_step(engine: Engine, tx: Transaction, klass: type[Workflow] | None, step: Row,
                at: datetime | None = None, priority: int | None = None) -> Row | None:
    """Send a scheduled step again, due at ``at`` if given (a moment someone chose: its step's
    wait_until is then not evaluated), with its next job id, and its earlier job withdrawn if
    still waiting. None if ``step`` (as read under the run's lock) is no longer scheduled or
    was sent again meanwhile."""
    send = next_send(step)
    row = db.fetch_one(tx.conn, "resend_step",
                       (send["sends"], send["job_id"], at, at is None, step["id"], step["sends"]))
    if row is not None:
        send_after_commit(engine, tx, klass, row, replaces=step["job_id"], priority=priority)
    return row  # type: ignore[no-any-return]


def resend_lost(engine: Engine, lost: Sequence[tuple[int, int, str | None]]) -> int:
    """Send again the steps whose jobs Redis has lost, given as ``(step id, sends, job id)`` as
    the sweep read them: one UPDATE for all (a step that was claimed, sent again or whose run
    stopped being ready since then is left alone), then one Redis round trip after commit.
    Each counts in the step's ``resends``, which backs off its next resend. Returns how many
    were sent. No status changes, so no run lock: the claim's guards decide, as ever."""
    if not lost:
        return 0
    with engine.db.transaction() as tx:
        rows = db.fetch_all(
            tx.conn, "resend_lost",
            {"ids": [i for i, _, _ in lost], "sends": [n for _, n, _ in lost], "jobs": [j for _, _, j in lost],
             "next": [step_job_id(i, n + 1) for i, n, _ in lost]},
        )
        jobs = [step_job(engine, load_class(engine, row["workflow_class"]), row, row["replaces"]) for row in rows]
        tx.after_commit(lambda: engine.send_steps(jobs))
    return len(rows)


def retries_wait_until(spec: StepSpec | None, error_code: str | None) -> bool:
    """Whether a new attempt after one that failed with ``error_code`` evaluates its step's
    wait_until again: yes when it was the wait_until that failed (WaitUntilFailed)."""
    return spec is not None and spec.wait_until is not None and error_code == "wait_until_failed"


def advance(engine: Engine, tx: Transaction, run: Row, klass: type[Workflow] | None, after: str, *,
            actor: str, ended_at: datetime | None = None, not_before: datetime | None = None) -> Row:
    """Schedule the step after ``after`` (run ready) or finish the run.

    The next step is due its ``wait`` after ``after`` ended (``ended_at``, now by default), and
    not before ``not_before`` (what ``after``'s code asked with ``self.sleep()``); a moment
    already past is now. Its ``wait_until`` is left to its job to evaluate (docs/delays.md).
    """
    nxt = klass.next_step(after) if klass is not None else None
    wid = run["workflow_id"]
    if nxt is None and klass is None:
        raise UnknownWorkflow(run["workflow_class"])
    if nxt is None:
        moved = move_run(tx.conn, wid, states.ONGOING, "finished", finished_at=now_of(tx), paused_at=None)
        record_event(tx, wid, "finished", actor)
        run_ended(engine, tx, moved)
        return moved or run
    at = not_before
    if nxt.wait is not None:
        waited = (ended_at or now_of(tx)) + nxt.wait
        at = waited if at is None else max(at, waited)
    step = schedule_step(engine, tx, run, klass, nxt.name, actor=actor, at=at,
                         wait_until_pending=nxt.wait_until is not None, set_current=False)
    # The step first, so that the run's row is written once, already with its attention columns.
    moved = move_run(tx.conn, wid, states.ONGOING, "ready", paused_at=None, current_step=nxt.name,
                     **attention.of_ready(step))
    return moved or run
