"""The read tools, always offered: the overview, runs, a run, the attention groups and a group's runs,
a class's insights. Each answers with the JSON shapes the JSON API answers with too
(:mod:`pgbus_flask.present.shapes`), its sentences in English."""

from __future__ import annotations

from typing import Any

from .. import insights, queries, runner, schedules, states
from ..present import english, shapes
from .base import (
    ACTIONS,
    BACKTRACE_TAIL,
    BOOL,
    CURSOR,
    GROUP,
    GROUP_KEY,
    INT,
    JSON,
    NINT,
    NSTR,
    PLAN,
    PRESENTATION,
    REASON,
    REASONS,
    ROW,
    RUN_ID,
    RUN_ROW,
    RUNS_PAGE,
    STATUS,
    STATUSES,
    STR,
    Call,
    Reply,
    Tool,
    arr,
    group_key,
    group_named,
    nullable,
    obj,
    runs_text,
    shown,
    string,
)


def overview(call: Call, args: dict[str, Any]) -> Reply:
    data = shapes.overview(call.engine)
    by_status = {status: 0 for status in states.RUN_STATUSES}
    for item in data["counts"]:
        by_status[item["status"]] += item["runs"]
    by_reason = {reason: 0 for reason in states.STUCK_REASONS}
    capped = {item["reason"] for item in data["stuck"] if item["capped"]}
    for item in data["stuck"]:
        by_reason[item["reason"]] += item["runs"]
    data.update(runs_by_status=by_status, stuck_by_reason=by_reason, stuck_capped=sorted(capped))
    statuses = ", ".join(f"{n:,} {s}" for s, n in by_status.items() if n) or "no runs"
    stuck = ", ".join(f"{n:,}{'+' if r in capped else ''} {r}" for r, n in by_reason.items() if n)
    needs = "needs" if data["attention"] == 1 else "need"
    at_least = "at least " if data["attention_capped"] else ""
    text = (f"{statuses}. {at_least}{runs_text(data['attention'])} {needs} attention"
            + (f" ({stuck})." if stuck else ".") + f" Ongoing: {data['ongoing']:,}, paused: {data['paused']:,}."
            + (f" Overdue runs are counted up to {data['count_cap']:,} a group (+: at least)." if capped else ""))
    return data, text


OVERVIEW_OUT = obj({
    "counts": arr(obj({"workflow_class": STR, "status": STATUS, "runs": INT})),
    "stuck": arr(obj({"workflow_class": STR, "reason": REASON, "runs": INT,
                      "capped": {**BOOL, "description": "runs is a lower bound (counted up to count_cap a group)"}})),
    "ongoing": INT, "paused": INT, "attention": INT,
    "attention_capped": {**BOOL, "description": "attention is a lower bound"},
    "count_cap": {**INT, "description": "the most overdue runs of one attention group that are counted"},
    "stuck_capped": arr({**REASON, "description": "the reasons whose stuck_by_reason is a lower bound"}),
    "runs_by_status": obj({s: INT for s in states.RUN_STATUSES}),
    "stuck_by_reason": obj({r: INT for r in states.STUCK_REASONS}),
})


def list_runs(call: Call, args: dict[str, Any]) -> Reply:
    filters = {name: args.get(name) or None for name in ("workflow_class", "status", "step", "error_class",
                                                         "subject", "text")}
    filters["reason"] = args.get("stuck_reason") or None
    if args.get("error_class") == "" and filters["reason"]:
        filters["error_class"] = ""  # with a stuck reason: the group without an error class
    data = shapes.runs(call.engine, english(), filters, args.get("before"), args.get("limit", RUNS_PAGE))
    more = data["next_before"]
    lines = [runs_text(len(data["runs"])) + (f"; older ones: call again with before={more}" if more else "") + "."]
    for run in data["runs"]:
        lines.append(f"{run['workflow_id']}  {shown(run['workflow_class'], 60)}  {run['status']}  "
                     f"at {shown(run['current_step'], 60)}: {shown(run['presentation']['sentence'])}")
    return data, "\n".join(lines)


