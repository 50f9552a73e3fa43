"""JSON endpoints under the dashboard prefix (``/api/...``): the same reads as the pages, and a
run's verbs (``POST /api/runs/<id>/actions/<action>``; the schedules' reads and their
pause/resume are in :mod:`pgbus_flask.web.schedule_pages`).

``GET /api`` answers an index of the endpoints, built from the blueprint's routes (so an endpoint
added anywhere shows up in it), each with its method and a line from :data:`DESCRIPTIONS`.

They pass the same ``PGBUS_DASHBOARD_AUTH`` check; every error under ``/api``
(a bad parameter, an unknown run, a path that names nothing, a wrong method)
comes back as ``{"error": ..., "status": ...}`` with the page's status code. A POST
carries the same CSRF token as the dashboard's forms: the ``csrf_token`` field of a run's
JSON (with the cookie that response sets), sent form-encoded with ``reason`` (and ``step``
for resume_at and rerun, ``at`` for reschedule).
"""

from __future__ import annotations

import re
from typing import Any

from flask import Blueprint, Response, current_app, g, request

from .. import queries
from ..engine import Engine
from ..errors import ActionNotAllowed, PgbusError, SubjectConflict
from ..handle import Run
from ..present import shapes
from ..verbs import BY_NAME, RUN_VERBS
from . import inputs, security
from .i18n import N_, gettext, words
from .views import NOT_INPUT_ERRORS, PAGE_SIZE, Pages, escape_surrogates, read_cursors, read_filters

PREFIX = "/api"
#: The verbs the JSON API takes: every verb of the table but signal (which has the dashboard's form; the bulk
#: verbs have the CLI and MCP).
API_ACTIONS = tuple(verb.name for verb in RUN_VERBS)

#: What each endpoint of the JSON API answers, by endpoint name, in one line (the index says it in the
#: caller's language). An endpoint missing here is still listed, with its view's docstring;
#: tests/web/test_api_index.py fails until it has its line.
DESCRIPTIONS: dict[str, str] = {
    "api_index": N_("This index: every endpoint of the JSON API, its method and what it answers."),
    "api_overview": N_("Runs by class and status, the runs that need attention by class and stuck reason, "
                       "and the overview's totals."),
    "api_runs": N_("A page of runs, newest first, with the runs list's filters (workflow_class, status, step, "
                   "reason, error_class, subject, text) and the cursor before."),
    "api_run": N_("One run: its row, presentation, available actions, resume plan, outputs and the newest "
                  "page of each of its lists."),
    "api_act": N_("A verb on a run (form-encoded, with reason and the csrf_token of the run's JSON): the run "
                  "after it, or why it was refused."),
    "api_signal": N_("One signal of a run, with its whole payload."),
    "api_output": N_("One step's output, whole."),
    "api_attention": N_("The runs that need attention, grouped by class, step, stuck reason and error class, "
                        "with their bulk actions."),
    "api_limits": N_("Every concurrency limit and rate, with its slots in use, runs waiting and busiest keys."),
    "api_batch": N_("A fan-out batch and a page of its child jobs."),
    "api_batch_child": N_("One child job of a batch, with its whole arguments and result."),
    "api_insights": N_("A workflow class's insights over a window (1h, 24h, 7d, 30d): throughput, each step's "
                       "pipeline, funnel, durations and failure rate, and the failures."),
    "api_schedules": N_("Every schedule, and the csrf_token their pause and resume take."),
    "api_schedule": N_("One schedule with its audit trail."),
    "api_schedule_act": N_("Pause or resume a schedule (form-encoded, with reason and csrf_token)."),
    "api_notifications": N_("The webhook targets (their URL's scheme and host, never a secret) and the newest "
                            "deliveries with their status."),
}
#: The routes under /api that are no endpoint of their own (a path that names nothing).
NOT_ENDPOINTS = ("api_missing",)
#: A rule's variable as the index shows it: ``<workflow_id>`` (without a converter).
_VARIABLE = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


def reply(data: Any, status: int = 200) -> Response:
    # Stored JSON may hold lone surrogates (see pgbus_flask.payload): sent as their escapes.
    text = escape_surrogates(shapes.dumps(data))
    return Response(text, status, content_type="application/json; charset=utf-8")


