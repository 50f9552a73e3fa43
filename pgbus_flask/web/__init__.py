"""The dashboard blueprint: pages for operators, localized in the ``pgbus`` Babel domain.

``PgBus(app)`` registers :func:`make_blueprint` at ``PGBUS_DASHBOARD_PREFIX``.
Templates live under ``pgbus/`` in the ``pgbus_flask.templates`` package, so
a host app overrides any page by putting a file at the same path in its own
templates folder.

Every answer but a static file says ``Content-Security-Policy: frame-ancestors 'self'`` and
``X-Frame-Options: SAMEORIGIN`` (no other site may frame a page to click its buttons), unless the
host app set either header itself: that is added once the host's own ``after_request`` hooks ran.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode

import psycopg
from flask import Blueprint, Flask, current_app, g, request, request_finished, url_for
from flask.blueprints import BlueprintSetupState
from markupsafe import Markup
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.wrappers import Response

from .. import db, states
from ..engine import Engine
from ..errors import DatabaseUnavailable, PgbusError, SchemaMissing, WorkflowNotFound
from . import api, embed, helpers, i18n, inputs, insights, live, messages, presenter, schedule_pages, security, views
from . import metrics as scrape

log = logging.getLogger("pgbus_flask.web")

FRAME_HEADERS = {"Content-Security-Policy": "frame-ancestors 'self'", "X-Frame-Options": "SAMEORIGIN"}


def make_blueprint(engine: Engine) -> Blueprint:
    """The dashboard of ``engine`` as a blueprint named ``pgbus``."""
    templates = str(files("pgbus_flask.templates"))
    bp = Blueprint("pgbus", __name__, template_folder=templates,
                   static_folder=str(files("pgbus_flask.templates") / "pgbus" / "static"),
                   static_url_path="/static")
    security.exempt_from_host_csrf(bp)  # its forms carry the dashboard's own token
    settings = engine.settings

    @bp.before_request
    def _before() -> Response | None:
        g.pgbus_now = datetime.now(timezone.utc)
        g.pgbus_locale = i18n.choose_locale(settings.locales, settings.default_locale)
        g.pgbus_tz = i18n.zone(settings.timezone)
        g.pgbus_translations = settings.translations
        if request.endpoint == "pgbus.static":
            return None
        if request.endpoint == scrape.ENDPOINT:  # a bearer token, or the dashboard's auth
            return scrape.authorize(settings, current_app._get_current_object())  # type: ignore[attr-defined]
        g.pgbus_actor = security.authenticate(settings, current_app._get_current_object())  # type: ignore[attr-defined]
        if request.method == "POST":
            security.check_csrf()
        inputs.check_request()
        return None

    @bp.after_request
    def _after(response: Response) -> Response:
        path = (request.script_root or "") + (settings.dashboard_prefix or "/")
        asked = request.args.get(i18n.LOCALE_PARAM)
        # A live refresh repeats this tab's ?locale=: it must not undo a choice made in another tab.
        if asked in settings.locales and request.cookies.get(i18n.LOCALE_COOKIE) != asked and not live.requested():
            response.set_cookie(i18n.LOCALE_COOKIE, asked, max_age=365 * 24 * 3600, samesite="Lax", path=path)
        security.set_csrf_cookie(response, path)
        if request.endpoint != "pgbus.static":
            response.headers.setdefault("Cache-Control", "no-store")
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
            response.headers.setdefault("Referrer-Policy", "same-origin")
            response.vary.add(live.HEADER)  # a live refresh takes no notice out of the session
        return response

    def _frame_guard(sender: Flask, response: Response, **extra: Any) -> None:
        # Sent after every after_request hook, the host app's too: a header it set is seen here and kept.
        prefix = settings.dashboard_prefix
        if not prefix or not (request.path + "/").startswith(prefix + "/") or request.endpoint == "pgbus.static":
            return
        if not any(name in response.headers for name in FRAME_HEADERS):
            response.headers.update(FRAME_HEADERS)

    def _connect(state: BlueprintSetupState) -> None:
        request_finished.connect(_frame_guard, state.app, weak=False)

    bp.record_once(_connect)

    @bp.context_processor
    def _context() -> dict[str, Any]:
        # Pages set g.pgbus_now from PostgreSQL; error pages keep this host's clock.
        now = g.get("pgbus_now") or datetime.now(timezone.utc)
        return {
            "_": i18n.gettext, "gettext": i18n.gettext, "ngettext": i18n.ngettext, "pgettext": i18n.pgettext,
            "npgettext": i18n.npgettext,
            "system_message": lambda code, params, english: messages.system_message(code, params, english, now),
            "pgbus_locale": i18n.current_locale(), "pgbus_locales": settings.locales,
            "locale_name": i18n.locale_name, "csrf_token": security.csrf_token, "actor": g.get("pgbus_actor"),
            "time_tag": lambda moment: i18n.time_tag(moment, now), "absolute": i18n.absolute,
            "duration": i18n.duration, "number": i18n.number, "code": i18n.code,
            "next_sentence": lambda p: helpers.next_sentence(p, now), "run_badge": helpers.run_badge,
            "attention_badge": helpers.attention_badge, "batch_name": presenter.batch_name,
            "status_badge": helpers.status_badge, "step_badge": helpers.step_badge,
            "signal_badge": helpers.signal_badge, "child_badge": helpers.child_badge,
            "audit_sentence": lambda e: helpers.audit_sentence(e, helpers.HTML, now), "label": helpers.label,
            "labels": helpers, "locale_url": _locale_url, "states": states, "pretty": views.pretty,
            "bdi": i18n.bdi, "isolated": i18n.isolated, **live.context(settings, now),
        }

    def _error_page(code: int, title: str, message: str) -> Any:
        if request.endpoint and request.endpoint.startswith("pgbus.api_"):
            text = message.striptags() if isinstance(message, Markup) else message
            return api.reply({"error": text or title, "status": code}, code)
        return views.render("pgbus/error.html", code=code, title=title, message=message), code

    @bp.errorhandler(WorkflowNotFound)
    def _not_found(exc: WorkflowNotFound) -> Any:
        return _error_page(404, i18n.gettext("Run not found"), i18n.markup(
            i18n.ugettext("No workflow run has the id %(value)s."), value=inputs.shown(str(exc.workflow_id))))

    @bp.errorhandler(DatabaseUnavailable)
    def _database_down(exc: Exception) -> Any:
        log.error("pgbus dashboard: PostgreSQL is unreachable: %s", exc)
        return _error_page(503, i18n.gettext("PostgreSQL is unreachable"), i18n.gettext(
            "The dashboard cannot reach PostgreSQL right now, so it cannot show or change any run. Nothing was "
            "changed. Check the database server and PGBUS_DATABASE_URL, then reload this page."))

    @bp.errorhandler(psycopg.Error)
    def _database_error(exc: psycopg.Error) -> Any:
        # A psycopg error that got past the engine's boundary: an outage only when it is one,
        # a refused value a 400; anything else is a bug and stays a 500.
        translated = db.translate(exc)
        if isinstance(translated, DatabaseUnavailable):
            return _database_down(translated)
        if isinstance(translated, SchemaMissing):
            return _schema_missing(translated)
        if translated is None:
            raise exc
        log.warning("pgbus dashboard: PostgreSQL refused a statement: %s", exc)
        return _bad_input(translated)

    @bp.errorhandler(SchemaMissing)
    def _schema_missing(exc: SchemaMissing) -> Any:
        log.error("pgbus dashboard: %s", exc)
        return _error_page(503, i18n.gettext("The pgbus tables are missing"), i18n.gettext(
            "This database has no pgbus tables yet, or an older version of them. Run flask pgbus migrate, "
            "then reload this page. Nothing was changed."))

    @bp.errorhandler(PgbusError)
    def _bad_input(exc: PgbusError) -> Any:
        return _error_page(400, i18n.gettext("Bad request"), views.refused(exc))

    @bp.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Any:
        if exc.code is None or exc.code < 400:
            return exc
        titles = {400: i18n.N_("Bad request"), 401: i18n.N_("Sign-in required"), 403: i18n.N_("Forbidden"),
                  404: i18n.N_("Page not found"), 405: i18n.N_("Method not allowed"), 500: i18n.N_("Server error")}
        title = i18n.gettext(titles[exc.code]) if exc.code in titles else str(exc.name)
        return _error_page(exc.code, title, exc.description or "")

    @bp.app_errorhandler(MethodNotAllowed)
    def _wrong_method(exc: MethodNotAllowed) -> Any:
        # Routing refuses a wrong method before the blueprint runs, so its own
        # handlers never see it: answer with the dashboard's page under its prefix.
        prefix = settings.dashboard_prefix
        if not prefix or not (request.path + "/").startswith(prefix + "/"):
            return exc
        g.pgbus_locale = i18n.choose_locale(settings.locales, settings.default_locale)
        g.pgbus_tz = i18n.zone(settings.timezone)
        g.pgbus_translations = settings.translations
        allow = {"Allow": ", ".join(exc.valid_methods or ())}
        if (request.path + "/").startswith(prefix + api.PREFIX + "/"):
            message = i18n.gettext("This address does not take %(method)s requests.", method=request.method)
            return api.reply({"error": message, "status": 405}, 405), allow
        context = _context()  # the blueprint's processors do not run outside its routes
        context.update(code=405, title=i18n.gettext("Method not allowed"),
                       message=i18n.gettext("This address only takes a form submission; open the page "
                                            "it belongs to instead."))
        return views.render("pgbus/error.html", **context), 405, allow

    pages = views.register(bp, engine)
    insights.register(bp, engine, pages)  # before the API's catch-all rule
    schedule_pages.register(bp, engine, pages)
    embed.register(bp, engine)
    api.register(bp, engine, pages)
    scrape.register(bp, engine)
    return bp


def _locale_url(locale: str) -> str:
    """This page's URL with ``?locale=`` set (other arguments kept).

    A page answering a POST (an error, a confirmation) has no GET of its own:
    its language links lead to the page behind it (the run, or the attention view).
    """
    asked: dict[str, Any] = {i18n.LOCALE_PARAM: locale}
    if request.method != "GET":
        view_args = request.view_args or {}
        if "workflow_id" in view_args:
            return url_for("pgbus.run", workflow_id=view_args["workflow_id"], **asked)
        if request.endpoint == "pgbus.schedule_act":
            return url_for("pgbus.schedule", workflow_class=view_args["workflow_class"], **asked)
        if request.endpoint == "pgbus.bulk":
            return url_for("pgbus.attention", **asked)
    if request.method != "GET" or request.url_rule is None:
        return url_for("pgbus.overview", **asked)
    args = request.args.to_dict()
    args[i18n.LOCALE_PARAM] = locale
    return request.script_root + request.path + "?" + urlencode(args)