LIST_RUNS_OUT = obj({
    "runs": arr({**RUN_ROW, "properties": {**RUN_ROW["properties"], "latest_step": ROW, "presentation": PRESENTATION},
                 "required": [*RUN_ROW["required"], "latest_step", "presentation"]}),
    "next_before": {**NINT, "description": "pass as `before` for the next (older) page; null: no more"},
})


def show_run(call: Call, args: dict[str, Any]) -> Reply:
    run_id = queries.resolve_run_id(call.engine, args["workflow_id"])
    data = shapes.run(call.engine, english(), run_id, args.get("steps_before"), args.get("events_before"),
                        signals_before=args.get("signals_before"), children_before=args.get("children_before"),
                        batches_before=args.get("batches_before"))
    if not args.get("full_backtraces"):
        for step in data["steps"]:
            trace = step.get("backtrace")
            if isinstance(trace, str) and len(trace) > BACKTRACE_TAIL:
                step["backtrace"] = (f"… ({len(trace) - BACKTRACE_TAIL:,} earlier characters left out: "
                                     f"full_backtraces=true shows them)\n{trace[-BACKTRACE_TAIL:]}")
    row = data["run"]
    lines = [f"{shown(row['workflow_class'], 80)} {row['workflow_id']}: {row['status']} at "
             f"{shown(row['current_step'], 80)}. {shown(data['presentation']['sentence'])}"]
    if row.get("subject_type"):
        lines.append(f"Subject: {shown(row['subject_type'], 80)} {shown(row['subject_id'], 80)}")
    lines.append("Verbs allowed now: " + (", ".join(data["available_actions"]) or "none"))
    if data["resume_plan"]:
        plan = data["resume_plan"]
        lines.append(f"Resume would: {plan['action']} {shown(plan['step'] or '', 80)}".rstrip())
    failed = [s for s in data["steps"] if s.get("error_class")]
    if failed:
        last = failed[-1]
        lines.append(f"Latest error: {shown(last['step_name'], 80)} #{last['attempt']}: "
                     f"{shown(last['error_class'], 80)}: {shown(last['error_message'] or '')}")
    if data["definition_outdated"]:
        lines.append("It started on an older definition of its class (the class's steps or options changed since).")
    if data.get("parent"):
        lines.append(f"Started by run {data['parent']['workflow_id']} at its step "
                     f"{shown(data['parent']['step'] or '', 80)}.")
    if data.get("children"):
        states_of = ", ".join(f"{c['workflow_id']} {c['status']}" for c in data["children"][:10])
        total = data["children_total"]
        page = f", {len(data['children'])} shown" if len(data["children"]) < total else ""
        lines.append(f"Child runs ({total:,}{page}): {states_of}" + (" …" if len(data["children"]) > 10 else ""))
    if not data["class_loaded"]:
        lines.append("Its class is not importable here: resume, resume_at, rerun and skip are refused.")
    lines.append(f"{len(data['steps'])} attempts, {len(data['events'])} audit events, {len(data['signals'])} of "
                 f"{data['signals_total']:,} signals, {len(data['batches'])} of {data['batches_total']:,} batches "
                 "shown.")
    older = [f"{name}_before={data['older_' + name]}" for name in ("steps", "events", "signals", "children",
                                                                  "batches") if data["older_" + name]]
    if older:
        lines.append("Older ones: call again with " + ", ".join(older) + ".")
    return data, "\n".join(lines)


