"""JSON endpoints under the dashboard prefix (``/api/...``): the same reads as the pages, and a
run's verbs (``POST /api/runs/<id>/actions/<action>``; the schedules' reads and their
pause/resume are in :mod:`pgbus_flask.web.schedule_pages`).

They pass the same ``PGBUS_DASHBOARD_AUTH`` check; every error under ``/api``
(a bad parameter, an unknown run, a path that names nothing, a wrong method)
comes back as ``{"error": ..., "status": ...}`` with the page's status code. A POST
carries the same CSRF token as the dashboard's forms: the ``csrf_token`` field of a run's
JSON (with the cookie that response sets), sent form-encoded with ``reason`` (and ``step``
for resume_at and rerun, ``at`` for reschedule).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from flask import Blueprint, Response, g, request

from .. import payload, queries, states
from ..engine import Engine
from ..errors import ActionNotAllowed, PgbusError, SubjectConflict
from ..handle import Run
from . import helpers, inputs, security
from .i18n import gettext
from .presenter import Presentation
from .views import NOT_INPUT_ERRORS, PAGE_SIZE, Pages, escape_surrogates, read_cursors, read_filters

PREFIX = "/api"
#: The verbs the JSON API takes (signal has the dashboard's form; bulk verbs the CLI and MCP).
API_ACTIONS = ("pause", "resume", "resume_at", "run_now", "reschedule", "skip", "rerun", "cancel", "upgrade")
JSON_COLUMNS = ("arguments", "output", "payload", "details", "args", "result")


def _default(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (UUID, Decimal)):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def reply(data: Any, status: int = 200) -> Response:
    # Stored JSON may hold lone surrogates (see pgbus_flask.payload): sent as their escapes.
    text = escape_surrogates(json.dumps(data, default=_default, ensure_ascii=False))
    return Response(text, status, content_type="application/json; charset=utf-8")


def _row(row: Mapping[str, Any]) -> dict[str, Any]:
    return {key: payload.from_json(value) if key in JSON_COLUMNS else value for key, value in row.items()
            if key not in ("latest_step", "db_now")}


def _presentation(p: Presentation, now: datetime) -> dict[str, Any]:
    return {"badge": p.badge, "tone": p.tone, "key": p.next_key, "args": p.next_args,
            "sentence": helpers.next_sentence(p, now).striptags(), "attention": p.attention}


def overview_data(engine: Engine) -> dict[str, Any]:
    """Runs by class and status, stuck runs by class and reason, and the overview's three totals."""
    counts = queries.status_counts(engine)
    stuck = queries.stuck_reason_counts(engine)
    return {
        "counts": [{"workflow_class": c, "status": s, "runs": n} for (c, s), n in sorted(counts.items())],
        "stuck": [{"workflow_class": c, "reason": r, "runs": n} for (c, r), n in sorted(stuck.items())],
        "ongoing": sum(n for (_, s), n in counts.items() if s in states.ONGOING),
        "paused": sum(n for (_, s), n in counts.items() if s == "paused"),
        "attention": sum(stuck.values()),
    }


def runs_data(engine: Engine, pages: Pages, filters: Mapping[str, str | None], before: int | None,
              limit: int = PAGE_SIZE) -> dict[str, Any]:
    """A page of the runs list (``filters`` as :data:`~pgbus_flask.web.views.FILTERS`, keyset cursor
    ``before``), each run with its latest step and presentation, and the next page's cursor.
    Needs an app context (the clock it reads the runs by is kept in ``g``)."""
    pages.sync_clock()
    rows, cursor = queries.list_runs(engine, queries.RunFilter(before=before, limit=limit, **filters))
    runs = []
    for row in rows:
        item = {k: v for k, v in _row(row).items() if not k.startswith(("step_", "batch_"))}
        item["latest_step"] = {k[5:]: v for k, v in row.items() if k.startswith("step_")}
        item["presentation"] = _presentation(pages.present(row), g.pgbus_now)
        runs.append(item)
    return {"runs": runs, "next_before": cursor}


