"""The outside verbs: one function each, named as in the table of verbs (:mod:`pgbus_flask.verbs`),
which says what each allows; every door calls them through the run handle."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import psycopg

from .. import db, payload, states
from ..db import Transaction
from ..errors import ActionNotAllowed, InvalidInput, SubjectConflict
from ..verbs import ALLOWED_FROM
from .allowed import ResumePlan, check_allowed, outdated, resume_plan
from .children import cancel_run
from .rows import (
    RESCHEDULE_EARLIEST,
    RESCHEDULE_LATEST,
    Row,
    cancel_open_steps,
    check_who,
    close_open_batches,
    consume_signal_of,
    move_run,
    move_step,
    now_of,
    record_event,
)
from .scheduling import advance, resend_step, retries_wait_until, schedule_step
from .signals import deliver_to_waiting_step

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow

__all__ = ["cancel", "pause", "rerun", "reschedule", "resume", "resume_at", "run_now", "skip", "upgrade"]


def pause(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        _run, latest, _ = check_allowed(engine, tx, "pause", workflow_id)
        move_run(tx.conn, workflow_id, ALLOWED_FROM["pause"], "paused", paused_at=now_of(tx))
        record_event(tx, workflow_id, "paused", actor, reason=reason, step=latest)


def resume(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> ResumePlan:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, latest, klass = check_allowed(engine, tx, "resume", workflow_id)
        plan = resume_plan(run, latest, klass)
        assert plan is not None and klass is not None
        record_event(tx, workflow_id, "resumed", actor, reason=reason, step=latest,
                     details={"plan": plan.action, "step": plan.step})
        if plan.action == "retry" and latest is not None:
            spec = klass.step_spec(latest["step_name"])
            move_run(tx.conn, workflow_id, ["paused"], "ready", paused_at=None)
            schedule_step(engine, tx, run, klass, latest["step_name"], actor=actor,
                          wait_until_pending=retries_wait_until(spec, latest["error_code"]))
        elif plan.action in ("continue", "finish") and latest is not None:
            # The next step's wait counts from when the step before it ended, not from now.
            advance(engine, tx, run, klass, latest["step_name"], actor=actor, ended_at=latest["finished_at"],
                    not_before=latest["next_not_before"])
        elif plan.action == "keep_waiting" and latest is not None:
            _keep_waiting(engine, tx, run, klass, latest)
        elif plan.action == "let_finish":
            move_run(tx.conn, workflow_id, ["paused"], "running", paused_at=None)
        else:
            move_run(tx.conn, workflow_id, ["paused"], "ready", paused_at=None)
            if latest is not None and latest["status"] == "scheduled":
                resend_step(engine, tx, klass, latest, priority=run.get("priority"))
            else:
                schedule_step(engine, tx, run, klass, plan.step or klass.steps[0].name, actor=actor)
        return plan


def _keep_waiting(engine: Engine, tx: Transaction, run: Row, klass: type[Workflow], step: Row) -> None:
    """Back to waiting; the wait's deadline moves by the time spent paused (it did not run while paused)."""
    wid = run["workflow_id"]
    db.run(tx.conn, "extend_wait_by_pause", (run["paused_at"], step["id"]))
    moved = move_run(tx.conn, wid, ["paused"], "waiting", paused_at=None)
    # A batch that finished while paused already completed or failed the step,
    # so only a signal wait gets here with something to deliver.
    if moved is not None and step["batch_id"] is None:
        spec = klass.step_spec(step["step_name"])
        if spec.wait_for:
            deliver_to_waiting_step(engine, tx, moved, spec.wait_for)