SHOW_RUN_OUT = obj({
    "run": RUN_ROW, "presentation": PRESENTATION, "available_actions": ACTIONS, "resume_plan": PLAN,
    "definition_outdated": BOOL, "class_loaded": BOOL,
    "steps": arr(obj({"id": INT, "step_name": STR, "attempt": INT, "status": {"enum": list(states.STEP_STATUSES)},
                      "error_class": NSTR, "error_message": NSTR, "backtrace": NSTR},
                     ("id", "step_name", "attempt", "status"))),
    "older_steps": {**NINT, "description": "pass as `steps_before` for older attempts; null: none"},
    "events": arr(obj({"id": INT, "event": STR, "actor": STR, "reason": NSTR, "sentence": STR},
                      ("id", "event", "actor", "sentence"))),
    "older_events": {**NINT, "description": "pass as `events_before` for older events; null: none"},
    "signals": arr(ROW),
    "older_signals": {**NINT, "description": "pass as `signals_before` for older signals; null: none"},
    "signals_total": {**INT, "description": "how many signals the run has"},
    "batches": arr(ROW),
    "older_batches": {**NINT, "description": "pass as `batches_before` for older batches; null: none"},
    "batches_total": {**INT, "description": "how many fan-out batches the run has"},
    "outputs": ROW,
    "parent": {"type": ["object", "null"], "properties": {"workflow_id": STR, "step": NSTR}},
    "children": arr(RUN_ROW),
    "older_children": {**NINT, "description": "pass as `children_before` for older child runs; null: none"},
    "children_total": {**INT, "description": "how many child runs the run started"},
}, ("run", "presentation", "available_actions", "resume_plan", "definition_outdated", "class_loaded", "steps",
    "older_steps", "events", "older_events", "signals", "older_signals", "signals_total", "batches",
    "older_batches", "batches_total", "outputs", "children", "older_children", "children_total"))


def attention_groups(call: Call, args: dict[str, Any]) -> Reply:
    data = shapes.attention(call.engine, english(), args.get("workflow_class") or None)
    count = len(data["groups"])
    lines = [f"{count} attention group{'' if count == 1 else 's'}." if count else "Nothing needs attention."]
    for g in data["groups"]:
        error = f" on {shown(g['error_class'], 80)}" if g["error_class"] else ""
        message = f": {shown(g['error_message'])}" if g["error_message"] else ""
        at_least = "at least " if g["capped"] else ""
        lines.append(f"{at_least}{runs_text(g['count'])} {g['reason']} at {shown(g['workflow_class'], 60)}."
                     f"{shown(g['step_name'], 60)}{error}{message} (bulk: {', '.join(g['bulk_actions'])})")
    return data, "\n".join(lines)


ATTENTION_OUT = obj({"groups": arr(GROUP),
                     "count_cap": {**INT, "description": "the most overdue runs of one group that are counted"}})


def attention_run_ids(call: Call, args: dict[str, Any]) -> Reply:
    key = group_key(args)
    ids = [str(i) for i in queries.attention_ids(call.engine, key["workflow_class"], key["step_name"],
                                                 key["reason"], key["error_class"])]
    more = " (the first 500, oldest first)" if len(ids) >= queries.IDS_LIMIT else ", oldest stuck first"
    return ({"group": group_named(args), "workflow_ids": ids, "limit": queries.IDS_LIMIT},
            f"{runs_text(len(ids))}{more}" + (": " + ", ".join(ids[:20]) if ids else "")
            + (" …" if len(ids) > 20 else ""))


ATTENTION_IDS_OUT = obj({"group": obj(GROUP_KEY), "workflow_ids": arr(STR), "limit": INT})


def class_insights(call: Call, args: dict[str, Any]) -> Reply:
    name = args["workflow_class"]
    klass = runner.load_class(call.engine, name)
    result = insights.insights(call.engine, name, args.get("window"), [s.name for s in klass.steps] if klass else None)
    data = shapes.insights(result)
    slowest = max((s for s in result.steps if s.p95_ms is not None), key=lambda s: s.p95_ms or 0, default=None)
    text = (f"{shown(name, 80)} over {result.window}: {result.started:,} started, {result.finished:,} finished, "
            f"{result.cancelled:,} cancelled, {result.failed:,} failed attempts.")
    if slowest is not None:
        text += f" Slowest step by p95: {shown(slowest.step, 80)} ({slowest.p95_ms} ms)."
    if result.errors:
        step, error, n = result.errors[0]
        text += f" Most failures: {shown(error, 80)} at {shown(step, 80)} ({n:,})."
    return data, text


