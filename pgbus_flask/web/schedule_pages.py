"""The schedule page, pause and resume from the dashboard (POST, CSRF, a reason, a confirmation),
and the JSON API's schedules.

Every verb goes through :mod:`pgbus_flask.schedules` with the actor ``dashboard:NAME``. A
refusal is a notice on the schedule's page (409 when the schedule's state does not allow
it, 400 for bad input), an unknown class the 404 page; the JSON API answers the same with
``{"error": ..., "status": ...}``. JSON posts carry the same CSRF token as the forms: the
``csrf_token`` field of ``GET <prefix>/api/schedules`` (with the cookie it sets).
"""

from __future__ import annotations

from flask import Blueprint, g, redirect, request, url_for
from markupsafe import Markup
from werkzeug.exceptions import NotFound
from werkzeug.wrappers import Response

from .. import schedules, states
from ..engine import Engine
from ..errors import PgbusError, ScheduleConflict, UnknownSchedule
from ..present import shapes
from ..schedules import Schedule
from . import api, inputs, notices, security
from .helpers import HTML, PLAIN, label
from .i18n import bdi, gettext, markup, ugettext
from .schedules import ACTION_LABELS, confirm, item, sentence
from .views import NOT_INPUT_ERRORS, Pages, refused, render


class SchedulePages:
    """The schedule page, its verbs, and the JSON API's schedules, bound to one engine."""

    def __init__(self, engine: Engine, pages: Pages) -> None:
        self.engine = engine
        self.pages = pages

    def _load(self, name: str) -> Schedule:
        try:
            return schedules.get_schedule(self.engine, name)
        except UnknownSchedule:
            raise NotFound(markup(ugettext("No workflow class %(value)s declares a schedule."),
                                  value=inputs.shown(name))) from None

    def page(self, workflow_class: str, *, error: Markup | str | None = None, status: int = 200) -> tuple[str, int]:
        s = self._load(workflow_class)
        self.pages.sync_clock(s.read_at)
        events = schedules.schedule_events(self.engine, workflow_class)
        notice = notices.take("schedule", workflow_class=workflow_class)
        return render("pgbus/schedule.html", live=True, item=item(s, g.pgbus_now),
                      events=[{"row": e, "sentence": sentence(e)} for e in events], notice=notice, error=error,
                      action_labels=ACTION_LABELS), status

    def act(self, workflow_class: str, action: str) -> Response | tuple[str, int]:
        if action not in states.SCHEDULE_ACTIONS:
            raise NotFound(markup(ugettext("The dashboard has no action %(value)s."), value=inputs.shown(action)))
        s = self._load(workflow_class)
        reason = inputs.text(request.form, "reason")
        if request.form.get("confirmed") != "1":
            return render("pgbus/confirm.html", question=confirm(action, s, HTML),
                          target=url_for(".schedule_act", workflow_class=workflow_class, action=action),
                          fields={"reason": reason or ""}, back=url_for(".schedule", workflow_class=workflow_class),
                          submit=label(ACTION_LABELS, action)), 200
        verb = schedules.pause if action == "pause" else schedules.resume
        try:
            verb(self.engine, workflow_class, g.pgbus_actor, reason)
        except ScheduleConflict as exc:
            return self.page(workflow_class, error=_conflict(exc), status=409)
        except NOT_INPUT_ERRORS:
            raise
        except PgbusError as exc:
            return self.page(workflow_class, error=refused(exc), status=400)
        notices.keep("schedule", workflow_class=workflow_class, action=action)
        return redirect(url_for(".schedule", workflow_class=workflow_class), 303)

    # -- the JSON API -------------------------------------------------------------------------------------

    def api_list(self) -> Response:
        return api.reply({"schedules": [shapes.schedule(s) for s in schedules.list_schedules(self.engine)],
                          "csrf_token": security.csrf_token()})

    def api_one(self, workflow_class: str) -> Response:
        s = self._api_load(workflow_class)
        if isinstance(s, Response):
            return s
        events = schedules.schedule_events(self.engine, workflow_class)
        return api.reply({"schedule": shapes.schedule(s),
                          "events": [{**e, "sentence": sentence(e, PLAIN)} for e in events]})

    def api_act(self, workflow_class: str, action: str) -> Response:
        if action not in states.SCHEDULE_ACTIONS:
            return api.reply({"error": gettext("The JSON API has no address %(path)s.", path=request.path),
                              "status": 404}, 404)
        found = self._api_load(workflow_class)
        if isinstance(found, Response):
            return found
        verb = schedules.pause if action == "pause" else schedules.resume
        try:
            done = verb(self.engine, workflow_class, g.pgbus_actor, inputs.text(request.form, "reason"))
        except ScheduleConflict as exc:
            return api.reply({"error": str(exc), "status": 409}, 409)
        except NOT_INPUT_ERRORS:
            raise
        except PgbusError as exc:
            return api.reply({"error": str(exc), "status": 400}, 400)
        return api.reply({"schedule": shapes.schedule(done)})

    def _api_load(self, workflow_class: str) -> Schedule | Response:
        try:
            return schedules.get_schedule(self.engine, workflow_class)
        except UnknownSchedule as exc:
            return api.reply({"error": str(exc), "status": 404}, 404)


def _conflict(exc: ScheduleConflict) -> str:
    if exc.paused:
        return gettext("The schedule of %(workflow)s is paused already. Nothing was changed.",
                       workflow=bdi(exc.name))
    return gettext("The schedule of %(workflow)s is not paused. Nothing was changed.", workflow=bdi(exc.name))


def register(bp: Blueprint, engine: Engine, pages: Pages) -> SchedulePages:
    """Add the schedule page, its verbs and the JSON API's schedules to ``bp`` (before the API's catch-all)."""
    views = SchedulePages(engine, pages)
    bp.add_url_rule("/schedules/<workflow_class>", "schedule", lambda workflow_class: views.page(workflow_class))
    bp.add_url_rule("/schedules/<workflow_class>/actions/<action>", "schedule_act", views.act, methods=["POST"])
    bp.add_url_rule(f"{api.PREFIX}/schedules", "api_schedules", views.api_list)
    bp.add_url_rule(f"{api.PREFIX}/schedules/<workflow_class>", "api_schedule", views.api_one)
    bp.add_url_rule(f"{api.PREFIX}/schedules/<workflow_class>/<action>", "api_schedule_act", views.api_act,
                    methods=["POST"])
    return views
