"""The write tools, offered only when ``PGBUS_MCP_WRITE`` is true: every verb of a run (one
:class:`Verb` each in :data:`VERBS`), sending a signal, and the bulk verbs over an attention group.

Each needs a non-empty reason and records the caller's actor (``mcp:<client name>``); a verb goes
through :meth:`pgbus_flask.handle.Run.act` as the CLI's do, so it is refused in the same words.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import click

from .. import queries, runner, schedules, states
from ..cli import _Moment, error_text
from ..errors import InvalidInput
from ..web.api import jsonable
from .base import (
    AFTER,
    ANY,
    BOOL,
    GROUP_KEY,
    INT,
    JSON,
    NSTR,
    PLAN,
    ROW,
    RUN_ID,
    STR,
    WRITE_NOTE,
    Call,
    Reply,
    Tool,
    group_key,
    group_named,
    obj,
    shown,
    string,
)

REASON_PARAM = string("why (required: recorded in the run's audit trail; at most 1,000 characters)")


def _reschedule_at(params: dict[str, Any]) -> dict[str, Any]:
    """``at`` as the CLI reads it: ISO 8601 with a timezone."""
    try:
        return {**params, "at": _Moment().convert(params["at"], None, None)}
    except click.BadParameter as exc:
        raise InvalidInput("at", exc.message) from None


@dataclass(frozen=True)
class Verb:
    """One verb of a run as a write tool named ``action`` (the name :meth:`Run.act` takes).

    ``params``: its arguments besides the run and the reason (JSON Schemas), ``convert`` turns
    their JSON values into what the verb takes."""

    action: str
    what: str
    params: Mapping[str, JSON] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    convert: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    destructive: bool = False

    def tool(self) -> Tool:
        allowed = states.ALLOWED_FROM.get(self.action)
        where = f" Allowed when the run is {', '.join(allowed)}." if allowed else ""
        if self.action in states.CLASS_ACTIONS:
            where += " It needs the run's workflow class importable by this server (show_run's class_loaded)."
        return Tool(self.action, f"{self.what}{where} {WRITE_NOTE}",
                    {"workflow_id": string(RUN_ID), **self.params, "reason": REASON_PARAM},
                    ("workflow_id", *self.required, "reason"), VERB_OUT, partial(act, self), write=True,
                    destructive=self.destructive)


VERBS: tuple[Verb, ...] = (
    Verb("pause", "Pause a run: nothing more is scheduled until someone resumes it (a running attempt finishes and "
         "records its outcome; a waiting step keeps waiting, and its signals are kept)."),
    Verb("resume", "Resume a paused run as its resume_plan says (show_run): retry the failed step, continue with "
         "the next, keep waiting, or finish the run."),
    Verb("resume_at", "Cancel the run's open step and run `step` fresh (a new attempt), then go on from there.",
         {"step": string("the step to run next (a step of the run's class)")}, ("step",)),
    Verb("run_now", "Send a ready run's future step now instead of at its scheduled time (refused when its step "
         "is already due)."),
    Verb("reschedule", "Move a ready run's scheduled step to another time.",
         {"at": string("when: ISO 8601 with a timezone, as 2030-01-01T09:00:00+00:00", format="date-time")},
         ("at",), convert=_reschedule_at),
    Verb("skip", "Skip the run's current step (recorded as skipped; its code does not run again) and go on with "
         "the next, or finish the run when it was the last.", destructive=True),
    Verb("rerun", "Run a finished or cancelled run again, from its first step or from `step`, with new attempts.",
         {"step": string("the step to start from (default: the first)")}),
    Verb("cancel", "Cancel a run: its open step is cancelled and nothing more runs. It cannot be undone (rerun "
         "starts it over).", destructive=True),
    Verb("upgrade", "Continue a run that started on an older definition of its class (show_run's "
         "definition_outdated) on the current one: its current step and everything after it follow the class as "
         "declared now. Refused when its current step no longer exists in the class (then resume_at a step that "
         "exists, or cancel)."),
)

VERB_OUT = obj({"action": STR, **AFTER, "resume_plan": PLAN})


def _reason(args: dict[str, Any]) -> str:
    reason = args.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("reason", "is required: say why (it is recorded in the run's audit trail)")
    return reason


def act(verb: Verb, call: Call, args: dict[str, Any]) -> Reply:
    reason = _reason(args)
    params = {name: args[name] for name in verb.params if args.get(name) is not None}
    if verb.convert is not None:
        params = verb.convert(params)
    run = call.run(args["workflow_id"])
    result = run.act(verb.action, actor=call.actor, reason=reason, **params)
    plan = asdict(result) if isinstance(result, runner.ResumePlan) else None
    data = {"action": verb.action, "workflow_id": str(run.workflow_id), "status": run.status,
            "current_step": run.current_step, "available_actions": run.available_actions, "resume_plan": plan}
    done = f" ({plan['action']} {shown(plan['step'] or '', 80)})".replace(" )", ")") if plan else ""
    return data, (f"{verb.action}{done} done by {call.actor}: run {run.workflow_id} is now {run.status} at "
                  f"{shown(run.current_step, 80)}.")


def send_signal(call: Call, args: dict[str, Any]) -> Reply:
    reason = _reason(args)
    run = call.run(args["workflow_id"])
    result = run.signal(args["name"], args.get("payload"), idempotency_key=args.get("idempotency_key"),
                        actor=call.actor, reason=reason)
    signal = asdict(result)
    data = {"signal": signal, "workflow_id": str(run.workflow_id), "status": run.status,
            "current_step": run.current_step, "available_actions": run.available_actions}
    what = "Duplicate delivery: already stored as" if result.duplicate_delivery else "Stored"
    return data, (f"{what} signal {result.id} {shown(result.name, 80)} ({result.status}); run {run.workflow_id} "
                  f"is {run.status} at {shown(run.current_step, 80)}.")


SIGNAL_OUT = obj({"signal": obj({"id": INT, "name": STR, "payload": ANY, "status": STR, "idempotency_key": NSTR,
                                 "created_at": STR, "duplicate_delivery": BOOL}), **AFTER})


def bulk(call: Call, args: dict[str, Any]) -> Reply:
    reason = _reason(args)
    runner.check_who(call.actor, reason)  # the same refusal for every run: say it once, change nothing
    key = group_key(args)
    result = queries.bulk_act(call.engine, args["action"], key, actor=call.actor, reason=reason)
    errors = {run_id: error_text(message) for run_id, message in result.errors.items()}
    data = {"action": result.action, "group": group_named(args), "moved": result.moved, "refused": result.refused,
            "errors": errors}
    text = f"{result.action}: {result.moved:,} moved, {result.refused:,} refused."
    if errors:
        run_id, message = next(iter(errors.items()))
        text += f" First refused: {run_id}: {message}"
    return data, text


BULK_OUT = obj({"action": STR, "group": obj(GROUP_KEY), "moved": INT, "refused": INT,
                "errors": {"type": "object", "additionalProperties": STR,
                           "description": "run id -> why that run was refused"}})


def schedule_verb(action: str, call: Call, args: dict[str, Any]) -> Reply:
    """Pause or resume a workflow class's schedule (audited in the schedule's own trail)."""
    reason = _reason(args)
    verb = schedules.pause if action == "pause" else schedules.resume
    done = verb(call.engine, args["workflow_class"], call.actor, reason)
    data = jsonable(done.to_json())
    state = "paused" if done.paused else f"running; next tick {data['next_tick']}"
    return {"schedule": data}, (f"{action} done by {call.actor}: the schedule of {shown(done.workflow_class, 80)} "
                                f"is {state}.")


SCHEDULE_OUT = obj({"schedule": ROW})


def write_tools() -> tuple[Tool, ...]:
    """The verbs, the signal and the bulk verbs: offered when ``PGBUS_MCP_WRITE`` is true."""
    return (
        *(verb.tool() for verb in VERBS),
        Tool("send_signal", "Send a signal to an ongoing run: a step waiting for a signal of this name takes it "
             "and runs with its payload; otherwise it is kept (pending) until a step asks for it. With an "
             "idempotency_key, sending the same key again stores nothing and says duplicate_delivery. Refused for "
             "a finished or cancelled run. " + WRITE_NOTE,
             {"workflow_id": string(RUN_ID), "name": string("the signal's name (as the step's wait_for names it)"),
              "payload": {"description": "any JSON value the waiting step receives (default null)"},
              "idempotency_key": string("a key that makes a redelivery harmless"), "reason": REASON_PARAM},
             ("workflow_id", "name", "reason"), SIGNAL_OUT, send_signal, write=True, title="Send a signal"),
        Tool("bulk", "Apply one verb (resume, skip or cancel) to every run of one attention group, as "
             "attention_groups returned it (at most 500 runs, oldest stuck first; attention_run_ids lists them). "
             "resume applies to paused groups only. A run whose status no longer allows the verb is counted as "
             "refused with its reason, and the others go on. " + WRITE_NOTE,
             {"action": {"enum": list(states.BULK_ACTIONS)}, **GROUP_KEY, "reason": REASON_PARAM},
             ("action", "workflow_class", "step_name", "stuck_reason", "reason"), BULK_OUT, bulk, write=True,
             destructive=True, title="Bulk verb on an attention group"),
        Tool("pause_schedule", "Pause a workflow class's schedule (list_schedules): the sweep starts no run for "
             "its ticks until it is resumed. Refused when it is paused already. " + WRITE_NOTE,
             {"workflow_class": string("the scheduled workflow class (exact name)"), "reason": REASON_PARAM},
             ("workflow_class", "reason"), SCHEDULE_OUT, partial(schedule_verb, "pause"), write=True,
             title="Pause a schedule"),
        Tool("resume_schedule", "Resume a paused schedule. Ticks missed while it was paused are not started "
             "when its missed policy is \"skip\" (the default): the next run is at its next tick; with \"all\" "
             "they are started. Refused when it is not paused. " + WRITE_NOTE,
             {"workflow_class": string("the scheduled workflow class (exact name)"), "reason": REASON_PARAM},
             ("workflow_class", "reason"), SCHEDULE_OUT, partial(schedule_verb, "resume"), write=True,
             title="Resume a schedule"),
    )


