"""The JSON shapes of what the doors read: the overview, a page of runs, one run, a batch, the
attention groups, the limits and rates, a schedule and a class's insights. The JSON API and the MCP
server answer with them.

Each function reads through :mod:`pgbus_flask.queries` and the run handle and returns plain data
(times and ids are written as text by :func:`jsonable`); the sentences in them are said in the
:class:`~pgbus_flask.present.words.Words` given, at ``now`` (PostgreSQL's clock, which every stored
time comes from, when not given).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any
from uuid import UUID

from .. import payload, queries, runner, states, verbs
from ..errors import StepNotDefined
from ..handle import Run
from . import sentences
from .state import Presentation, present
from .words import Words

if TYPE_CHECKING:
    from ..engine import Engine
    from ..insights import Insights
    from ..schedules import Schedule

#: The columns that hold stored JSON (read back into values).
JSON_COLUMNS = ("arguments", "output", "payload", "details", "args", "result")
#: Runs a page of the runs list holds.
RUNS_PAGE = 50


def _default(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (UUID, Decimal)):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(data: Any) -> str:
    """``data`` as JSON text (times as ISO 8601, ids and decimals as strings, non-ASCII kept)."""
    return json.dumps(data, default=_default, ensure_ascii=False)


def jsonable(data: Any) -> Any:
    """``data`` as plain JSON values, as :func:`dumps` writes them (times and ids as strings)."""
    return json.loads(dumps(data))


def row(values: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row: its JSON columns as values, without the columns a read adds for itself."""
    return {key: payload.from_json(value) if key in JSON_COLUMNS else value for key, value in values.items()
            if key not in ("latest_step", "db_now", "limit_line")}


def wait_for(engine: Engine, workflow_class: str, step_name: str | None) -> str | None:
    """The signal ``step_name`` of ``workflow_class`` waits for, when the class is known here."""
    klass = runner.load_class(engine, workflow_class)
    if klass is None or not step_name:
        return None
    try:
        return klass.step_spec(step_name).wait_for
    except StepNotDefined:
        return None


def presentation_of(engine: Engine, values: Mapping[str, Any], now: datetime) -> Presentation:
    """What a run (its row with its latest step) is doing at ``now``, by the engine's thresholds."""
    step = values.get("step_step_name")
    if step is None and isinstance(values.get("latest_step"), Mapping):
        step = values["latest_step"].get("step_name")
    settings = engine.settings
    return present(values, now=now, stall_threshold=settings.stall_threshold,
                   wait_for=wait_for(engine, values["workflow_class"], step or values.get("current_step")),
                   waiting_threshold=settings.waiting_threshold)


def blocked_line(step: Mapping[str, Any] | None) -> queries.Line | None:
    """The line a step waits in (its limit or rate, and the limit's key; None for a rate), or None
    when it is not in line."""
    if not step or step.get("blocked_on") is None or step.get("status") != "scheduled":
        return None
    key = step.get("blocked_key")
    return str(step["blocked_on"]), None if key is None else str(key)