INSIGHTS_OUT = obj({
    "workflow_class": STR, "window": {"enum": list(insights.WINDOWS)}, "since": STR, "until": STR,
    "bucket_seconds": INT, "started": INT, "finished": INT, "cancelled": INT, "failed": INT,
    "funnel": obj({"started": INT, "finished": INT, "cancelled": INT}),
    "steps": arr(obj({"step": STR, "now_by_status": ROW, "reached": INT, "completed_attempts": INT,
                      "failed_attempts": INT, "failure_rate": nullable("number"),
                      "p50_ms": nullable("number"), "p95_ms": nullable("number"),
                      "max_ms": nullable("number"), "queue_p50_ms": nullable("number"),
                      "queue_p95_ms": nullable("number"), "stopped_here": INT,
                      "errors": arr(obj({"error_class": STR, "count": INT}))})),
    "buckets": arr(obj({"start": STR, "started": INT, "finished": INT, "failed": INT})),
    "errors": arr(obj({"step": STR, "error_class": STR, "count": INT})),
})

FILTER_PARAMS: dict[str, JSON] = {
    "workflow_class": string("only runs of this workflow class (exact name)"),
    "status": {**STATUS, "description": "only runs in this status"},
    "step": string("only runs whose current step is this one"),
    "stuck_reason": {**REASON, "description": "only runs stuck for this reason (see the stuck reasons below)"},
    "error_class": string("with `stuck_reason`: only the attention group with this error class (\"\" for none)"),
    "subject": string("only runs of this subject: its type (\"Order\") or type and id (\"Order 1042\")"),
    "text": string("a run id or its start, a subject id, or a piece of \"type id\" (case-insensitive)"),
}

def list_schedules(call: Call, args: dict[str, Any]) -> Reply:
    found = [shapes.jsonable(shapes.schedule(s)) for s in schedules.list_schedules(call.engine)]
    lines = [f"{len(found)} schedule{'' if len(found) == 1 else 's'}." if found else "No class declares a schedule."]
    for s in found[:20]:
        state = "paused" if s["paused"] else f"next tick {s['next_tick']}"
        lines.append(f"- {shown(s['workflow_class'], 80)}: {shown(s['schedule'], 40)} ({s['timezone']}), {state}; "
                     f"last tick {s['last_tick']}")
    return {"schedules": found}, "\n".join(lines)


#: The kinds of limit as the summaries say them.
LIMIT_KIND_WORDS = {"run": "class limit", "step": "step limit", "rate": "rate"}


def list_limits(call: Call, args: dict[str, Any]) -> Reply:
    data = shapes.limits(call.engine, english())
    found = data["limits"]
    if not found:
        return data, "No limit or rate is declared."
    waiting = sum(item["waiting"] for item in found)
    counted = "1 limit or rate" if len(found) == 1 else f"{len(found)} limits and rates"
    lines = [f"{counted}; {runs_text(waiting)} waiting in line."]
    for item in found:
        name, kind = shown(item["name"], 80), LIMIT_KIND_WORDS.get(item["kind"], item["kind"])
        if item["kind"] == "rate":
            wake = f", next start at {item['wake_at'].isoformat()}" if item["waiting"] and item["wake_at"] else ""
            lines.append(f"- {name} ({kind}): {item['capacity_text']}; {item['in_use']:,} started in its current "
                         f"window, {item['waiting']:,} waiting{wake}.")
            continue
        busiest = "; ".join(f"{shown(k['key'], 60) or '(no key)'}: {k['in_use']:,} in use, {k['waiting']:,} waiting"
                            for k in item["busiest"])
        lines.append(f"- {name} ({kind}): {item['capacity_text']}; {item['keys']:,} key"
                     f"{'' if item['keys'] == 1 else 's'}, {item['in_use']:,} in use, {item['waiting']:,} waiting"
                     + (f"; busiest: {busiest}" if busiest else "") + ".")
    return data, "\n".join(lines)


