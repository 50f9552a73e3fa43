"""Who may use the dashboard (``PGBUS_DASHBOARD_AUTH``) and the CSRF token of its forms.

The CSRF token is a random value kept in a ``SameSite=Strict`` HttpOnly cookie
and repeated in every form (double submit): a POST whose form field does not
match the cookie is refused with 400 before anything changes. It needs no
``SECRET_KEY`` and no session, so it works in any host app.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from flask import Blueprint, Flask, current_app, g, request
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import BadRequest, Forbidden, Unauthorized
from werkzeug.wrappers import Response

from ..config import Settings
from .i18n import gettext

CSRF_COOKIE = "pgbus_csrf"
CSRF_FIELD = "csrf_token"


def authenticate(settings: Settings, app: Flask) -> str:
    """The actor (``dashboard:NAME``) of this request, or Unauthorized/Forbidden.

    With ``PGBUS_DASHBOARD_AUTH`` its answer decides (it may also raise
    Forbidden itself); without it only debug, testing or
    ``PGBUS_DASHBOARD_PUBLIC`` apps serve the dashboard, to "anonymous".
    """
    auth = settings.dashboard_auth
    if auth is None:
        if app.debug or app.testing or settings.dashboard_public:
            return "dashboard:anonymous"
        raise Forbidden(gettext(
            "The pgbus dashboard is turned off: set PGBUS_DASHBOARD_AUTH to a function that returns the name of "
            "the signed-in operator (or PGBUS_DASHBOARD_PUBLIC = True to serve it to everyone)."))
    who: Any = auth(request)
    if not who:
        raise Unauthorized(gettext("You are not allowed to use the pgbus dashboard: please sign in."))
    name = "anonymous" if who is True else str(who)
    return f"dashboard:{name}"


def csrf_token() -> str:
    """This browser's token (made on first use; the response then sets the cookie)."""
    token = g.get("pgbus_csrf")
    if token is None:
        token = request.cookies.get(CSRF_COOKIE)
        if not token or len(token) < 32:
            token = secrets.token_urlsafe(32)
            g.pgbus_csrf_new = True
        g.pgbus_csrf = token
    return str(token)


def check_csrf() -> None:
    """Refuse (400) a POST whose token is missing or does not match the cookie."""
    cookie = request.cookies.get(CSRF_COOKIE) or ""
    sent = request.form.get(CSRF_FIELD) or ""
    if not cookie or not sent or not hmac.compare_digest(cookie.encode(), sent.encode()):
        raise BadRequest(gettext(
            "The form's security token is missing or out of date. Nothing was changed: reload the page and try "
            "again."))


def set_csrf_cookie(response: Response, path: str) -> None:
    if g.get("pgbus_csrf_new"):
        response.set_cookie(CSRF_COOKIE, g.pgbus_csrf, httponly=True, samesite="Strict", path=path,
                            secure=request.is_secure)


def exempt_from_host_csrf(bp: Blueprint) -> None:
    """Keep the host app's Flask-WTF ``CSRFProtect`` off the dashboard ``bp``, which has its own check.

    Without this the host's check reads the dashboard's ``csrf_token`` field
    and refuses every action ("The CSRF session token is missing.").
    ``CSRFProtect(app)`` may come before or after ``PgBus(app)``.
    """

    def exempt(app: Any) -> None:  # a Flask app (BlueprintSetupState types it as sansio's App)
        host = _host_csrf(app)
        if host is not None:
            host.exempt(bp)

    def registered(state: BlueprintSetupState) -> None:
        exempt(state.app)  # CSRFProtect(app) came first

    bp.record_once(registered)

    @bp.before_app_request
    def _exempt_late() -> None:
        # CSRFProtect(app) came later: its check is queued after this hook, so it sees the exemption.
        if request.blueprint and current_app.blueprints.get(request.blueprint) is bp:
            exempt(current_app)


def _host_csrf(app: Any) -> Any:
    """The app's Flask-WTF ``CSRFProtect``, if it has one."""
    host = app.extensions.get("csrf")
    if host is None:
        return None
    try:
        from flask_wtf.csrf import CSRFProtect
    except ImportError:
        return None
    return host if isinstance(host, CSRFProtect) else None