def with_limit_lines(engine: Engine, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` of :func:`pgbus_flask.queries.list_runs`, each run in line for a limit or a rate given
    what its sentence says of that line (``limit_line``), read for the whole page in one statement."""
    lines = {id(r): blocked_line({k[5:]: v for k, v in r.items() if k.startswith("step_")}) for r in rows}
    found = queries.limit_lines(engine, [line for line in lines.values() if line is not None])
    for r in rows:
        line = lines[id(r)]
        if line is not None:
            r["limit_line"] = found.get(line)
    return rows


def presentation(words: Words, p: Presentation, now: datetime) -> dict[str, Any]:
    """A run's presentation: its badge, tone, sentence key and arguments, the sentence, its stuck reason."""
    return {"badge": p.badge, "tone": p.tone, "key": p.next_key, "args": p.next_args,
            "sentence": sentences.next_sentence(words, p, now).striptags(), "attention": p.attention}


def overview(engine: Engine) -> dict[str, Any]:
    """Runs by class and status, stuck runs by class and reason, and the overview's three totals."""
    counts = queries.status_counts(engine)
    stuck = queries.stuck_reason_counts(engine)
    return {
        "counts": [{"workflow_class": c, "status": s, "runs": n} for (c, s), n in sorted(counts.items())],
        # capped: runs is a lower bound (the overdue runs of a group are counted up to queries.COUNT_CAP)
        "stuck": [{"workflow_class": c, "reason": r, "runs": n, "capped": (c, r) in stuck.capped}
                  for (c, r), n in sorted(stuck.items())],
        "ongoing": sum(n for (_, s), n in counts.items() if s in states.ONGOING),
        "paused": sum(n for (_, s), n in counts.items() if s == "paused"),
        "attention": sum(stuck.values()),
        "attention_capped": stuck.any_capped,
        "count_cap": queries.COUNT_CAP,
    }


def runs(engine: Engine, words: Words, filters: Mapping[str, str | None], before: int | None,
         limit: int = RUNS_PAGE, now: datetime | None = None) -> dict[str, Any]:
    """A page of the runs list (``filters`` as the dashboard's, keyset cursor ``before``), each run with its
    latest step and presentation, and the next page's cursor."""
    now = now or queries.db_now(engine)
    rows, cursor = queries.list_runs(engine, queries.RunFilter(before=before, limit=limit, **filters))
    with_limit_lines(engine, rows)
    found = []
    for values in rows:
        item = {k: v for k, v in row(values).items() if not k.startswith(("step_", "batch_"))}
        item["latest_step"] = {k[5:]: v for k, v in values.items() if k.startswith("step_")}
        item["presentation"] = presentation(words, presentation_of(engine, values, now), now)
        found.append(item)
    return {"runs": found, "next_before": cursor}


def run_values(handle: Run) -> dict[str, Any]:
    """A run's row with its latest step and, while that step waits on a fan-out batch, the batch's
    progress (``batch_done``, ``batch_failed``, ``batch_total``), or while it waits in line for a limit or
    a rate, what :func:`pgbus_flask.queries.limit_lines` reads of that line (``limit_line``): what a
    run's presentation reads."""
    values = dict(handle.row)
    values["latest_step"] = handle.latest_step
    latest = handle.latest_step or {}
    batch = handle.batch(latest.get("batch_id"))
    if batch is not None:
        values.update(batch_done=batch["done"], batch_failed=batch["failed"], batch_total=batch["total"])
    line = blocked_line(latest)
    if line is not None:
        values["limit_line"] = queries.limit_lines(handle.engine, [line]).get(line)
    return values


def run(engine: Engine, words: Words, workflow_id: Any, steps_before: int | None = None,
        events_before: int | None = None, *, signals_before: int | None = None,
        children_before: int | None = None, batches_before: int | None = None) -> dict[str, Any]:
    """One run: its row, presentation, verbs allowed now, resume plan, its parent, outputs, and a page
    of each of its lists (attempts, audit events, signals, child runs, batches: the newest 25 below each
    one's cursor, oldest first, with the cursor of the page before; and how many signals, child runs and
    batches it has)."""
    handle = Run(engine, workflow_id)
    now = handle.row["db_now"]
    values = run_values(handle)
    plan = handle.resume_plan()
    steps, events = handle.steps_page(steps_before), handle.events_page(events_before)
    signals, children = handle.signals_page(signals_before), handle.children_page(children_before)
    batches = handle.batches_page(batches_before)
    return {
        "run": row(handle.row),
        "presentation": presentation(words, presentation_of(engine, values, now), now),
        "available_actions": handle.available_actions,
        "resume_plan": asdict(plan) if plan else None,
        "definition_outdated": handle.definition_outdated,
        "class_loaded": handle.class_loaded,
        "steps": [row(s) for s in steps.rows],
        "older_steps": steps.older,
        "events": [{**row(e), "sentence": sentences.audit_sentence(words, e)} for e in events.rows],
        "older_events": events.older,
        "signals": [row(s) for s in signals.rows],
        "older_signals": signals.older,
        "signals_total": signals.total,
        "batches": [row(b) for b in batches.rows],
        "older_batches": batches.older,
        "batches_total": batches.total,
        "parent": {"workflow_id": str(handle.parent_id), "step": handle.parent_step} if handle.parent_id else None,
        "children": [row(c) for c in children.rows],
        "older_children": children.older,
        "children_total": children.total,
        "outputs": handle.outputs(),
    }


def after_verb(handle: Run) -> dict[str, Any]:
    """A run after a verb acted on it: its row, the verbs allowed now, whether it runs an older definition."""
    return {"run": row(handle.row), "available_actions": handle.available_actions,
            "definition_outdated": handle.definition_outdated}


def batch(engine: Engine, batch_id: int, after: int | None = None) -> dict[str, Any] | None:
    """A batch and 25 of its children in position order from the one after ``after`` on, with
    ``next_after``: the ``after`` value of the next page (null after the last); None for no batch."""
    found = queries.batch_page(engine, batch_id, after)
    if found is None:
        return None
    values, children = found
    return {"batch": row(values), "children": [row(c) for c in children.rows], "next_after": children.next_after}


def attention(engine: Engine, words: Words, workflow_class: str | None) -> dict[str, Any]:
    """The attention groups, biggest first, each with its bulk verbs and their confirm sentences."""
    groups = queries.attention_groups(engine, workflow_class)
    return {"groups": [
        {**asdict(group), "bulk_actions": list(verbs.bulk_for(group.reason)),
         "confirm": {a: sentences.bulk_confirm(words, a, group) for a in verbs.bulk_for(group.reason)}}
        for group in groups], "count_cap": queries.COUNT_CAP}


def limits(engine: Engine, words: Words) -> dict[str, Any]:
    """Every limit and rate with its use now (:func:`pgbus_flask.queries.limits`): its capacity in
    words (``capacity_text``: "2 at once", "10 a second"), its keys, slots in use (a rate: the starts of
    its current window), steps waiting in line, and its busiest keys (at most ``busiest_keys``)."""
    return {"limits": [{**asdict(use), "busiest": [asdict(k) for k in use.busiest],
                        "capacity_text": sentences.capacity_text(words, use.kind, use.capacity, use.per_seconds)}
                       for use in queries.limits(engine)],
            "busiest_keys": queries.BUSIEST_KEYS}


def schedule(s: Schedule) -> dict[str, Any]:
    """A schedule as the JSON API and the MCP server show it (times as ISO strings by :func:`jsonable`)."""
    return s.to_json()


def insights(result: Insights) -> dict[str, Any]:
    """A class's insights over a window, as the JSON API and the MCP server show them."""
    return result.as_json()


def notifications(engine: Engine, words: Words, limit: int = 50) -> dict[str, Any]:
    """The webhook targets of ``PGBUS_WEBHOOKS`` (their URL's scheme and host only, never a secret) and the
    newest deliveries (docs/notifications.md): what the Notifications page, the JSON API and MCP show."""
    from .. import notify
    from ..notify.messages import say

    targets = [{"name": t.name, "url": t.shown_url, "format": t.format, "events": list(t.events),
                "classes": list(t.classes) if t.classes is not None else None, "signed": bool(t.secret)}
               for t in engine.settings.webhooks]
    deliveries = []
    for row in notify.recent_deliveries(engine, limit):
        sentence = say(words, row["event_type"], row["data"])  # in the reader's language, not the one sent
        deliveries.append({key: row[key] for key in ("id", "target", "event_type", "status", "attempts",
                                                     "next_attempt_at", "response_status", "last_error",
                                                     "requested_by", "created_at", "delivered_at", "webhook_id")}
                          | {"response_body": (row["response_body"] or "")[:200] or None, "sentence": sentence})
    return {"targets": targets, "deliveries": deliveries,
            "interval": words.duration(engine.settings.notify_interval.total_seconds()),
            "interval_seconds": engine.settings.notify_interval.total_seconds()}