def run_data(engine: Engine, pages: Pages, workflow_id: Any, steps_before: int | None = None,
             events_before: int | None = None, *, signals_before: int | None = None,
             children_before: int | None = None, batches_before: int | None = None) -> dict[str, Any]:
    """One run: its row, presentation, verbs allowed now, resume plan, its parent, outputs, and a page
    of each of its lists (attempts, audit events, signals, child runs, batches: the newest 25 below each
    one's cursor, oldest first, with the cursor of the page before; and how many signals, child runs and
    batches it has). Needs an app context."""
    run = Run(engine, workflow_id)
    pages.sync_clock(run.row["db_now"])
    row = dict(run.row)
    row["latest_step"] = run.latest_step
    latest = run.latest_step or {}
    batch = run.batch(latest.get("batch_id"))
    if batch is not None:
        row.update(batch_done=batch["done"], batch_failed=batch["failed"], batch_total=batch["total"])
    plan = run.resume_plan()
    steps, events = run.steps_page(steps_before), run.events_page(events_before)
    signals, children = run.signals_page(signals_before), run.children_page(children_before)
    batches = run.batches_page(batches_before)
    return {
        "run": _row(run.row),
        "presentation": _presentation(pages.present(row), g.pgbus_now),
        "available_actions": run.available_actions,
        "resume_plan": asdict(plan) if plan else None,
        "definition_outdated": run.definition_outdated,
        "class_loaded": run.class_loaded,
        "steps": [_row(s) for s in steps.rows],
        "older_steps": steps.older,
        "events": [{**_row(e), "sentence": helpers.audit_sentence(e)} for e in events.rows],
        "older_events": events.older,
        "signals": [_row(s) for s in signals.rows],
        "older_signals": signals.older,
        "signals_total": signals.total,
        "batches": [_row(b) for b in batches.rows],
        "older_batches": batches.older,
        "batches_total": batches.total,
        "parent": {"workflow_id": str(run.parent_id), "step": run.parent_step} if run.parent_id else None,
        "children": [_row(c) for c in children.rows],
        "older_children": children.older,
        "children_total": children.total,
        "outputs": run.outputs(),
    }


def batch_data(engine: Engine, batch_id: int, after: int | None = None) -> dict[str, Any] | None:
    """A batch and 25 of its children in position order from the one after ``after`` on, with
    ``next_after``: the ``after`` value of the next page (null after the last); None for no batch."""
    found = queries.batch_page(engine, batch_id, after)
    if found is None:
        return None
    batch, children = found
    return {"batch": _row(batch), "children": [_row(c) for c in children.rows], "next_after": children.next_after}


def attention_data(engine: Engine, workflow_class: str | None) -> dict[str, Any]:
    """The attention groups, biggest first, each with its bulk verbs and their confirm sentences."""
    groups = queries.attention_groups(engine, workflow_class)
    return {"groups": [
        {**asdict(group), "bulk_actions": list(helpers.BULK_BY_REASON[group.reason]),
         "confirm": {a: helpers.bulk_confirm(a, group) for a in helpers.BULK_BY_REASON[group.reason]}}
        for group in groups]}


def jsonable(data: Any) -> Any:
    """``data`` as plain JSON values, as :func:`reply` writes them (times and ids as strings)."""
    return json.loads(json.dumps(data, default=_default, ensure_ascii=False))


