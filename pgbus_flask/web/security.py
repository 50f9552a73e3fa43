"""Who may use the dashboard (``PGBUS_DASHBOARD_AUTH``), at which hosts an open one answers, and the
CSRF check of its forms.

``PGBUS_DASHBOARD_AUTH`` answers with the operator's name or id (a non-empty
``str`` or an ``int``), ``True`` (an anonymous operator), or a falsy value (a
401). Anything else (Flask-Login's ``current_user`` itself, say: its anonymous
user is truthy) is a configuration error: a 500 naming the type, and nothing
shown or changed.

A dashboard without that hook (debug, testing, ``PGBUS_DASHBOARD_PUBLIC``)
answers only at loopback names and addresses, the app's ``TRUSTED_HOSTS`` and
``PGBUS_DASHBOARD_HOSTS``: any other ``Host`` is a 400 that changes nothing.
Otherwise a page on an attacker's name that rebinds it to the dashboard's
address (DNS rebinding) would be same-origin with it, and read and act freely.

Every POST passes three checks before anything changes, each refusing with 400:

- the browser's own word, when it gives one: ``Sec-Fetch-Site`` must be
  ``same-origin`` or ``none`` (``same-site`` is refused too: it is exactly the
  sibling subdomain that could plant a cookie), and ``Origin`` must name the
  host the request was sent to;
- a signed double-submit token: the ``pgbus_csrf`` cookie (HttpOnly,
  ``SameSite=Strict``) holds a random value, and the form repeats an HMAC of
  that value and of the operator's name, keyed with the app's ``SECRET_KEY``.
  A sibling subdomain can toss in a cookie of its own but cannot compute the
  form token that goes with it, nor reuse its own operator's pair for another.

The key is ``SECRET_KEY`` (``SECRET_KEY_FALLBACKS`` are still accepted, so a
rotation does not break open pages), so every process of the app accepts
every other's forms, as with Flask's session. An app without one gets a
random key per process in debug and testing (one process, and a restart asks
for a reload); in production the dashboard then refuses every change and
says to set ``SECRET_KEY``, rather than fail now and then behind several workers.

The dashboard is exempt from the host app's Flask-WTF ``CSRFProtect``
(its forms carry this token, not the host's); the host's own views stay protected.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import logging
import re
import secrets
from typing import Any, NoReturn
from urllib.parse import urlsplit

from flask import Blueprint, Flask, current_app, g, request
from flask.blueprints import BlueprintSetupState
from werkzeug.exceptions import BadRequest, Forbidden, InternalServerError, Unauthorized
from werkzeug.local import LocalProxy
from werkzeug.wrappers import Response

from ..config import Settings, parse_value
from ..errors import ConfigError
from . import inputs
from .i18n import gettext, markup, ugettext

CSRF_COOKIE = "pgbus_csrf"
CSRF_FIELD = "csrf_token"

log = logging.getLogger("pgbus_flask.web")

_COOKIE_VALUE = re.compile(r"[A-Za-z0-9_-]{43}")  # secrets.token_urlsafe(32)
# Apps without SECRET_KEY in debug/testing: valid in this process only.
_PROCESS_KEY = secrets.token_bytes(32)
_SAFE_FETCH_SITES = ("same-origin", "none")
# A Host header: a name or IPv4 address, or an IPv6 address in brackets, and an optional port.
_HOST = re.compile(r"([a-z0-9.-]+|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?")
_MISCONFIGURED_LOGGED: set[str] = set()  # the types of wrong auth answers already logged in this process


class HostRefused(BadRequest):
    """A request to a dashboard without ``PGBUS_DASHBOARD_AUTH`` at a host it does not answer at."""


def authenticate(settings: Settings, app: Flask) -> str:
    """The actor (``dashboard:NAME``) of this request, or Unauthorized/Forbidden.

    With ``PGBUS_DASHBOARD_AUTH`` its answer decides (it may also raise
    Forbidden itself); without it only debug, testing or
    ``PGBUS_DASHBOARD_PUBLIC`` apps serve the dashboard, to "anonymous".
    """
    auth = settings.dashboard_auth
    if auth is None:
        if app.debug or app.testing or settings.dashboard_public:
            check_host(settings, app)
            return "dashboard:anonymous"
        raise Forbidden(gettext(
            "The pgbus dashboard is turned off: set PGBUS_DASHBOARD_AUTH to a function that returns the name of "
            "the signed-in operator (or PGBUS_DASHBOARD_PUBLIC = True to serve it to everyone)."))
    who: Any = auth(request)
    if isinstance(who, LocalProxy):  # current_user itself: judge what it stands for
        who = who._get_current_object()
    if not who:
        raise Unauthorized(gettext("You are not allowed to use the pgbus dashboard: please sign in."))
    if who is True:
        name = "anonymous"
    elif isinstance(who, str):
        name = who
    elif isinstance(who, int) and not isinstance(who, bool):
        name = str(int(who))  # the number, whatever an int subclass prints
    else:
        _misconfigured(type(who))
    return f"dashboard:{name}"


def _misconfigured(kind: type) -> NoReturn:
    """A 500 naming the type the auth hook returned: a truthy object is not a name (logged once per type)."""
    shown = kind.__qualname__
    if shown not in _MISCONFIGURED_LOGGED:
        _MISCONFIGURED_LOGGED.add(shown)
        log.error("pgbus dashboard: PGBUS_DASHBOARD_AUTH returned a %s.%s, which is not an operator's name, so "
                  "the request was refused with a 500: return the user's name or id (str or int), True, or None "
                  "to refuse", kind.__module__, shown)
    raise InternalServerError(gettext(
        "PGBUS_DASHBOARD_AUTH returned %(type)s; return the user's id or None. Nothing was shown or changed.",
        type=shown))


def check_host(settings: Settings, app: Flask) -> None:
    """Refuse (400) a request at a host this open dashboard does not answer at (see the module's docstring)."""
    host = request.host
    listed = (*settings.dashboard_hosts, *_trusted_hosts(app))
    if host_allowed(host, listed):
        return
    log.warning("pgbus dashboard: refused a request for host %r: without PGBUS_DASHBOARD_AUTH the dashboard "
                "answers only at loopback names, TRUSTED_HOSTS and PGBUS_DASHBOARD_HOSTS", host[:200])
    raise HostRefused(markup(ugettext(
        "This dashboard has no sign-in, so it answers only at localhost and at the hosts named in "
        "PGBUS_DASHBOARD_HOSTS, not at %(host)s. Nothing was changed: add this host to PGBUS_DASHBOARD_HOSTS, "
        "or set PGBUS_DASHBOARD_AUTH."), host=inputs.shown(host)))


def host_allowed(host: str, listed: tuple[str, ...] = ()) -> bool:
    """Whether ``host`` (a ``Host`` header, port and all) is a loopback name or address, or matches
    ``listed`` (werkzeug's rules: the port is ignored, a leading dot takes the name and its subdomains)."""
    found = _HOST.fullmatch(host.lower())
    if found is None:
        return False
    name = found.group(1)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name[1:-1] if name.startswith("[") else name)
    except ValueError:
        pass
    else:
        if address.is_loopback:
            return True
        name = f"[{address.compressed}]" if address.version == 6 else address.compressed
    for pattern in listed:
        if name == pattern or (pattern.startswith(".") and (name == pattern[1:] or name.endswith(pattern))):
            return True
    return False


