"""The write tools, offered only when ``PGBUS_MCP_WRITE`` is true: every verb of a run (one tool for
each :class:`~pgbus_flask.verbs.Verb` in :data:`VERBS`, the table's), sending a signal, and the bulk
verbs over an attention group.

Each needs a non-empty reason and records the caller's actor (``mcp:<client name>``); a verb goes
through :meth:`pgbus_flask.handle.Run.act` as the CLI's do, so it is refused in the same words.
"""

from __future__ import annotations

from dataclasses import asdict
from functools import partial
from typing import Any

from .. import queries, runner, schedules
from ..errors import InvalidInput
from ..present import shapes
from ..present.text import error_text, moment
from ..verbs import BULK_ACTIONS, MOMENT, RUN_VERBS, Verb
from .base import (
    AFTER,
    ANY,
    BOOL,
    GROUP_KEY,
    INT,
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


def verb_tool(verb: Verb) -> Tool:
    """The write tool of one verb of the table (:mod:`pgbus_flask.verbs`): its parameters besides the run and
    the reason, and the statuses that allow it."""
    where = f" Allowed when the run is {', '.join(verb.allowed_from)}."
    if verb.needs_class:
        where += " It needs the run's workflow class importable by this server (show_run's class_loaded)."
    params = {p.name: string(p.help, format="date-time") if p.kind == MOMENT else string(p.help)
              for p in verb.params}
    required = tuple(p.name for p in verb.params if p.required)
    return Tool(verb.name, f"{verb.description}{where} {WRITE_NOTE}",
                {"workflow_id": string(RUN_ID), **params, "reason": REASON_PARAM},
                ("workflow_id", *required, "reason"), VERB_OUT, partial(act, verb), write=True,
                destructive=verb.destructive)


#: The verbs offered as write tools: every verb of the table but signal (its own tool, ``send_signal``).
VERBS: tuple[Verb, ...] = RUN_VERBS

VERB_OUT = obj({"action": STR, **AFTER, "resume_plan": PLAN})


def _reason(args: dict[str, Any]) -> str:
    reason = args.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidInput("reason", "is required: say why (it is recorded in the run's audit trail)")
    return reason


def act(verb: Verb, call: Call, args: dict[str, Any]) -> Reply:
    reason = _reason(args)
    params = {p.name: args[p.name] for p in verb.params if args.get(p.name) is not None}
    for param in verb.params:
        if param.kind == MOMENT and param.name in params:
            params[param.name] = moment(params[param.name], param.name)
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
    data = shapes.jsonable(shapes.schedule(done))
    state = "paused" if done.paused else f"running; next tick {data['next_tick']}"
    return {"schedule": data}, (f"{action} done by {call.actor}: the schedule of {shown(done.workflow_class, 80)} "
                                f"is {state}.")


SCHEDULE_OUT = obj({"schedule": ROW})


def write_tools() -> tuple[Tool, ...]:
    """The verbs, the signal and the bulk verbs: offered when ``PGBUS_MCP_WRITE`` is true."""
    return (
        *(verb_tool(verb) for verb in VERBS),
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
             {"action": {"enum": list(BULK_ACTIONS)}, **GROUP_KEY, "reason": REASON_PARAM},
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