class Api:
    """The JSON reads of one dashboard."""

    def __init__(self, engine: Engine, pages: Pages) -> None:
        self.engine = engine
        self.pages = pages

    def overview(self) -> Response:
        return reply(overview_data(self.engine))

    def runs(self) -> Response:
        filters = read_filters()
        before = inputs.whole_number(request.args.get("before"), "before")
        return reply(runs_data(self.engine, self.pages, filters, before))

    def run(self, workflow_id: str) -> Response:
        cursors = read_cursors()
        return reply({**run_data(self.engine, self.pages, workflow_id, **cursors), "csrf_token": security.csrf_token()})

    def signal(self, workflow_id: str, signal_id: str) -> Response:
        """One signal of a run with its whole payload (what a page shows cut links here)."""
        number = inputs.whole_number(signal_id, "signal_id")
        found = Run(self.engine, workflow_id).signal_row(number) if number is not None else None
        if found is None:
            return reply({"error": gettext("The run has no signal with the id %(value)s.", value=signal_id),
                          "status": 404}, 404)
        return reply({"signal": _row(found)})

    def act(self, workflow_id: str, action: str) -> Response:
        """A verb on a run, as the dashboard's buttons do it (actor ``dashboard:NAME``): the run's
        status and available actions after it, or the refusal with the actions allowed now."""
        if action not in API_ACTIONS:
            return self.missing()
        run = Run(self.engine, workflow_id)
        params: dict[str, Any] = {}
        step = inputs.text(request.form, "step")
        if action == "resume_at" or (action == "rerun" and step):
            if not step:
                return reply({"error": gettext("Choose the step to resume at."), "status": 400}, 400)
            params["step"] = step
        if action == "reschedule":
            text = inputs.text(request.form, "at") or ""
            try:
                params["at"] = datetime.fromisoformat(text)
            except ValueError:
                params["at"] = text  # refused by reschedule, which names what it takes
        try:
            run.act(action, actor=g.pgbus_actor, reason=inputs.text(request.form, "reason"), **params)
        except (ActionNotAllowed, SubjectConflict) as exc:
            run.refresh()
            return reply({"error": str(exc), "status": 409, "available_actions": run.available_actions}, 409)
        except NOT_INPUT_ERRORS:
            raise
        except PgbusError as exc:
            return reply({"error": str(exc), "status": 400}, 400)
        return reply({"run": _row(run.row), "available_actions": run.available_actions,
                      "definition_outdated": run.definition_outdated})

    def attention(self) -> Response:
        return reply(attention_data(self.engine, inputs.text(request.args, "workflow_class")))

    def batch(self, batch_id: str) -> Response:
        number = inputs.whole_number(batch_id, "batch_id")
        after = inputs.whole_number(request.args.get("after"), "after", minimum=0, maximum=inputs.INT_MAX)
        found = batch_data(self.engine, number, after) if number is not None else None
        if found is None:
            return reply({"error": gettext("No batch has the id %(value)s.", value=batch_id), "status": 404}, 404)
        return reply(found)

    def batch_child(self, batch_id: str, position: str) -> Response:
        """One child of a batch with its whole arguments and result (what a page shows cut links here)."""
        number = inputs.whole_number(batch_id, "batch_id")
        place = inputs.whole_number(position, "position", minimum=0, maximum=inputs.INT_MAX)
        found = queries.batch_child(self.engine, number, place) if number is not None and place is not None else None
        if found is None:
            return reply({"error": gettext("The batch %(batch)s has no child job at position %(position)s.",
                                           batch=batch_id, position=position), "status": 404}, 404)
        return reply({"child": _row(found)})

    def missing(self, rest: str = "") -> Response:
        """Any other path under the API: a JSON 404 like the others, not the host app's HTML page."""
        return reply({"error": gettext("The JSON API has no address %(path)s.", path=request.path),
                      "status": 404}, 404)


def register(bp: Blueprint, engine: Engine, pages: Pages) -> None:
    """Add the JSON reads to ``bp`` under ``/api``."""
    api = Api(engine, pages)
    bp.add_url_rule(f"{PREFIX}/overview", "api_overview", api.overview)
    bp.add_url_rule(f"{PREFIX}/runs", "api_runs", api.runs)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>", "api_run", api.run)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>/actions/<action>", "api_act", api.act, methods=["POST"])
    bp.add_url_rule(f"{PREFIX}/attention", "api_attention", api.attention)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>/signals/<signal_id>", "api_signal", api.signal)
    bp.add_url_rule(f"{PREFIX}/batches/<batch_id>", "api_batch", api.batch)
    bp.add_url_rule(f"{PREFIX}/batches/<batch_id>/children/<position>", "api_batch_child", api.batch_child)
    # Routing prefers every rule above to these (a path converter matches last).
    for rule in (PREFIX, f"{PREFIX}/", f"{PREFIX}/<path:rest>"):
        bp.add_url_rule(rule, "api_missing", api.missing)
