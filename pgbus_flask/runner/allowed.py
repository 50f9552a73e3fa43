"""What a run allows now: the verbs available and what resume would do."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import states
from ..db import Transaction
from ..errors import ActionNotAllowed, StepNotDefined
from .rows import Row, _now, latest_step, load_class, lock_run

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow


@dataclass(frozen=True)
class ResumePlan:
    """What resume will do: ``action`` (states.RESUME_ACTIONS) and the step it names."""

    action: str
    step: str | None


def resume_plan(run: Row, latest: Row | None, klass: type[Workflow] | None) -> ResumePlan | None:
    """What ``resume`` would do for this paused run (None when it is not paused)."""
    if run["status"] != "paused":
        return None
    if latest is None:
        return ResumePlan("run", run["current_step"])
    status, name = latest["status"], latest["step_name"]
    if status in ("failed", "cancelled"):
        return ResumePlan("retry", name)
    if status in ("completed", "skipped"):
        nxt = None
        if klass is not None:
            try:
                nxt = klass.next_step(name)
            except StepNotDefined:
                return ResumePlan("retry", name)
        return ResumePlan("continue", nxt.name) if nxt else ResumePlan("finish", None)
    if status == "waiting":
        return ResumePlan("keep_waiting", name)
    if status == "in_progress":
        return ResumePlan("let_finish", name)
    return ResumePlan("run", name)


def available_actions(run: Row, latest: Row | None, klass: type[Workflow] | None, now: datetime) -> list[str]:
    """Exactly the verbs allowed on this run now (``klass`` is None when it cannot be imported here)."""
    actions = [a for a in states.ACTIONS if run["status"] in states.ALLOWED_FROM[a]]
    if "skip" in actions and klass is not None and _nothing_left_to_skip(run, latest, klass):
        actions.remove("skip")
    if "run_now" in actions and not (latest and latest["status"] == "scheduled" and latest["scheduled_at"] > now):
        actions.remove("run_now")
    if "reschedule" in actions and not (latest and latest["status"] == "scheduled"):
        actions.remove("reschedule")
    if klass is None:
        actions = [a for a in actions if a not in states.CLASS_ACTIONS]
    return actions


def _nothing_left_to_skip(run: Row, latest: Row | None, klass: type[Workflow]) -> bool:
    """Paused after its last step completed (or was skipped): resume finishes it, skip has no step."""
    if run["status"] != "paused" or latest is None or latest["status"] not in ("completed", "skipped"):
        return False
    try:
        return klass.next_step(latest["step_name"]) is None
    except StepNotDefined:
        return False


def _check(engine: Engine, tx: Transaction, action: str, workflow_id: Any) -> tuple[Row, Row | None,
                                                                                    type[Workflow] | None]:
    run = lock_run(tx, workflow_id)
    latest = latest_step(tx.conn, workflow_id)
    klass = load_class(engine, run["workflow_class"])
    allowed = available_actions(run, latest, klass, _now(tx))
    if action not in allowed:
        detail = None
        if action in states.CLASS_ACTIONS and klass is None and run["status"] in states.ALLOWED_FROM[action]:
            detail = f"workflow class {run['workflow_class']} cannot be imported here"
        elif action == "run_now" and run["status"] == "ready":
            detail = "its step is already due"
        elif action == "signal":
            detail = "signals go only to ongoing runs"
        raise ActionNotAllowed(action, run["status"], allowed, detail)
    return run, latest, klass
