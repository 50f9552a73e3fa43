"""The error policy: what a failed attempt does next (reattempt, pause, cancel, skip)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import db, states
from ..db import Transaction
from .rows import (
    Row,
    cancel_open_steps,
    consume_signal_of,
    message_details,
    move_run,
    move_step,
    now_of,
    record_event,
    run_ended,
    spec_of,
)
from .scheduling import advance, retries_wait_until, schedule_step

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow


def fail_attempt(engine: Engine, tx: Transaction, run: Row, klass: type[Workflow] | None, step: Row,
                 error: dict[str, Any], *, actor: str, open_from: Sequence[str] = ("in_progress",)) -> str | None:
    """An attempt failed: record the error, then apply the step's error policy.

    The policy acts only on a run that is still going (running or waiting);
    a paused run just keeps the failure, and resume retries the step.
    Returns what became of the attempt for the metrics (``reattempted``, ``cancelled``,
    ``skipped``, or ``failed``: the run paused, or was paused already), None when the
    attempt was no longer open.
    """
    spec = spec_of(klass, step["step_name"])
    policy = spec.on_error if spec else "pause"
    active = run["status"] in ("running", "waiting")
    outcome = "failed"
    consecutive = 0
    if active and policy == "reattempt" and spec is not None:
        outcomes = [r["outcome"] for r in db.fetch_all(
            tx.conn, "earlier_outcomes", (step["workflow_id"], step["step_name"], step["id"]))]
        for value in outcomes:
            if value != "reattempted":
                break
            consecutive += 1
        if consecutive < spec.max_reattempts:
            outcome = "reattempted"
        else:
            policy = "pause"
    to = "skipped" if active and policy == "skip" else "failed"
    failed = move_step(tx.conn, step["id"], list(open_from), to, finished_at=now_of(tx), outcome=outcome, **error)
    if failed is None:
        return None
    coded = message_details(error)
    details = {"error_class": error.get("error_class"), "error_message": error.get("error_message"), **coded}
    record_event(tx, run["workflow_id"], "step_failed", actor, step=failed, details=details)
    if not active:
        return "failed"
    if outcome == "reattempted" and spec is not None:
        delay = spec.backoff_seconds(consecutive + 1)
        record_event(tx, run["workflow_id"], "step_reattempted", actor, step=failed, details={"wait": delay})
        move_run(tx.conn, run["workflow_id"], ["running", "waiting"], "ready")
        schedule_step(engine, tx, run, klass, step["step_name"], actor=actor, delay=delay,
                      wait_until_pending=retries_wait_until(spec, error.get("error_code")))
        return "reattempted"
    return _end_or_pause(engine, tx, run, klass, failed, policy, actor=actor,
                         summary=f"{error.get('error_class')}: {error.get('error_message')}", coded=coded)


def _reattempts_in_a_row(tx: Transaction, step: Row) -> int:
    """How many of the step's latest earlier attempts, in a row, ended in a reattempt."""
    outcomes = [r["outcome"] for r in db.fetch_all(
        tx.conn, "earlier_outcomes", (step["workflow_id"], step["step_name"], step["id"]))]
    consecutive = 0
    for value in outcomes:
        if value != "reattempted":
            break
        consecutive += 1
    return consecutive


def _end_or_pause(engine: Engine, tx: Transaction, run: Row, klass: type[Workflow] | None, failed: Row,
                  policy: str, *, actor: str, summary: str, coded: dict[str, Any]) -> str:
    """The error policy of a failed attempt of a going run, once no reattempt is left: cancel the
    run, skip the step, or pause the run for a person (the metrics' outcome of the attempt)."""
    wid = run["workflow_id"]
    if policy == "cancel":
        cancel_open_steps(tx.conn, wid)
        ended = move_run(tx.conn, wid, states.ONGOING, "cancelled", finished_at=now_of(tx))
        record_event(tx, wid, "cancelled", actor, reason=summary, step=failed, details=coded)
        run_ended(engine, tx, ended)
        return "cancelled"
    if policy == "skip":
        consume_signal_of(tx.conn, failed)
        record_event(tx, wid, "step_skipped", actor, reason=summary, step=failed, details=coded)
        advance(engine, tx, run, klass, failed["step_name"], actor=actor)
        return "skipped"
    move_run(tx.conn, wid, ["running", "waiting"], "paused", paused_at=now_of(tx))
    record_event(tx, wid, "paused", actor, reason=summary, step=failed, details=coded)
    return "failed"
