"""What a run allows now: the verbs available and what resume would do."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .. import verbs
from ..db import Transaction
from ..errors import ActionNotAllowed, StepNotDefined
from ..verbs import Verb
from . import limits
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


def _current(run: Row, latest: Row | None) -> str:
    return str(latest["step_name"] if latest is not None else run["current_step"])


def _steps_of(klass: type[Workflow]) -> str:
    return ", ".join(s.name for s in klass.steps)


#: The conditions a verb may need beyond its run's status (``Verb.needs``): each a test of the run, its
#: latest step, its class (None when not importable here) and now; and what a refusal says when it fails.
CONDITIONS: dict[str, tuple[Callable[[Row, Row | None, type[Workflow] | None, datetime], bool],
                            Callable[[Row, Row | None, type[Workflow] | None], str | None]]] = {
    # The step it acts on still exists in the class (else: resume at a step it has, or cancel).
    "step_exists": (
        lambda run, latest, klass, now: not (klass is not None and step_gone(klass, _current(run, latest))),
        lambda run, latest, klass: None if klass is None else (
            f"its step {_current(run, latest)} no longer exists in {klass.workflow_name}; resume it at one of: "
            f"{_steps_of(klass)}"),
    ),
    # Paused after its last step completed (or was skipped): resume finishes it, skip has no step.
    "step_to_skip": (lambda run, latest, klass, now: klass is None or not _nothing_left_to_skip(run, latest, klass),
                     lambda run, latest, klass: None),
    # Its step is scheduled for later (run it now).
    "due_later": (lambda run, latest, klass, now: bool(latest and latest["status"] == "scheduled"
                                                       and latest["scheduled_at"] > now),
                  lambda run, latest, klass: "its step is already due"),
    # Its step is scheduled (move it).
    "step_scheduled": (lambda run, latest, klass, now: bool(latest and latest["status"] == "scheduled"),
                       lambda run, latest, klass: None),
    # It started on an older definition of its class.
    "outdated": (lambda run, latest, klass, now: outdated(run, klass),
                 lambda run, latest, klass: "it already runs on the current definition"),
}


def refusal(verb: Verb, run: Row, latest: Row | None, klass: type[Workflow] | None, now: datetime) -> str | None:
    """Why ``verb`` is not allowed on this run now ("" when there is nothing more to say than its
    status), or None when it is allowed."""
    if run["status"] not in verb.allowed_from:
        return verb.status_refusal or ""
    if verb.needs_class and klass is None:
        return f"workflow class {run['workflow_class']} cannot be imported here"
    for name in verb.needs:
        holds, why = CONDITIONS[name]
        if not holds(run, latest, klass, now):
            return why(run, latest, klass) or ""
    return None


def available_actions(run: Row, latest: Row | None, klass: type[Workflow] | None, now: datetime) -> list[str]:
    """Exactly the verbs allowed on this run now (``klass`` is None when it cannot be imported here)."""
    return [name for name in verbs.ACTIONS if refusal(verbs.BY_NAME[name], run, latest, klass, now) is None]


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
    if klass is None or klass.concurrency is not None or any(s.concurrency or s.rate for s in klass.steps):
        limits.watch(engine, tx)  # a verb that moves it may give slots back: the next in line is sent
    now = now_of(tx)
    why = refusal(verbs.verb(action), run, latest, klass, now)
    if why is not None:
        raise ActionNotAllowed(action, run["status"], available_actions(run, latest, klass, now), why or None)
    return run, latest, klass
