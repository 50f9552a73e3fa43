"""Every ``PGBUS_*`` setting: its default, its meaning, and how it is checked.

This module is the one source of truth for configuration keys. Values come
from ``app.config`` (Flask), keyword arguments to :class:`~pgbus_flask.PgBus`
(``database_url=...``), or the environment (``pgbus-worker`` without an app).
A bad value fails at start-up with :class:`~pgbus_flask.errors.ConfigError`
naming the key; a URL is shown with its password replaced by ``***``
(:func:`redact_url`, and :func:`redact` for messages that may quote one).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from .errors import ConfigError

#: Locales the dashboard ships catalogs for.
SHIPPED_LOCALES: tuple[str, ...] = ("en", "ar", "da", "de", "es", "fi", "fr", "he", "it", "ja", "nb", "nl", "pl", "pt",
                                     "sv", "zh_Hans")


@dataclass(frozen=True)
class Key:
    name: str
    default: Any
    meaning: str
    kind: str  # how the value is parsed and checked: see PARSERS


#: The default of PGBUS_RETENTION_FINISHED and PGBUS_RETENTION_CANCELLED: PGBUS_RETENTION's value.
INHERIT = "PGBUS_RETENTION"
#: What PGBUS_RETENTION and the two above take for "never delete" (besides None and "").
FOREVER = "forever"

KEYS: tuple[Key, ...] = (
    Key("PGBUS_DATABASE_URL", None, "PostgreSQL URL holding all workflow state (postgresql://...)", "pg_url"),
    Key("PGBUS_REDIS_URL", None, "Redis URL for RQ's queues (redis://, rediss:// or unix://), or Redis Sentinel's"
        " (redis+sentinel://host:26379,host2:26379/SERVICE/DB, or RQ's SENTINEL dict)", "redis_url"),
    Key("PGBUS_QUEUE", "pgbus", "RQ queue for step jobs when neither the class nor the step names one", "name"),
    Key("PGBUS_DATABASE_POOLER", "session",
        "what PGBUS_DATABASE_URL points at: 'session' (PostgreSQL itself, or a session-mode pooler) or"
        " 'transaction' (a transaction-mode pooler such as PgBouncer's pool_mode = transaction: no prepared"
        " statements)", "pooler"),
    Key("PGBUS_POOL_SIZE", 5, "most PostgreSQL connections one process keeps open", "pos_int"),
    Key("PGBUS_STALL_THRESHOLD", timedelta(minutes=5),
        "a scheduled step due longer than this is overdue (the sweep resends it if Redis lost its job)", "duration"),
    Key("PGBUS_WAITING_THRESHOLD", None,
        "a run waiting longer than this on a signal without wait_timeout, on a fan-out batch, or in line for a"
        " concurrency slot or a rate, needs attention (None: never)", "opt_duration"),
    Key("PGBUS_STEP_TIMEOUT", timedelta(minutes=10),
        "default stall deadline of a step attempt, and RQ's job timeout", "duration"),
    Key("PGBUS_INLINE_STEPS", 20,
        "most steps one step job runs after its first by inline continuation (0: one step a job)", "count"),
    Key("PGBUS_INLINE_SECONDS", timedelta(seconds=5),
        "a step job starts no inline step after running this long (RQ's job timeout grows by it)", "duration"),
    Key("PGBUS_SWEEP_INTERVAL", timedelta(seconds=30), "how often each worker runs the sweep", "duration"),
    Key("PGBUS_RETENTION", timedelta(days=30),
        "finished and cancelled runs older than this (since their last change) are deleted by the sweep, with their"
        " steps, audit trail, signals and fan-out batches ('forever' or None: keep them); the default of the two"
        " below", "retention"),
    Key("PGBUS_RETENTION_FINISHED", INHERIT,
        "finished runs older than this are deleted ('forever' or None: keep them)", "retention"),
    Key("PGBUS_RETENTION_CANCELLED", INHERIT,
        "cancelled runs older than this are deleted: cancelled by a person, by a step's on_error='cancel' or with"
        " their parent ('forever' or None: keep them). Paused runs, failed ones among them, are never deleted",
        "retention"),
    Key("PGBUS_WORKER_CLASS", "pgbus_flask.worker.runner.PgbusWorker",
        "dotted path of the RQ worker class pgbus-worker runs", "name"),
    Key("PGBUS_DASHBOARD_PREFIX", "/pgbus", "URL prefix of the dashboard blueprint (None: no dashboard)", "prefix"),
    Key("PGBUS_DASHBOARD_AUTH", None,
        "callable(request) -> actor name, or None/False to refuse; without it the dashboard is debug/testing only",
        "opt_callable"),
    Key("PGBUS_DASHBOARD_PUBLIC", False,
        "serve the dashboard without PGBUS_DASHBOARD_AUTH (actor 'anonymous'), at loopback names and"
        " PGBUS_DASHBOARD_HOSTS", "bool"),
    Key("PGBUS_DASHBOARD_HOSTS", (),
        "host names a dashboard without PGBUS_DASHBOARD_AUTH answers at, besides loopback and the app's"
        " TRUSTED_HOSTS (comma-separated; '.example.com' for its subdomains)", "hosts"),
    Key("PGBUS_SUBJECT_URL", None, "callable(subject_type, subject_id) -> URL of the subject's page", "opt_callable"),
    Key("PGBUS_APP_REVISION", None, "the app's revision, recorded on every attempt (e.g. a git sha)", "opt_str"),
    Key("PGBUS_LOCALES", SHIPPED_LOCALES, "locales the dashboard offers, among the shipped ones", "locales"),
    Key("PGBUS_DEFAULT_LOCALE", "en", "locale when the viewer asks for none the dashboard offers", "locale"),
    Key("PGBUS_TIMEZONE", "UTC", "timezone the dashboard shows times in", "timezone"),
    Key("PGBUS_LIVE_REFRESH", timedelta(seconds=5),
        "how often the dashboard's pages update in place, at least 1 s (0 or None: never)", "refresh"),
    Key("PGBUS_TRANSLATIONS", (),
        "folders whose <locale>/LC_MESSAGES/pgbus.mo override some of the dashboard's messages (comma-separated)",
        "folders"),
    Key("PGBUS_IMPORT", (), "modules to import so their workflows register (comma-separated in the environment)",
        "modules"),
    Key("PGBUS_METRICS", False,
        "serve Prometheus metrics at <dashboard prefix>/metrics (needs prometheus-client: the metrics extra)", "bool"),
    Key("PGBUS_METRICS_TOKEN", None,
        "bearer token a scraper sends to read <prefix>/metrics without the dashboard's auth (16+ characters)",
        "secret"),
    Key("PGBUS_MAX_PENDING_SIGNALS", 1_000,
        "most pending signals one run may hold: past it run.signal() raises TooManyPendingSignals and stores"
        " nothing", "pos_int"),
    Key("PGBUS_MCP_WRITE", False,
        "let `flask pgbus mcp` offer the write tools (verbs, signals, bulk verbs); read tools only when false",
        "bool"),
    Key("PGBUS_WEBHOOKS", (),
        "webhook targets told when runs need a person: a list of dicts with url, secret (whsec_...), events,"
        " optional classes and format ('standard' or 'slack'); see docs/notifications.md", "webhooks"),
    Key("PGBUS_DASHBOARD_URL", None,
        "the dashboard's absolute URL (https://ops.example.com/pgbus), for the links webhook messages carry"
        " (None: messages carry none)", "opt_url"),
    Key("PGBUS_NOTIFY_INTERVAL", timedelta(minutes=15),
        "at most one message per attention group and webhook target in this time (a digest of what came since)",
        "duration"),
    Key("PGBUS_ERROR_REPORTER", None,
        "callable(exception, context dict) told of every failure pgbus handles by itself (a failed enqueue after"
        " commit, a sweep that raised, a signal receiver that raised, a delivery given up) and of each step's own"
        " exception (context['where'] == 'step'); Sentry is told too when sentry_sdk is initialised", "opt_callable"),
    Key("PGBUS_MCP_TOKEN", None,
        "bearer token every request to `flask pgbus mcp --http` must send (32+ characters); needed to serve it"
        " beyond loopback", "secret"),
)

KEYS_BY_NAME: dict[str, Key] = {key.name: key for key in KEYS}


@dataclass(frozen=True)
class Settings:
    """The checked configuration of one engine (one app, or one standalone bus)."""

    database_url: str | None
    redis_url: str | None
    queue: str
    pool_size: int
    stall_threshold: timedelta
    waiting_threshold: timedelta | None
    step_timeout: timedelta
    inline_steps: int
    inline_seconds: timedelta
    sweep_interval: timedelta
    retention: timedelta | None  # PGBUS_RETENTION; what the sweep applies is retention_finished/_cancelled
    worker_class: str
    dashboard_prefix: str | None
    dashboard_auth: Callable[..., Any] | None
    dashboard_public: bool
    subject_url: Callable[[str, str], Any] | None
    app_revision: str | None
    locales: tuple[str, ...]
    default_locale: str
    timezone: str
    live_refresh: timedelta | None = field(default=timedelta(seconds=5))
    imports: tuple[str, ...] = field(default=())
    translations: tuple[str, ...] = field(default=())
    metrics: bool = False
    metrics_token: str | None = field(default=None, repr=False)
    mcp_write: bool = False
    mcp_token: str | None = field(default=None, repr=False)
    dashboard_hosts: tuple[str, ...] = field(default=())
    max_pending_signals: int = 1_000
    database_pooler: str = "session"
    #: PGBUS_WEBHOOKS, checked (pgbus_flask.notify.Target)
    webhooks: tuple[Any, ...] = field(default=())
    notify_interval: timedelta = timedelta(minutes=15)
    dashboard_url: str | None = None
    error_reporter: Callable[..., Any] | None = None
    #: How long the sweep keeps finished and cancelled runs (None: forever), PGBUS_RETENTION where not set.
    retention_finished: timedelta | None = timedelta(days=30)
    retention_cancelled: timedelta | None = timedelta(days=30)

    @classmethod
    def load(cls, values: Mapping[str, Any]) -> Settings:
        """Build settings from ``PGBUS_*`` values; missing keys take their defaults."""
        unknown = [name for name in values if name.startswith("PGBUS_") and name not in KEYS_BY_NAME]
        # PGBUS_TEST_* belong to the test suite, not the engine.
        unknown = [name for name in unknown if not name.startswith("PGBUS_TEST_")]
        if unknown:
            raise ConfigError(unknown[0], "unknown setting (known: " + ", ".join(KEYS_BY_NAME) + ")")
        parsed = {key.name: _parse(key, values.get(key.name, key.default)) for key in KEYS}
        if parsed["PGBUS_DEFAULT_LOCALE"] not in parsed["PGBUS_LOCALES"]:
            raise ConfigError("PGBUS_DEFAULT_LOCALE", "must be one of PGBUS_LOCALES")
        if parsed["PGBUS_METRICS"]:
            _check_metrics(parsed)
        return cls(
            database_url=parsed["PGBUS_DATABASE_URL"],
            redis_url=parsed["PGBUS_REDIS_URL"],
            queue=parsed["PGBUS_QUEUE"],
            pool_size=parsed["PGBUS_POOL_SIZE"],
            stall_threshold=parsed["PGBUS_STALL_THRESHOLD"],
            waiting_threshold=parsed["PGBUS_WAITING_THRESHOLD"],
            step_timeout=parsed["PGBUS_STEP_TIMEOUT"],
            inline_steps=parsed["PGBUS_INLINE_STEPS"],
            inline_seconds=parsed["PGBUS_INLINE_SECONDS"],
            sweep_interval=parsed["PGBUS_SWEEP_INTERVAL"],
            retention=parsed["PGBUS_RETENTION"],
            retention_finished=_inherit(parsed, "PGBUS_RETENTION_FINISHED", "PGBUS_RETENTION"),
            retention_cancelled=_inherit(parsed, "PGBUS_RETENTION_CANCELLED", "PGBUS_RETENTION"),
            worker_class=parsed["PGBUS_WORKER_CLASS"],
            dashboard_prefix=parsed["PGBUS_DASHBOARD_PREFIX"],
            dashboard_auth=parsed["PGBUS_DASHBOARD_AUTH"],
            dashboard_public=parsed["PGBUS_DASHBOARD_PUBLIC"],
            subject_url=parsed["PGBUS_SUBJECT_URL"],
            app_revision=parsed["PGBUS_APP_REVISION"],
            locales=parsed["PGBUS_LOCALES"],
            default_locale=parsed["PGBUS_DEFAULT_LOCALE"],
            timezone=parsed["PGBUS_TIMEZONE"],
            live_refresh=parsed["PGBUS_LIVE_REFRESH"],
            imports=parsed["PGBUS_IMPORT"],
            translations=parsed["PGBUS_TRANSLATIONS"],
            metrics=parsed["PGBUS_METRICS"],
            metrics_token=parsed["PGBUS_METRICS_TOKEN"],
            mcp_write=parsed["PGBUS_MCP_WRITE"],
            mcp_token=parsed["PGBUS_MCP_TOKEN"],
            dashboard_hosts=parsed["PGBUS_DASHBOARD_HOSTS"],
            max_pending_signals=parsed["PGBUS_MAX_PENDING_SIGNALS"],
            database_pooler=parsed["PGBUS_DATABASE_POOLER"],
            webhooks=parsed["PGBUS_WEBHOOKS"],
            notify_interval=parsed["PGBUS_NOTIFY_INTERVAL"],
            dashboard_url=parsed["PGBUS_DASHBOARD_URL"],
            error_reporter=parsed["PGBUS_ERROR_REPORTER"],
        )

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``PGBUS_*`` environment variables, then ``overrides``."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {k: v for k, v in env.items() if k in KEYS_BY_NAME}
        values.update(overrides)
        return cls.load(values)

    def require_urls(self) -> None:
        """Fail unless both service URLs are set: the engine needs them to run."""
        if not self.database_url:
            raise ConfigError("PGBUS_DATABASE_URL", "is not set")
        if not self.redis_url:
            raise ConfigError("PGBUS_REDIS_URL", "is not set")


def _inherit(parsed: Mapping[str, Any], name: str, default_from: str) -> Any:
    """``name``'s parsed value, or ``default_from``'s where it was left at INHERIT."""
    return parsed[default_from] if parsed[name] == INHERIT else parsed[name]


#: The shortest PGBUS_METRICS_TOKEN accepted: a bearer token is a password a scraper sends.
MIN_TOKEN_LENGTH = 16
#: The shortest PGBUS_MCP_TOKEN: it guards the write tools on a network, so it is held to more.
MIN_MCP_TOKEN_LENGTH = 32
_SECRET_MINIMUM = {"PGBUS_MCP_TOKEN": MIN_MCP_TOKEN_LENGTH}


def _check_metrics(parsed: Mapping[str, Any]) -> None:
    """PGBUS_METRICS needs prometheus-client and a dashboard to serve ``/metrics`` from."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        raise ConfigError("PGBUS_METRICS", "needs prometheus-client: pip install 'pgbus-flask[metrics]'") from None
    if parsed["PGBUS_DASHBOARD_PREFIX"] is None:
        raise ConfigError("PGBUS_METRICS", "is served under the dashboard's prefix, but PGBUS_DASHBOARD_PREFIX is"
                                           " None")


