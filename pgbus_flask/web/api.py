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

from typing import Any

from flask import Blueprint, Response, g, request

from .. import queries
from ..engine import Engine
from ..errors import ActionNotAllowed, PgbusError, SubjectConflict
from ..handle import Run
from ..present import shapes
from ..verbs import BY_NAME, RUN_VERBS
from . import inputs, security
from .i18n import gettext, words
from .views import NOT_INPUT_ERRORS, PAGE_SIZE, Pages, escape_surrogates, read_cursors, read_filters

PREFIX = "/api"
#: The verbs the JSON API takes: every verb of the table but signal (which has the dashboard's form; the bulk
#: verbs have the CLI and MCP).
API_ACTIONS = tuple(verb.name for verb in RUN_VERBS)


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
    bp.add_url_rule(f"{PREFIX}/limits", "api_limits", api.limits)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>/signals/<signal_id>", "api_signal", api.signal)
    bp.add_url_rule(f"{PREFIX}/runs/<workflow_id>/outputs/<step_name>", "api_output", api.output)
    bp.add_url_rule(f"{PREFIX}/batches/<batch_id>", "api_batch", api.batch)
    bp.add_url_rule(f"{PREFIX}/batches/<batch_id>/children/<position>", "api_batch_child", api.batch_child)
    # Routing prefers every rule above to these (a path converter matches last).
    for rule in (PREFIX, f"{PREFIX}/", f"{PREFIX}/<path:rest>"):
        bp.add_url_rule(rule, "api_missing", api.missing)
