"""What a run allows now: the verbs available and what resume would do."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import states
from ..db import Transaction
from ..errors import ActionNotAllowed, StepNotDefined
from .rows import Row, latest_step, load_class, lock_run, now_of

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
    if klass is not None and step_gone(klass, name):
        return ResumePlan("step_gone", name)  # resume refused: resume at a step the class has now
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


def step_gone(klass: type[Workflow], name: str) -> bool:
    """True when the class (as declared now) no longer has the step ``name``."""
    return all(spec.name != name for spec in klass.steps)


def outdated(run: Row, klass: type[Workflow] | None) -> bool:
    """True when the run started on a different definition than its class declares now."""
    return klass is not None and klass.definition_digest != run["definition_digest"]


def available_actions(run: Row, latest: Row | None, klass: type[Workflow] | None, now: datetime) -> list[str]:
    """Exactly the verbs allowed on this run now (``klass`` is None when it cannot be imported here)."""
    actions = [a for a in states.ACTIONS if run["status"] in states.ALLOWED_FROM[a]]
    current = latest["step_name"] if latest is not None else run["current_step"]
    gone = klass is not None and step_gone(klass, current)
    if "upgrade" in actions and (not outdated(run, klass) or gone):
        actions.remove("upgrade")
    if gone:  # resume and skip would act on a step the class no longer has: resume_at or cancel
        actions = [a for a in actions if a not in ("resume", "skip")]
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


def check_allowed(engine: Engine, tx: Transaction, action: str, workflow_id: Any) -> tuple[Row, Row | None,
                                                                                           type[Workflow] | None]:
    run = lock_run(tx, workflow_id)
    latest = latest_step(tx.conn, workflow_id)
    klass = load_class(engine, run["workflow_class"])
    allowed = available_actions(run, latest, klass, now_of(tx))
    if action not in allowed:
        detail = None
        if action in states.CLASS_ACTIONS and klass is None and run["status"] in states.ALLOWED_FROM[action]:
            detail = f"workflow class {run['workflow_class']} cannot be imported here"
        elif action == "run_now" and run["status"] == "ready":
            detail = "its step is already due"
        elif action == "signal":
            detail = "signals go only to ongoing runs"
        elif action == "upgrade" and klass is not None and run["status"] in states.ONGOING:
            current = latest["step_name"] if latest is not None else run["current_step"]
            detail = (f"its step {current} no longer exists in {klass.workflow_name}; resume it at one of: "
                      f"{', '.join(s.name for s in klass.steps)}" if step_gone(klass, current)
                      else "it already runs on the current definition")
        elif action in ("resume", "skip") and klass is not None and run["status"] in states.ALLOWED_FROM[action]:
            current = latest["step_name"] if latest is not None else run["current_step"]
            if step_gone(klass, current):
                detail = (f"its step {current} no longer exists in {klass.workflow_name}; resume it at one of: "
                          f"{', '.join(s.name for s in klass.steps)}")
        raise ActionNotAllowed(action, run["status"], allowed, detail)
    return run, latest, klass
