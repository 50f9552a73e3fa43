"""The dashboard's error pages: what an operator (or a JSON API client) sees when a request fails.

Each handler is a module function registered on the blueprint by :func:`register`;
the dashboard's settings come from ``current_app.extensions["pgbus"]``. An API
endpoint (``pgbus.api_*``) answers ``{"error": ..., "status": ...}`` instead of a page.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from flask import Blueprint, current_app, request
from markupsafe import Markup
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from .. import db
from ..errors import DatabaseUnavailable, PgbusError, SchemaMissing, WorkflowNotFound
from . import api, hooks, i18n, inputs, views

log = logging.getLogger("pgbus_flask.web")

#: The titles of the HTTP errors a dashboard page may answer with (others show the code's name).
HTTP_TITLES = {400: i18n.N_("Bad request"), 401: i18n.N_("Sign-in required"), 403: i18n.N_("Forbidden"),
               404: i18n.N_("Page not found"), 405: i18n.N_("Method not allowed"), 500: i18n.N_("Server error")}


def register(bp: Blueprint) -> None:
    """Register the dashboard's error handlers on its blueprint (and the wrong-method one on the app)."""
    bp.register_error_handler(WorkflowNotFound, run_not_found)
    bp.register_error_handler(DatabaseUnavailable, database_down)
    bp.register_error_handler(psycopg.Error, database_error)
    bp.register_error_handler(SchemaMissing, schema_missing)
    bp.register_error_handler(PgbusError, bad_input)
    bp.register_error_handler(HTTPException, http_error)
    bp.app_errorhandler(MethodNotAllowed)(wrong_method)


def error_page(code: int, title: str, message: str) -> Any:
    """The error page (or the API's JSON error) with HTTP status ``code``."""
    if request.endpoint and request.endpoint.startswith("pgbus.api_"):
        text = message.striptags() if isinstance(message, Markup) else message
        return api.reply({"error": text or title, "status": code}, code)
    return views.render("pgbus/error.html", code=code, title=title, message=message), code


def run_not_found(exc: WorkflowNotFound) -> Any:
    return error_page(404, i18n.gettext("Run not found"), i18n.markup(
        i18n.ugettext("No workflow run has the id %(value)s."), value=inputs.shown(str(exc.workflow_id))))


def database_down(exc: Exception) -> Any:
    log.error("pgbus dashboard: PostgreSQL is unreachable: %s", exc)
    return error_page(503, i18n.gettext("PostgreSQL is unreachable"), i18n.gettext(
        "The dashboard cannot reach PostgreSQL right now, so it cannot show or change any run. Nothing was "
        "changed. Check the database server and PGBUS_DATABASE_URL, then reload this page."))


def database_error(exc: psycopg.Error) -> Any:
    # A psycopg error that got past the engine's boundary: an outage only when it is one,
    # a refused value a 400; anything else is a bug and stays a 500.
    translated = db.translate(exc)
    if isinstance(translated, DatabaseUnavailable):
        return database_down(translated)
    if isinstance(translated, SchemaMissing):
        return schema_missing(translated)
    if translated is None:
        raise exc
    log.warning("pgbus dashboard: PostgreSQL refused a statement: %s", exc)
    return bad_input(translated)


def schema_missing(exc: SchemaMissing) -> Any:
    log.error("pgbus dashboard: %s", exc)
    return error_page(503, i18n.gettext("The pgbus tables are missing"), i18n.gettext(
        "This database has no pgbus tables yet, or an older version of them. Run flask pgbus migrate, "
        "then reload this page. Nothing was changed."))


def bad_input(exc: PgbusError) -> Any:
    return error_page(400, i18n.gettext("Bad request"), views.refused(exc))


def http_error(exc: HTTPException) -> Any:
    if exc.code is None or exc.code < 400:
        return exc
    title = i18n.gettext(HTTP_TITLES[exc.code]) if exc.code in HTTP_TITLES else str(exc.name)
    return error_page(exc.code, title, exc.description or "")


def wrong_method(exc: MethodNotAllowed) -> Any:
    """A request with a method the dashboard's address does not take.

    Routing refuses a wrong method before the blueprint runs, so its own handlers never
    see it: this one is the app's, and answers with the dashboard's page under its prefix."""
    settings = hooks.current_settings()
    if not hooks.under_prefix(settings):
        return exc
    hooks.set_locale_and_zone(settings)
    if _only_the_catch_all(exc):  # e.g. a POST to an address nothing takes: a missing page, not a wrong method
        context = hooks.template_context()
        context.update(code=404, title=i18n.gettext(HTTP_TITLES[404]), message=views.no_page())
        return views.render("pgbus/error.html", **context), 404
    allow = {"Allow": ", ".join(exc.valid_methods or ())}
    if (request.path + "/").startswith(f"{settings.dashboard_prefix}{api.PREFIX}/"):
        message = i18n.gettext("This address does not take %(method)s requests.", method=request.method)
        return api.reply({"error": message, "status": 405}, 405), allow
    context = hooks.template_context()  # the blueprint's processors do not run outside its routes
    context.update(code=405, title=i18n.gettext("Method not allowed"),
                   message=i18n.gettext("This address only takes a form submission; open the page "
                                        "it belongs to instead."))
    return views.render("pgbus/error.html", **context), 405, allow


def _only_the_catch_all(exc: MethodNotAllowed) -> bool:
    """Whether the address matches no rule but the dashboard's catch-all (``pgbus.missing``)."""
    if set(exc.valid_methods or ()) - {"GET", "HEAD", "OPTIONS"}:
        return False
    try:
        endpoint, _ = current_app.url_map.bind_to_environ(request.environ).match(method="GET")
    except HTTPException:
        return False
    return endpoint == "pgbus.missing"