def parse_value(name: str, value: Any) -> Any:
    """One key's value, parsed and checked as :meth:`Settings.load` does (ConfigError naming it)."""
    return _parse(KEYS_BY_NAME[name], value)


def keyword_values(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``database_url=...`` keyword arguments as ``PGBUS_DATABASE_URL`` values."""
    values = {}
    for name, value in kwargs.items():
        key = "PGBUS_" + name.upper()
        if key not in KEYS_BY_NAME:
            raise ConfigError(key, f"unknown setting (from keyword argument {name!r})")
        values[key] = value
    return values


_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_KEYWORD_STRING = re.compile(r"\s*[A-Za-z_]+\s*=")  # libpq's "host=h password=pw"
# password=, sslpassword=: in a URL's query up to "&", in a keyword string one (quoted) value.
_QUERY_PASSWORD = re.compile(r"(?i)([?&](?:ssl|sentinel_)?password=)[^&#]*")
_KEYWORD_PASSWORD = re.compile(r"(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s'\"]+)")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]*")


def redact_url(url: str) -> str:
    """``url`` with its password shown as ``***``, fit for an error or a log line.

    Takes a URL (``redis://:pw@host/0``, ``postgresql://user:pw@host/db``,
    ``?password=pw`` in its query) or a libpq keyword string
    (``host=h password=pw``). Everything between the user name and the last
    ``@`` goes, so a password with an unescaped ``@``, ``/`` or ``?``, or a
    URL without ``//``, loses more than its password, never less.
    """
    if _KEYWORD_STRING.match(url):
        return _KEYWORD_PASSWORD.sub(r"\1***", url)
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    at = url.rfind("@", start)
    colon = url.find(":", start, at) if at >= 0 else -1
    if colon >= 0:
        url = url[:colon] + ":***" + url[at:]
    return _QUERY_PASSWORD.sub(r"\1***", url)


def redact(text: str) -> str:
    """``text`` (a driver's error message, say) with the password of every URL or keyword string in it hidden."""
    parts, last = [], 0
    for found in _URL_IN_TEXT.finditer(text):
        parts += [_KEYWORD_PASSWORD.sub(r"\1***", text[last:found.start()]), redact_url(found.group(0))]
        last = found.end()
    parts.append(_KEYWORD_PASSWORD.sub(r"\1***", text[last:]))
    return "".join(parts)


def _seconds(name: str, value: Any) -> timedelta:
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, bool):
        raise ConfigError(name, f"must be a duration, got {value!r}")
    elif isinstance(value, (int, float)):
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        try:
            result = timedelta(seconds=float(value.strip()))
        except ValueError:
            raise ConfigError(name, f"must be a number of seconds, got {value!r}") from None
    else:
        raise ConfigError(name, f"must be a timedelta or seconds, got {value!r}")
    if result <= timedelta(0):
        raise ConfigError(name, f"must be positive, got {value!r}")
    return result


def _retention(name: str, value: Any) -> Any:
    """How long the sweep keeps runs: a positive duration, or None for ever (None, "" or "forever"); for the
    per-status keys also INHERIT ("PGBUS_RETENTION"), their default: PGBUS_RETENTION's value."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", FOREVER)):
        return None
    if isinstance(value, str) and value.strip().upper() == INHERIT and name != INHERIT:
        return INHERIT
    if isinstance(value, str):
        try:
            float(value.strip())
        except ValueError:
            follow = f", {INHERIT!r} (its default: the same as {INHERIT})" if name != INHERIT else ""
            raise ConfigError(name, f"must be a number of seconds, a timedelta, {FOREVER!r} or None (keep the runs"
                                    f" for ever){follow}, got {value!r}") from None
    return _seconds(name, value)


def _pg_url(name: str, value: Any) -> str:
    text = str(value)
    shown = redact_url(text)
    # Without "//" libpq reads a keyword string, and its error quotes all of it.
    if not re.match(r"(?i)postgres(ql)?://", text):
        raise ConfigError(name, f"must be a postgresql:// URL, got {shown!r}")
    try:
        urlsplit(text)
    except ValueError as exc:
        raise ConfigError(name, f"is not a valid URL ({exc}): {shown!r}") from None
    return text


def _redis_url(name: str, value: Any) -> str:
    if isinstance(value, Mapping):
        return _rq_sentinel_settings(name, value)
    text = str(value)
    if is_sentinel_url(text):
        sentinel_url(text, name)  # raises ConfigError on a bad one
        return text
    shown = redact_url(text)
    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise ConfigError(name, f"is not a valid URL ({exc}): {shown!r}") from None
    if parts.scheme not in ("redis", "rediss", "unix") or not text.lower().startswith(parts.scheme + "://"):
        raise ConfigError(name, f"must be a redis://, rediss:// or unix:// URL (or {SENTINEL_SCHEME}://),"
                                f" got {shown!r}")
    if parts.scheme != "unix" and not parts.hostname:
        raise ConfigError(name, f"has no host: {shown!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ConfigError(name, f"has a bad port: {shown!r}") from None
    return text


#: The scheme of a Redis Sentinel URL, as other clients (Celery's, Kombu's, redis-rs) spell it.
SENTINEL_SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
#: What the query of a Sentinel URL may hold: the sentinels' own credentials, and the sockets' timeout.
SENTINEL_QUERY = ("sentinel_username", "sentinel_password", "socket_timeout")
_SENTINEL_HOST = re.compile(r"^(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:\[\]/]+))(?::(?P<port>[^:]*))?$")


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` is a ``redis+sentinel://`` URL (whatever the case of its scheme)."""
    return url[:len(SENTINEL_SCHEME) + 3].lower() == SENTINEL_SCHEME + "://"


@dataclass(frozen=True)
class SentinelURL:
    """A ``redis+sentinel://`` URL taken apart: where the sentinels are, which master to ask for.

    ``redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/SERVICE[/DB][?query]``:
    the sentinels (port 26379 unless given), the service name the sentinels monitor
    (``sentinel monitor SERVICE ...``), the database number (0 unless given). The user and
    password are the Redis master's (as in a redis:// URL); the query may give the sentinels'
    own (``sentinel_username``, ``sentinel_password``) and ``socket_timeout`` in seconds.
    """

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None
    socket_timeout: float | None = None


def sentinel_url(text: str, name: str = "PGBUS_REDIS_URL") -> SentinelURL:
    """``text``, a ``redis+sentinel://`` URL, taken apart; a ConfigError naming ``name`` says what is wrong."""
    shown = redact_url(text)

    def bad(problem: str) -> ConfigError:
        return ConfigError(name, f"{problem}: {shown!r}")

    try:
        parts = urlsplit(text)
    except ValueError as exc:
        raise bad(f"is not a valid URL ({exc})") from None
    if parts.scheme.lower() != SENTINEL_SCHEME or parts.fragment:
        raise bad(f"must be a {SENTINEL_SCHEME}://host:port[,host:port...]/SERVICE[/DB] URL")
    if "@" in text and "@" not in parts.netloc:
        # The password holds a "/", "?" or "#": what follows it would be read as hosts, and shown.
        raise bad("has an '@' past its hosts: write '/', '?', '#' or '@' in a password as %2F, %3F, %23 or %40")
    userinfo, at, hosts = parts.netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username, password = unquote(user) or None, (unquote(secret) if colon else None)
    sentinels: list[tuple[str, int]] = []
    for item in hosts.split(","):
        found = _SENTINEL_HOST.match(item.strip())
        if not found:
            raise bad(f"has a bad sentinel address {item.strip()!r} (host or host:port, one per comma)")
        port_text = found.group("port")
        if port_text is not None and not (port_text.isdigit() and 0 < int(port_text) < 65536):
            raise bad(f"has a bad port in {item.strip()!r}")
        sentinels.append((found.group("ipv6") or found.group("host"), int(port_text or SENTINEL_PORT)))
    path = [unquote(piece) for piece in parts.path.strip("/").split("/")] if parts.path.strip("/") else []
    if not path or not path[0]:
        raise bad("names no service: add the master's name the sentinels monitor, as in /mymaster/0")
    if len(path) > 2:
        raise bad("has too much path: it is /SERVICE or /SERVICE/DB")
    db_text = path[1] if len(path) == 2 else "0"
    if not db_text.isdigit():
        raise bad(f"has a bad database number {db_text!r} (a whole number, as in /mymaster/0)")
    query: dict[str, str] = {}
    for key, item_value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in SENTINEL_QUERY:
            raise bad(f"has an unknown query parameter {key!r} (known: {', '.join(SENTINEL_QUERY)})")
        query[key] = item_value
    timeout = None
    if "socket_timeout" in query:
        try:
            timeout = float(query["socket_timeout"])
        except ValueError:
            timeout = -1.0
        if not 0 < timeout < float("inf"):
            raise bad(f"has a bad socket_timeout {query['socket_timeout']!r} (seconds, more than 0)")
    return SentinelURL(tuple(sentinels), path[0], int(db_text), username, password,
                       query.get("sentinel_username") or None, query.get("sentinel_password") or None, timeout)


#: The keys of RQ's ``SENTINEL`` setting (rq.cli.helpers.get_redis_from_config) that a URL can say.
#: Seconds a command to the Redis master waits for its answer unless the URL's socket_timeout says otherwise.
REDIS_SOCKET_TIMEOUT = 30.0


def rq_sentinel_settings(where: SentinelURL) -> dict[str, Any]:
    """A Sentinel URL as RQ's ``SENTINEL`` settings (the inverse of reading them: :func:`_rq_sentinel_settings`)."""
    sentinel_kwargs = {key: value for key, value in (("username", where.sentinel_username),
                                                     ("password", where.sentinel_password)) if value}
    return {"INSTANCES": list(where.sentinels), "MASTER_NAME": where.service, "DB": where.db,
            "USERNAME": where.username, "PASSWORD": where.password,
            "SOCKET_TIMEOUT": where.socket_timeout or REDIS_SOCKET_TIMEOUT, "SENTINEL_KWARGS": sentinel_kwargs}


_RQ_SENTINEL_KEYS = ("INSTANCES", "MASTER_NAME", "DB", "USERNAME", "PASSWORD", "SOCKET_TIMEOUT", "SSL",
                     "SENTINEL_KWARGS")


def _rq_sentinel_settings(name: str, value: Mapping[str, Any]) -> str:
    """RQ's ``SENTINEL = {"INSTANCES": [(host, port)], "MASTER_NAME": ..., "DB": ...}`` as a Sentinel URL."""
    value = {key: item for key, item in value.items() if item is not None}  # RQ's template leaves keys empty
    unknown = sorted(str(key) for key in value if key not in _RQ_SENTINEL_KEYS)
    if unknown:
        raise ConfigError(name, f"as RQ's SENTINEL settings has keys it cannot use: {', '.join(unknown)}"
                                f" (known: {', '.join(_RQ_SENTINEL_KEYS)})")
    if value.get("SSL"):
        raise ConfigError(name, "as RQ's SENTINEL settings: SSL is not supported with Sentinel")
    extra = dict(value.get("SENTINEL_KWARGS") or {})
    if not set(extra) <= {"username", "password"}:
        raise ConfigError(name, "as RQ's SENTINEL settings: SENTINEL_KWARGS may hold only username and password")
    try:
        hosts = ",".join(f"[{host}]:{int(port)}" if ":" in str(host) else f"{host}:{int(port)}"
                         for host, port in value.get("INSTANCES", [("localhost", SENTINEL_PORT)]))
    except (TypeError, ValueError):
        raise ConfigError(name, "as RQ's SENTINEL settings: INSTANCES must be a list of (host, port)") from None
    user, password = value.get("USERNAME"), value.get("PASSWORD")
    auth = f"{quote(str(user or ''), safe='')}:{quote(str(password), safe='')}@" if password is not None else (
        f"{quote(str(user), safe='')}@" if user else "")
    query = {"sentinel_username": extra.get("username"), "sentinel_password": extra.get("password"),
             "socket_timeout": value.get("SOCKET_TIMEOUT")}
    text = (f"{SENTINEL_SCHEME}://{auth}{hosts}/{quote(str(value.get('MASTER_NAME', 'mymaster')), safe='')}"
            f"/{value.get('DB', 0)}")
    given = "&".join(f"{key}={quote(str(item), safe='')}" for key, item in query.items() if item is not None)
    text += f"?{given}" if given else ""
    sentinel_url(text, name)
    return text


def _name(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(name, f"must be a non-empty string, got {value!r}")
    return value.strip()


def _integer(name: str, value: Any, least: int, wording: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ConfigError(name, f"must be an integer, got {value!r}") from None
    if number < least:
        raise ConfigError(name, f"must be {wording}, got {value!r}")
    return number


def _pos_int(name: str, value: Any) -> int:
    return _integer(name, value, 1, "at least 1")


def _count(name: str, value: Any) -> int:
    return _integer(name, value, 0, "0 or more")


def _refresh(name: str, value: Any) -> timedelta | None:
    if value is None or value is False or value == "" or _is_zero(value):
        return None
    result = _seconds(name, value)
    # Every open tab asks for its page this often: under a second is load, not news.
    if result < timedelta(seconds=1):
        raise ConfigError(name, f"must be at least 1 second, or 0 for no live refresh, got {value!r}")
    return result


def _prefix(name: str, value: Any) -> str | None:
    if value is None or value is False:
        return None
    text = str(value).rstrip("/")
    if not text.startswith("/"):
        raise ConfigError(name, f"must start with '/', got {value!r}")
    return text


def _callable(name: str, value: Any) -> Callable[..., Any]:
    if isinstance(value, str):
        value = _import_dotted(name, value)
    if not callable(value):
        raise ConfigError(name, f"must be callable, got {value!r}")
    return value  # type: ignore[no-any-return]


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _secret(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(name, f"must be a string, got a {type(value).__name__}")
    shortest = _SECRET_MINIMUM.get(name, MIN_TOKEN_LENGTH)
    if len(value) < shortest or not re.fullmatch(r"[\x21-\x7e]+", value):
        # The value itself is never shown: it is a secret.
        raise ConfigError(name, f"must be at least {shortest} characters, printable ASCII without"
                                " spaces (as an HTTP header carries it)")
    return value


def _locales(name: str, value: Any) -> tuple[str, ...]:
    items = tuple(_split(value))
    bad = [item for item in items if item not in SHIPPED_LOCALES]
    if bad or not items:
        raise ConfigError(name, f"must name shipped locales ({', '.join(SHIPPED_LOCALES)}), got {value!r}")
    return items


def _timezone(name: str, value: Any) -> str:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        ZoneInfo(str(value))
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(name, f"is not a known timezone: {value!r}") from None
    return str(value)


def _hosts(name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, (str, list, tuple, set, frozenset)):
        raise ConfigError(name, f"must be a list of host names or a comma-separated string, got {value!r}")
    return tuple(_host_pattern(name, item) for item in _split(value))


def _folders(name: str, value: Any) -> tuple[str, ...]:
    folders = tuple(os.path.abspath(os.fspath(item)) for item in
                    (_split(value) if isinstance(value, str) else value))
    missing = [folder for folder in folders if not os.path.isdir(folder)]
    if missing:
        raise ConfigError(name, f"names a folder that does not exist: {missing[0]!r}")
    return folders


def _text(name: str, value: Any) -> str:
    return str(value)


def _modules(name: str, value: Any) -> tuple[str, ...]:
    return tuple(_split(value))


#: How each kind of key (``Key.kind``) is parsed and checked: ``parser(key name, value)``
#: returns the value to keep, or raises ConfigError naming the key.
#: PGBUS_DATABASE_POOLER's values ("none" is another name for "session": nothing between).
POOLERS = {"session": "session", "none": "session", "transaction": "transaction"}


def _pooler(name: str, value: Any) -> str:
    """``"session"`` or ``"transaction"``: how the connections to PGBUS_DATABASE_URL are shared."""
    if value is None or value == "":
        return "session"
    chosen = POOLERS.get(str(value).strip().lower()) if isinstance(value, str) else None
    if chosen is None:
        raise ConfigError(name, f"must be 'session' (or 'none': PostgreSQL itself, or a session-mode pooler) or"
                                f" 'transaction' (a transaction-mode pooler such as PgBouncer's), got {value!r}")
    return chosen


def _opt_url(name: str, value: Any) -> str | None:
    if value is None or value == "":
        return None
    parts = urlsplit(value) if isinstance(value, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(name, f"must be an absolute http:// or https:// URL, got {value!r}")
    return str(value).rstrip("/")


def _webhooks(name: str, value: Any) -> tuple[Any, ...]:
    from .notify.targets import parse_targets  # the targets' own checks live beside their use

    return parse_targets(name, value)


PARSERS: dict[str, Callable[[str, Any], Any]] = {
    "webhooks": _webhooks,
    "opt_url": _opt_url,
    "pg_url": _pg_url,
    "redis_url": _redis_url,
    "name": _name,
    "pos_int": _pos_int,
    "count": _count,
    "duration": _seconds,
    "opt_duration": _seconds,
    "retention": _retention,
    "refresh": _refresh,
    "prefix": _prefix,
    "opt_callable": _callable,
    "bool": _bool,
    "opt_str": _text,
    "secret": _secret,
    "locales": _locales,
    "locale": _text,
    "timezone": _timezone,
    "modules": _modules,
    "hosts": _hosts,
    "folders": _folders,
    "pooler": _pooler,
}
#: The kinds for which no value (None or an empty string) means None, before their parser runs.
EMPTY_IS_NONE = frozenset({"pg_url", "redis_url", "opt_duration", "opt_str", "opt_callable", "secret"})


def _parse(key: Key, value: Any) -> Any:
    if key.kind in EMPTY_IS_NONE and (value is None or value == ""):
        return None
    return PARSERS[key.kind](key.name, value)


def _is_zero(value: Any) -> bool:
    """Whether ``value`` is a duration of zero (``0``, ``"0"``, ``timedelta(0)``): "off" for a refresh."""
    if isinstance(value, timedelta):
        return value == timedelta(0)
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return value == 0
    if isinstance(value, str):
        try:
            return float(value.strip()) == 0
        except ValueError:
            return False
    return False


def _split(value: Any) -> list[str]:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(part) for part in value]


# A host name or IPv4 address, or an IPv6 address in brackets; then an optional port (ignored, as
# werkzeug's TRUSTED_HOSTS ignores it).
_HOST_PATTERN = re.compile(r"(\.?[a-z0-9-]+(?:\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])(?::[0-9]{1,5})?")


def _host_pattern(name: str, item: str) -> str:
    """One PGBUS_DASHBOARD_HOSTS entry, lower case without its port (IPv6 in brackets): a host, or
    ``.example.com`` for that name and its subdomains, as Flask's ``TRUSTED_HOSTS`` takes them."""
    text = item.strip().lower()
    try:
        text = text.encode("idna").decode("ascii") if not text.isascii() else text
    except UnicodeError:
        raise ConfigError(name, f"is not a host name: {item!r}") from None
    if text.count(":") > 1 and not text.startswith("[") and "/" not in text:
        text = f"[{text}]"  # a bare IPv6 address
    found = _HOST_PATTERN.fullmatch(text)
    if found is None:
        hint = " (a host name, not a URL)" if "/" in text else ""
        raise ConfigError(name, f"must list host names, such as ops.example.com or .example.com for its"
                                f" subdomains{hint}, got {item!r}")
    host = found.group(1)
    if host.startswith("["):
        import ipaddress

        try:
            host = f"[{ipaddress.IPv6Address(host[1:-1]).compressed}]"
        except ValueError:
            raise ConfigError(name, f"is not an IPv6 address: {item!r}") from None
    return host


def _import_dotted(name: str, path: str) -> Any:
    import importlib

    module_name, _, attr = path.replace(":", ".").rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(name, f"cannot import {path!r}: {exc}") from None