LIMITS_OUT = obj({
    "limits": arr(obj({
        "name": STR, "kind": {"enum": list(queries.LIMIT_KINDS)}, "capacity": INT,
        "per_seconds": {**nullable("number"), "description": "a rate's window in seconds (null for a limit)"},
        "capacity_text": STR,
        "keys": {**NINT, "description": "how many keys the limit has seen (null for a rate)"},
        "in_use": {**INT, "description": "slots held now; for a rate, the starts of its current window"},
        "waiting": {**INT, "description": "runs in line for it"},
        "busiest": arr(obj({"key": STR, "in_use": INT, "waiting": INT})),
        "wake_at": {**NSTR, "description": "a rate's next wake-up"}, "updated_at": NSTR})),
    "busiest_keys": {**INT, "description": "the most busiest keys listed of a limit"},
})


def list_notifications(call: Call, args: dict[str, Any]) -> Reply:
    data = shapes.notifications(call.engine, english())
    targets, deliveries = data["targets"], data["deliveries"]
    if not targets and not deliveries:
        return data, "No webhook target is set (PGBUS_WEBHOOKS) and no message was sent in the last seven days."
    by_status: dict[str, int] = {}
    for delivery in deliveries:
        by_status[delivery["status"]] = by_status.get(delivery["status"], 0) + 1
    lines = [f"{len(targets)} webhook target{'' if len(targets) == 1 else 's'}; the newest {len(deliveries)} "
             "deliveries: " + (", ".join(f"{n} {status}" for status, n in sorted(by_status.items())) or "none") + "."]
    lines += [f"- {shown(t['name'], 64)} ({t['format']}) at {t['url']}: {', '.join(t['events'])}"
              + (f" of {', '.join(shown(c, 80) for c in t['classes'])}" if t["classes"] else "") + "."
              for t in targets]
    return data, "\n".join(lines)


NOTIFICATIONS_OUT = obj({
    "targets": arr(obj({"name": STR, "url": {**STR, "description": "scheme and host only"},
                        "format": {"enum": ["standard", "slack"]}, "events": arr(STR),
                        "classes": {**nullable("array"), "description": "null: every class"}, "signed": BOOL})),
    "deliveries": arr(ROW),
    "interval": STR, "interval_seconds": {"type": "number"},
})