class Api:
    """The JSON reads of one dashboard."""

    def __init__(self, engine: Engine, pages: Pages) -> None:
        self.engine = engine
        self.pages = pages

    def overview(self) -> Response:
        return reply(shapes.overview(self.engine))

    def runs(self) -> Response:
        filters = read_filters()
        before = inputs.whole_number(request.args.get("before"), "before")
        return reply(shapes.runs(self.engine, words(), filters, before, PAGE_SIZE))

    def run(self, workflow_id: str) -> Response:
        cursors = read_cursors()
        return reply({**shapes.run(self.engine, words(), workflow_id, **cursors), "csrf_token": security.csrf_token()})

    def signal(self, workflow_id: str, signal_id: str) -> Response:
        """One signal of a run with its whole payload (what a page shows cut links here)."""
        number = inputs.whole_number(signal_id, "signal_id")
        found = Run(self.engine, workflow_id).signal_row(number) if number is not None else None
        if found is None:
            return reply({"error": gettext("The run has no signal with the id %(value)s.", value=signal_id),
                          "status": 404}, 404)
        return reply({"signal": shapes.row(found)})

    def output(self, workflow_id: str, step_name: str) -> Response:
        """One step's output, whole (what the run page shows cut links here)."""
        outputs = Run(self.engine, workflow_id).outputs()
        if step_name not in outputs:
            return reply({"error": gettext("The run has no output of step %(step)s.", step=step_name),
                          "status": 404}, 404)
        return reply({"step_name": step_name, "output": outputs[step_name]})

    def act(self, workflow_id: str, action: str) -> Response:
        """A verb on a run, as the dashboard's buttons do it (actor ``dashboard:NAME``): the run's
        status and available actions after it, or the refusal with the actions allowed now."""
        if action not in API_ACTIONS:
            return self.missing()
        run = Run(self.engine, workflow_id)
        params, missing = inputs.verb_params(BY_NAME[action], request.form)
        if missing is not None:
            return reply({"error": gettext(missing), "status": 400}, 400)
        try:
            run.act(action, actor=g.pgbus_actor, reason=inputs.text(request.form, "reason"), **params)
        except (ActionNotAllowed, SubjectConflict) as exc:
            run.refresh()
            return reply({"error": str(exc), "status": 409, "available_actions": run.available_actions}, 409)
        except NOT_INPUT_ERRORS:
            raise
        except PgbusError as exc:
            return reply({"error": str(exc), "status": 400}, 400)
        return reply(shapes.after_verb(run))

    def attention(self) -> Response:
        return reply(shapes.attention(self.engine, words(), inputs.text(request.args, "workflow_class")))

    def limits(self) -> Response:
        """Every limit and rate with its use now (the Limits page's figures)."""
        return reply(shapes.limits(self.engine, words()))

    def batch(self, batch_id: str) -> Response:
        number = inputs.whole_number(batch_id, "batch_id")
        after = inputs.whole_number(request.args.get("after"), "after", minimum=0, maximum=inputs.INT_MAX)
        found = shapes.batch(self.engine, number, after) if number is not None else None
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
        return reply({"child": shapes.row(found)})

    def index(self) -> Response:
        """This index: every endpoint of the JSON API, its method and what it answers."""
        return reply({"endpoints": endpoints()})

    def missing(self, rest: str = "") -> Response:
        """Any other path under the API: a JSON 404 like the others, not the host app's HTML page."""
        return reply({"error": gettext("The JSON API has no address %(path)s.", path=request.path),
                      "status": 404}, 404)


def endpoints() -> list[dict[str, str]]:
    """The JSON API's endpoints as this request's blueprint registered them (the rules under its index's
    path), sorted by path: each one's ``path`` (the app's script root and the blueprint's prefix
    included), ``method`` and ``description``."""
    blueprint = f"{request.blueprint}."
    base = next(rule.rule for rule in current_app.url_map.iter_rules(f"{blueprint}api_index")).rstrip("/")
    found: dict[tuple[str, str], str] = {}
    for rule in current_app.url_map.iter_rules():
        name = rule.endpoint.removeprefix(blueprint)
        if (not rule.endpoint.startswith(blueprint) or name in NOT_ENDPOINTS
                or not (rule.rule == base or rule.rule.startswith(f"{base}/"))):
            continue
        path = request.script_root + _VARIABLE.sub(r"<\1>", rule.rule).rstrip("/")
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            found[(path, method)] = describe(name)
    return [{"path": path, "method": method, "description": text} for (path, method), text in sorted(found.items())]


def describe(endpoint: str) -> str:
    """The line that says what ``endpoint`` (a name in this blueprint) answers, in the caller's language;
    for one :data:`DESCRIPTIONS` lacks, the first line of its view's docstring."""
    if endpoint in DESCRIPTIONS:
        return gettext(DESCRIPTIONS[endpoint])
    view = current_app.view_functions.get(f"{request.blueprint}.{endpoint}")
    doc = (getattr(view, "__doc__", None) or "").strip()
    return doc.splitlines()[0] if doc else ""


def register(bp: Blueprint, engine: Engine, pages: Pages) -> None:
    """Add the JSON reads to ``bp`` under ``/api``."""
    api = Api(engine, pages)
    bp.add_url_rule(f"{PREFIX}/overview", "api_overview", api.overview)
    bp.add_url_rule(f"{PREFIX}/runs", "api_runs", api.runs)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>", "api_run", api.run)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>/actions/<action>", "api_act", api.act, methods=["POST"])
    bp.add_url_rule(f"{PREFIX}/attention", "api_attention", api.attention)
    bp.add_url_rule(f"{PREFIX}/limits", "api_limits", api.limits)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>/signals/<signal_id>", "api_signal", api.signal)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>/outputs/<step_name>", "api_output", api.output)
    bp.add_url_rule(f"{PREFIX}/batches/<batch_id>", "api_batch", api.batch)
    bp.add_url_rule(f"{PREFIX}/batches/<batch_id>/children/<position>", "api_batch_child", api.batch_child)
    for rule in (PREFIX, f"{PREFIX}/"):
        bp.add_url_rule(rule, "api_index", api.index)
    # Routing prefers every rule above to this one (a path converter matches last).
    bp.add_url_rule(f"{PREFIX}/<path:rest>", "api_missing", api.missing)
