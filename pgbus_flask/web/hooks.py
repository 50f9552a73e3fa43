"""The dashboard blueprint's request hooks and template context.

Module functions, as Flask apps write them: each finds the dashboard's engine in
``current_app.extensions["pgbus"]`` (set by ``PgBus.init_app``, or by
:func:`pgbus_flask.web.make_blueprint` when an app mounts the blueprint alone), so
one blueprint serves every app that registers it.

Every answer but a static file says ``Content-Security-Policy: frame-ancestors 'self'`` and
``X-Frame-Options: SAMEORIGIN`` (no other site may frame a page to click its buttons), unless the
host app said who may frame its pages itself (``X-Frame-Options``, or a policy with a
``frame-ancestors`` directive): :func:`frame_guard` adds them once the host's own ``after_request``
hooks ran. A host policy about other things (``default-src 'self'``) is kept, and ours is sent beside
it as a second policy: a browser enforces both.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from flask import Flask, current_app, g, request, request_finished, url_for
from flask.blueprints import BlueprintSetupState
from werkzeug.wrappers import Response

from .. import states
from . import helpers, i18n, inputs, live, messages, presenter, security, views
from . import metrics as scrape

if TYPE_CHECKING:
    from ..config import Settings
    from ..engine import Engine

FRAME_HEADERS = {"Content-Security-Policy": "frame-ancestors 'self'", "X-Frame-Options": "SAMEORIGIN"}


def current_engine() -> Engine:
    """The engine of the app handling this request."""
    return current_app.extensions["pgbus"]  # type: ignore[no-any-return]


def current_settings() -> Settings:
    return current_engine().settings


def set_locale_and_zone(settings: Settings) -> None:
    """This request's language (the ``?locale=``, the cookie, the browser's, the default) and time zone."""
    g.pgbus_locale = i18n.choose_locale(settings.locales, settings.default_locale)
    g.pgbus_tz = i18n.zone(settings.timezone)
    g.pgbus_translations = settings.translations


def before_request() -> Response | None:
    """Set the request's clock, language and zone; then, but for static files, authenticate
    (the metrics scrape by its bearer token), check the CSRF token of a POST and the inputs."""
    settings = current_settings()
    g.pgbus_now = datetime.now(timezone.utc)
    set_locale_and_zone(settings)
    if request.endpoint == "pgbus.static":
        return None
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    if request.endpoint == scrape.ENDPOINT:  # a bearer token, or the dashboard's auth
        return scrape.authorize(settings, app)
    g.pgbus_actor = security.authenticate(settings, app)
    if request.method == "POST":
        security.check_csrf()
    inputs.check_request()
    return None


def after_request(response: Response) -> Response:
    """Keep a language asked for in ``?locale=`` in a cookie, set the CSRF cookie, and tell
    caches and browsers that no page is to be stored, sniffed or referred elsewhere."""
    settings = current_settings()
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


def under_prefix(settings: Settings) -> bool:
    """Whether this request's path is the dashboard's (under ``PGBUS_DASHBOARD_PREFIX``)."""
    prefix = settings.dashboard_prefix
    return bool(prefix) and (request.path + "/").startswith(f"{prefix}/")


def frame_guard(sender: Flask, response: Response, **extra: Any) -> None:
    """Forbid other sites to frame the dashboard's pages (see the module's docstring)."""
    # Sent after every after_request hook, the host app's too: a header it set is seen here and kept.
    if "pgbus" not in sender.extensions or not under_prefix(current_settings()) or request.endpoint == "pgbus.static":
        return
    policies = response.headers.getlist("Content-Security-Policy")
    if "X-Frame-Options" in response.headers or any(_says_frame_ancestors(policy) for policy in policies):
        return
    for name, value in FRAME_HEADERS.items():
        response.headers.add(name, value)


def _says_frame_ancestors(policy: str) -> bool:
    """Whether a Content-Security-Policy value has a ``frame-ancestors`` directive."""
    return any(directive.split()[:1] == ["frame-ancestors"] for directive in policy.lower().split(";"))


def connect_frame_guard(state: BlueprintSetupState) -> None:
    """Run :func:`frame_guard` on each answer of the app the blueprint is registered on."""
    request_finished.connect(frame_guard, state.app, weak=False)


def template_context() -> dict[str, Any]:
    """What every dashboard template may use: translations, badges, sentences, the locale links."""
    settings = current_settings()
    # Pages set g.pgbus_now from PostgreSQL; error pages keep this host's clock.
    now = g.get("pgbus_now") or datetime.now(timezone.utc)
    return {
        "_": i18n.gettext, "gettext": i18n.gettext, "ngettext": i18n.ngettext, "pgettext": i18n.pgettext,
        "npgettext": i18n.npgettext,
        "system_message": lambda code, params, english: messages.system_message(code, params, english, now),
        "pgbus_locale": i18n.current_locale(), "pgbus_locales": settings.locales,
        "pgbus_lang": i18n.language_tag(i18n.current_locale()), "pgbus_dir": i18n.text_direction(i18n.current_locale()),
        "language_tag": i18n.language_tag, "text_direction": i18n.text_direction,
        "locale_name": i18n.locale_name, "csrf_token": security.csrf_token, "actor": g.get("pgbus_actor"),
        "time_tag": lambda moment: i18n.time_tag(moment, now), "absolute": i18n.absolute,
        "duration": i18n.duration, "number": i18n.number, "counted": i18n.counted,
        "code": i18n.code,
        "next_sentence": lambda p: helpers.next_sentence(p, now), "run_badge": helpers.run_badge,
        "attention_badge": helpers.attention_badge, "batch_name": presenter.batch_name,
        "status_badge": helpers.status_badge, "step_badge": helpers.step_badge,
        "signal_badge": helpers.signal_badge, "child_badge": helpers.child_badge,
        "audit_sentence": lambda e: helpers.audit_sentence(e, helpers.HTML, now), "label": helpers.label,
        "labels": helpers, "locale_url": locale_url, "states": states, "pretty": views.pretty,
        "bdi": i18n.bdi, "isolated": i18n.isolated, "identifier": i18n.identifier, **live.context(settings, now),
    }


def locale_url(locale: str) -> str:
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