def resume_at(engine: Engine, workflow_id: Any, step_name: str, *, actor: str = "app",
              reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, latest, klass = check_allowed(engine, tx, "resume_at", workflow_id)
        assert klass is not None
        klass.step_spec(step_name)
        if outdated(run, klass):  # the step chosen is one of the current definition's
            _adopt_definition(tx, run, klass, actor, reason)
        cancel_open_steps(tx.conn, workflow_id)
        move_run(tx.conn, workflow_id, states.ONGOING, "ready", paused_at=None)
        record_event(tx, workflow_id, "resumed", actor, reason=reason, step=latest,
                     details={"plan": "resume_at", "step": step_name})
        schedule_step(engine, tx, run, klass, step_name, actor=actor)


def upgrade(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    """Continue a run that started on an older definition of its class on the current one: its
    definition digest becomes the class's (audited). Refused when its current step no longer
    exists (resume it at a step of the current definition instead, or cancel it)."""
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, _latest, klass = check_allowed(engine, tx, "upgrade", workflow_id)
        assert klass is not None
        _adopt_definition(tx, run, klass, actor, reason)


def _adopt_definition(tx: Transaction, run: Row, klass: type[Workflow], actor: str, reason: str | None) -> None:
    db.run(tx.conn, "adopt_definition", (klass.definition_digest, run["workflow_id"]))
    record_event(tx, run["workflow_id"], "definition_upgraded", actor, reason=reason,
                 details={"from": run["definition_digest"], "to": klass.definition_digest,
                          "steps": ", ".join(s.name for s in klass.steps)})


def run_now(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, latest, klass = check_allowed(engine, tx, "run_now", workflow_id)
        assert latest is not None
        sent = resend_step(engine, tx, klass, latest, at=now_of(tx), priority=run.get("priority"))
        record_event(tx, workflow_id, "run_now", actor, reason=reason, step=sent)


def reschedule(engine: Engine, workflow_id: Any, at: datetime, *, actor: str = "app",
               reason: str | None = None) -> None:
    check_who(actor, reason)
    if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise InvalidInput("at", "must be a datetime with a timezone (such as 2030-01-01T09:00+00:00), got "
                                 f"{payload.safe_str(repr(at))[:80]}")
    try:
        utc = at.astimezone(timezone.utc)
    except OverflowError:
        utc = None
    if utc is None or not (RESCHEDULE_EARLIEST <= utc <= RESCHEDULE_LATEST):
        raise InvalidInput("at", f"must be between {RESCHEDULE_EARLIEST:%Y-%m-%d} and {RESCHEDULE_LATEST:%Y-%m-%d} "
                                 f"(UTC), got {at.isoformat()}")
    with engine.db.transaction() as tx:
        run, latest, klass = check_allowed(engine, tx, "reschedule", workflow_id)
        assert latest is not None
        sent = resend_step(engine, tx, klass, latest, at=at, priority=run.get("priority"))
        record_event(tx, workflow_id, "rescheduled", actor, reason=reason, step=sent,
                     details={"scheduled_at": at})


def skip(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, latest, klass = check_allowed(engine, tx, "skip", workflow_id)
        assert klass is not None
        if latest is None:
            raise ActionNotAllowed("skip", run["status"], [], "it has no step")
        if latest["status"] in states.OPEN_STEP or latest["status"] in ("failed", "cancelled"):
            skipped = move_step(tx.conn, latest["id"], [latest["status"]], "skipped", finished_at=now_of(tx),
                                outcome=latest["outcome"] or "skipped")
            close_open_batches(tx.conn, workflow_id)
            name = latest["step_name"]
        else:
            # Paused after its step completed: skip the step resume would run next.
            nxt = klass.next_step(latest["step_name"])
            assert nxt is not None  # available_actions refused skip when the last step already ended
            move_run(tx.conn, workflow_id, ["paused"], "paused", current_step=nxt.name)
            skipped = db.fetch_one(tx.conn, "skip_next_step",
                                   {"wid": workflow_id, "cls": run["workflow_class"], "step": nxt.name})
            name = nxt.name
        assert skipped is not None
        klass.step_spec(name)
        consume_signal_of(tx.conn, skipped)
        record_event(tx, workflow_id, "step_skipped", actor, reason=reason, step=skipped)
        advance(engine, tx, run, klass, name, actor=actor)


def rerun(engine: Engine, workflow_id: Any, step_name: str | None = None, *, actor: str = "app",
          reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, _latest, klass = check_allowed(engine, tx, "rerun", workflow_id)
        assert klass is not None
        name = klass.step_spec(step_name).name if step_name else klass.steps[0].name
        try:
            with tx.conn.transaction():
                moved = move_run(tx.conn, workflow_id, states.TERMINAL, "ready", finished_at=None, paused_at=None)
        except psycopg.errors.UniqueViolation:
            raise SubjectConflict(run["workflow_class"], (run["subject_type"], run["subject_id"])) from None
        record_event(tx, workflow_id, "rerun", actor, reason=reason, details={"step": name})
        schedule_step(engine, tx, moved or run, klass, name, actor=actor)


def cancel(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, _latest, _klass = check_allowed(engine, tx, "cancel", workflow_id)
        cancel_run(engine, tx, run, actor=actor, reason=reason)