READ_TOOLS: tuple[Tool, ...] = (
    Tool("overview", "The whole picture in one call: how many runs each workflow class has in each status, how "
         "many ongoing runs are stuck for each reason, and the totals (ongoing, paused, needing attention). Use it "
         "first, to decide where to look. " + STATUSES + " " + REASONS,
         {}, (), OVERVIEW_OUT, overview, title="Overview"),
    Tool("list_runs", "Find runs, newest first, with the dashboard's filters (all optional, combined with AND). "
         "Each run comes with its latest step and a sentence saying what happens next. Pages: when `next_before` "
         "is not null, call again with `before` set to it for older runs (the same keyset cursor as the "
         "dashboard and the JSON API). " + STATUSES + " " + REASONS,
         {**FILTER_PARAMS,
          "before": {**CURSOR, "description": "the cursor a previous call returned as next_before"},
          "limit": {"type": "integer", "minimum": 1, "maximum": queries.MAX_LIMIT, "default": RUNS_PAGE,
                    "description": f"runs per page (1 to {queries.MAX_LIMIT}, default {RUNS_PAGE})"}},
         (), LIST_RUNS_OUT, list_runs, title="List runs"),
    Tool("show_run", "Everything about one run: its row (class, status, current step, subject, arguments), the "
         "sentence saying what happens next, the verbs allowed now (available_actions), what resume would do "
         "(resume_plan: retry the failed step, continue with the next, keep waiting, finish), whether it started "
         "on an older definition of its class, its attempts with errors and backtraces (the newest 25; older "
         "with steps_before), its audit trail (who did what and why; the newest 25, older with events_before), "
         "its signals, fan-out batches and the child runs it started (the newest 25 of each with their totals; "
         "older with signals_before, batches_before, children_before), the run that started it (parent), and "
         "its step outputs. Use it before acting on a run.",
         {"workflow_id": string(RUN_ID),
          "steps_before": {**CURSOR, "description": "older_steps of a previous call: the attempts before it"},
          "events_before": {**CURSOR, "description": "older_events of a previous call: the events before it"},
          "signals_before": {**CURSOR, "description": "older_signals of a previous call: the signals before it"},
          "children_before": {**CURSOR, "description": "older_children of a previous call: the child runs "
                                                       "before it"},
          "batches_before": {**CURSOR, "description": "older_batches of a previous call: the batches before it"},
          "full_backtraces": {"type": "boolean", "default": False,
                              "description": f"whole backtraces (by default each shows its last "
                                             f"{BACKTRACE_TAIL:,} characters)"}},
         ("workflow_id",), SHOW_RUN_OUT, show_run, title="Show a run"),
    Tool("attention_groups", "The runs that need a person, grouped by (workflow class, step, stuck reason, error "
         "class), the biggest group first: each with its count, first and last seen, the newest error message, "
         "and the bulk verbs that apply to it. Use it to triage; attention_run_ids lists a group's runs. "
         + REASONS,
         {"workflow_class": string("only this workflow class's groups")}, (), ATTENTION_OUT, attention_groups,
         title="Attention groups"),
    Tool("attention_run_ids", "The run ids of one attention group (as attention_groups returned it), oldest stuck "
         "first, at most 500: the runs a bulk verb on that group would walk.",
         GROUP_KEY, ("workflow_class", "step_name", "stuck_reason"), ATTENTION_IDS_OUT, attention_run_ids,
         title="Runs of an attention group"),
    Tool("class_insights", "How one workflow class performs over a window (1h, 24h, 7d or 30d; default 24h): runs "
         "started, finished and cancelled, failed attempts, the funnel of how far runs get, per-step run time and "
         "queue wait percentiles (ms) and failure rate (failed attempts / attempts that ended), failures by error "
         "class, and throughput per bucket. A run counts the moment its transaction commits.",
         {"workflow_class": string("the workflow class (exact name)"),
          "window": {"enum": list(insights.WINDOWS), "default": insights.DEFAULT_WINDOW}},
         ("workflow_class",), INSIGHTS_OUT, class_insights, title="Insights of a class"),
    Tool("list_schedules", "The workflow classes started on a schedule (cron with a timezone, or an interval), "
         "each with its last tick and the run it started, its next tick, its missed-tick policy, and whether it "
         "is paused (by whom, why) or no longer declared. The sweep starts one run per due tick.",
         {}, (), obj({"schedules": arr(ROW)}), list_schedules, title="Schedules"),
    Tool("list_limits", "Flow control: every concurrency limit (of a class's runs, or of a step's attempts, per "
         "key) and every rate (starts of a step per window), as the workers last declared them: its capacity "
         "(\"2 at once\", \"10 a second\"), how many keys it has seen, the slots in use now (a rate: the starts "
         "of its current window), how many runs wait in line for it, and its busiest keys (the five with the "
         "most in use and waiting). A run in line is `waiting`; show_run's sentence says which limit it waits for.",
         {}, (), LIMITS_OUT, list_limits, title="Limits"),
    Tool("list_notifications", "Who is told when runs need a person: the webhook targets of PGBUS_WEBHOOKS (name, "
         "the URL's scheme and host only, format standard or slack, the events each wants, its classes) and the "
         "newest webhook deliveries with their status (pending: retrying, with the next try's time; sending; "
         "delivered; failed: given up after a day), tries, the receiver's answer and the message's sentence. "
         "At most one message per attention group and target per interval (interval_seconds).",
         {}, (), NOTIFICATIONS_OUT, list_notifications, title="Notifications"),
)