def _trusted_hosts(app: Flask) -> tuple[str, ...]:
    """The app's ``TRUSTED_HOSTS`` as PGBUS_DASHBOARD_HOSTS entries (Flask refuses other hosts before us)."""
    trusted = app.config.get("TRUSTED_HOSTS")
    if not trusted:
        return ()
    found = []
    for item in [trusted] if isinstance(trusted, str) else trusted:
        try:
            found += parse_value("PGBUS_DASHBOARD_HOSTS", [item])
        except ConfigError:
            continue  # not a name werkzeug would match either
    return tuple(found)


def csrf_token() -> str:
    """The token this browser's forms carry (its cookie is made on first use and set by the response)."""
    cookie = g.get("pgbus_csrf")
    if cookie is None:
        cookie = request.cookies.get(CSRF_COOKIE, "")
        if not _COOKIE_VALUE.fullmatch(cookie):
            cookie = secrets.token_urlsafe(32)
            g.pgbus_csrf_new = True
        g.pgbus_csrf = cookie
    return _sign(_keys(current_app)[0], cookie, g.get("pgbus_actor") or "")


def check_csrf() -> None:
    """Refuse (400) a POST sent from another site, or whose token is missing or not this browser's."""
    app = current_app
    if not (app.secret_key or app.debug or app.testing):
        log.warning("pgbus dashboard: refused a form because the app has no SECRET_KEY to check it with")
        raise BadRequest(gettext(
            "The dashboard cannot check this form because the app has no SECRET_KEY. Nothing was changed: set "
            "SECRET_KEY in the app's configuration (the same value in every process)."))
    site = request.headers.get("Sec-Fetch-Site")
    origin = request.headers.get("Origin")
    if site is not None and site not in _SAFE_FETCH_SITES:
        _refuse(f"the browser sent it from another site (Sec-Fetch-Site: {site!r})")
    if origin is not None and not _same_host(origin, request.host):
        _refuse(f"it came from {origin!r}, not from this host {request.host!r} (behind a proxy that changes "
                "the Host header, use werkzeug's ProxyFix)")
    cookie = request.cookies.get(CSRF_COOKIE, "")
    sent = request.form.get(CSRF_FIELD, "")
    if not _COOKIE_VALUE.fullmatch(cookie) or not sent:
        _refuse("")
    actor = g.get("pgbus_actor") or ""
    if not any(hmac.compare_digest(_sign(key, cookie, actor).encode(), sent.encode("utf-8", "replace"))
               for key in _keys(app)):
        _refuse("")


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


def _keys(app: Flask) -> list[bytes]:
    """The signing key first, then the keys still accepted."""
    keys = [app.secret_key, *(app.config.get("SECRET_KEY_FALLBACKS") or ())]
    found = [key.encode() if isinstance(key, str) else bytes(key) for key in keys if key]
    return found or [_PROCESS_KEY]


def _sign(key: bytes, cookie: str, actor: str) -> str:
    message = b"\0".join((b"pgbus_flask.csrf", cookie.encode(), actor.encode("utf-8", "surrogatepass")))
    return base64.urlsafe_b64encode(hmac.new(key, message, hashlib.sha256).digest()).rstrip(b"=").decode()


def _same_host(origin: str, host: str) -> bool:
    """Whether ``Origin`` names ``host`` (default ports aside; the scheme may differ behind a TLS proxy)."""
    try:
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or parts.path or parts.query:
            return False
        sent = _host_and_port(parts.netloc)
        return sent[0] is not None and sent == _host_and_port(host)
    except ValueError:
        return False


def _host_and_port(netloc: str) -> tuple[str | None, int | None]:
    parts = urlsplit("//" + netloc)
    port = parts.port
    return parts.hostname, None if port in (80, 443) else port


def _refuse(why: str) -> NoReturn:
    if why:
        log.warning("pgbus dashboard: refused a form because %s", why)
    raise BadRequest(gettext(
        "The form's security token is missing or out of date. Nothing was changed: reload the page and try again."))
