"""Settings: defaults, checks that name the key, several apps at once, passwords never shown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import timedelta
from urllib.parse import quote

import pytest
from flask import Flask
from hypothesis import given
from hypothesis import strategies as st

from pgbus_flask import ConfigError, PgBus
from pgbus_flask.config import EMPTY_IS_NONE, KEYS, PARSERS, Settings, redact, redact_url

URLS = {"PGBUS_DATABASE_URL": "postgresql://u@localhost/db", "PGBUS_REDIS_URL": "redis://localhost:6379/0"}


def test_every_kind_of_key_has_a_parser_and_every_parser_a_key() -> None:
    kinds = {key.kind for key in KEYS}
    assert kinds == set(PARSERS)
    assert kinds >= EMPTY_IS_NONE


def test_every_key_has_a_default_and_a_meaning() -> None:
    names = [key.name for key in KEYS]
    assert len(names) == len(set(names))
    for key in KEYS:
        assert key.name.startswith("PGBUS_") and key.meaning
    settings = Settings.load(URLS)
    assert settings.queue == "pgbus"
    assert settings.stall_threshold == timedelta(minutes=5)
    assert settings.dashboard_prefix == "/pgbus"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("PGBUS_STALL_THRESHOLD", -5, "must be positive"),
        ("PGBUS_STEP_TIMEOUT", "soon", "number of seconds"),
        ("PGBUS_DATABASE_URL", "mysql://x/y", "postgresql:// URL"),
        ("PGBUS_REDIS_URL", "redis://:notaport/0", "has no host"),
        ("PGBUS_REDIS_URL", "redis://localhost:99999999/0", "bad port"),
        ("PGBUS_POOL_SIZE", 0, "at least 1"),
        ("PGBUS_DASHBOARD_PREFIX", "pgbus", "must start with '/'"),
        ("PGBUS_LOCALES", "en,xx", "shipped locales"),
        ("PGBUS_TIMEZONE", "Mars/Olympus", "not a known timezone"),
        ("PGBUS_DASHBOARD_AUTH", 42, "must be callable"),
        ("PGBUS_SUBJECT_URL", "no.such.module.func", "cannot import"),
        ("PGBUS_STALL_TRESHOLD", 5, "unknown setting"),
        ("PGBUS_LIVE_REFRESH", 0.5, "at least 1 second, or 0 for no live refresh"),
        ("PGBUS_LIVE_REFRESH", "often", "number of seconds"),
        ("PGBUS_LIVE_REFRESH", -5, "must be positive"),
    ],
)
def test_bad_values_fail_naming_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Settings.load({**URLS, key: value})
    assert str(info.value).startswith(key)


@pytest.mark.parametrize("off", [0, 0.0, "0", " 0 ", "", None, False, timedelta(0)])
def test_live_refresh_is_five_seconds_unless_turned_off(off: object) -> None:
    assert Settings.load(URLS).live_refresh == timedelta(seconds=5)
    assert Settings.load({**URLS, "PGBUS_LIVE_REFRESH": off}).live_refresh is None
    assert Settings.from_environ({**URLS, "PGBUS_LIVE_REFRESH": "2.5"}).live_refresh == timedelta(seconds=2.5)
    assert Settings.load({**URLS, "PGBUS_LIVE_REFRESH": timedelta(minutes=1)}).live_refresh == timedelta(minutes=1)


def test_pgbus_app_fails_at_start_up_on_a_bad_value() -> None:
    app = Flask("bad")
    app.config.update(URLS, PGBUS_SWEEP_INTERVAL=-1)
    with pytest.raises(ConfigError, match="PGBUS_SWEEP_INTERVAL"):
        PgBus(app)
    assert "pgbus" not in app.extensions


def test_missing_urls_are_named() -> None:
    app = Flask("nourl")
    with pytest.raises(ConfigError, match="PGBUS_DATABASE_URL is not set"):
        PgBus(app)


def test_environment_values_are_parsed() -> None:
    env = {**URLS, "PGBUS_STALL_THRESHOLD": "90", "PGBUS_IMPORT": "a.b, c", "PGBUS_DASHBOARD_PUBLIC": "true",
           "HOME": "/root"}
    settings = Settings.from_environ(env)
    assert settings.stall_threshold == timedelta(seconds=90)
    assert settings.imports == ("a.b", "c")
    assert settings.dashboard_public is True


def test_one_pgbus_serves_several_apps(pg_url: str, redis_url: str, clean: None) -> None:
    bus = PgBus()
    first, second = Flask("first"), Flask("second")
    for app, queue in ((first, "one"), (second, "two")):
        app.config.update(PGBUS_DATABASE_URL=pg_url, PGBUS_REDIS_URL=redis_url, PGBUS_QUEUE=queue)
        bus.init_app(app)
    with first.app_context():
        assert bus.engine.settings.queue == "one"
    with second.app_context():
        assert bus.engine.settings.queue == "two"
    assert first.extensions["pgbus"] is not second.extensions["pgbus"]
    for app in (first, second):
        app.extensions["pgbus"].close()
    from pgbus_flask import engine as engine_module

    engine_module._default = None


def test_keyword_settings_without_flask(pg_url: str, redis_url: str, clean: None) -> None:
    bus = PgBus(database_url=pg_url, redis_url=redis_url, queue="standalone")
    try:
        assert bus.engine.settings.queue == "standalone"
        with pytest.raises(ConfigError, match="PGBUS_NOPE"):
            PgBus(nope=1)
    finally:
        bus.close()
        from pgbus_flask import engine as engine_module

        engine_module._default = None


# -- secrets stay secret ---------------------------------------------------------------------

SECRET = "S3CRET"


@pytest.mark.parametrize(
    ("key", "value", "message", "shown"),
    [
        ("PGBUS_REDIS_URL", "redis://:S3CRET@h:port/0", "bad port", "redis://:***@h:port/0"),
        ("PGBUS_REDIS_URL", "http://:S3CRET@h:1/0", "redis://, rediss:// or unix://", "http://:***@h:1/0"),
        ("PGBUS_REDIS_URL", "redis://:S3CRET@:6379/0", "no host", "redis://:***@:6379/0"),
        ("PGBUS_REDIS_URL", "redis://:S3CRET@[::1/0", "not a valid URL", "redis://:***@[::1/0"),
        ("PGBUS_DATABASE_URL", "mysql://app:S3CRET@h/db", "postgresql:// URL", "mysql://app:***@h/db"),
        # libpq would read this as a keyword string and echo all of it in its own error
        ("PGBUS_DATABASE_URL", "postgresql:/app:S3CRET@h/db", "postgresql:// URL", "postgresql:***@h/db"),
        ("PGBUS_DATABASE_URL", "postgresql://app:S3CRET@[::1/db", "not a valid URL", "postgresql://app:***@[::1/db"),
        ("PGBUS_DATABASE_URL", "host=h user=app password=S3CRET", "postgresql:// URL",
         "host=h user=app password=***"),
    ],
)
def test_a_bad_url_is_named_without_its_password(key: str, value: str, message: str, shown: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as info:
        Settings.load({**URLS, key: value})
    assert str(info.value).startswith(key)
    assert SECRET not in str(info.value)
    assert shown in str(info.value)


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("redis://:S3CRET@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://default:S3CRET@cache.example:6380", "rediss://default:***@cache.example:6380"),
        ("unix://:S3CRET@/run/redis.sock?db=2", "unix://:***@/run/redis.sock?db=2"),
        ("postgresql://app:S3CRET@db.example:5432/orders", "postgresql://app:***@db.example:5432/orders"),
        ("postgresql://app:S3%40CRET@db/orders", "postgresql://app:***@db/orders"),
        ("postgresql://app:S3@CRET@db/orders", "postgresql://app:***@db/orders"),
        ("postgresql://app:S3/C?RET@db/orders", "postgresql://app:***@db/orders"),
        ("postgresql://app@corp:S3CRET@db/orders", "postgresql://app@corp:***@db/orders"),
        ("app:S3CRET@db/orders", "app:***@db/orders"),
        ("postgresql://db/orders?user=app&password=S3CRET&sslmode=require",
         "postgresql://db/orders?user=app&password=***&sslmode=require"),
        ("postgresql://app:S3CRET@db/orders?sslpassword=S3CRET",
         "postgresql://app:***@db/orders?sslpassword=***"),
        ("host=db user=app password=S3CRET dbname=orders", "host=db user=app password=*** dbname=orders"),
        ("host=db password = 'S3 CR\\'ET' dbname=orders", "host=db password = *** dbname=orders"),
        # nothing secret: unchanged
        ("postgresql://app@db:5432/orders", "postgresql://app@db:5432/orders"),
        ("postgresql:///orders?host=/run/postgresql", "postgresql:///orders?host=/run/postgresql"),
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("host=db dbname=orders", "host=db dbname=orders"),
        ("", ""),
    ],
)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


@given(st.text(min_size=1))
def test_redact_url_hides_any_password(password: str) -> None:
    secret = "Zq" + password + "Zq"
    for url in (f"redis://:{secret}@h:6379/0", f"postgresql://app:{secret}@db/orders",
                f"postgresql://db/orders?password={quote(secret)}", f"host=db password={secret}"):
        assert secret not in redact_url(url) and quote(secret) not in redact_url(url), url


def test_redact_finds_urls_inside_a_message() -> None:
    """Drivers echo the URL in some errors (libpq on a broken IPv6 host, for one)."""
    message = ('end of string reached when looking for matching "]" in IPv6 host address in URI: '
               '"postgresql://app:S3CRET@[::1/db"\n')
    assert redact(message) == ('end of string reached when looking for matching "]" in IPv6 host address in URI: '
                               '"postgresql://app:***@[::1/db"\n')
    assert redact("missing \"=\" after \"host=h password=S3CRET\" in connection info string") == (
        "missing \"=\" after \"host=h password=***\" in connection info string")
    assert redact("Error 111 connecting to 127.0.0.1:1. Connection refused.") == (
        "Error 111 connecting to 127.0.0.1:1. Connection refused.")


@pytest.mark.slow  # starts a process
def test_the_worker_prints_a_bad_url_without_its_password() -> None:
    """What a user sees: ``pgbus-worker`` refusing a bad ``PGBUS_REDIS_URL`` at start-up."""
    env = {**os.environ, "PGBUS_DATABASE_URL": "postgresql://app:S3CRET@127.0.0.1:1/db",
           "PGBUS_REDIS_URL": "redis://:S3CRET@h:port/0"}
    done = subprocess.run([sys.executable, "-m", "pgbus_flask.worker.cli", "--burst"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "PGBUS_REDIS_URL has a bad port: 'redis://:***@h:port/0'" in done.stderr
    assert SECRET not in done.stderr + done.stdout


def test_pgbus_log_lines_never_show_a_password(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    import pgbus_flask  # noqa: F401 - installs the filter

    caplog.set_level(logging.INFO)
    logging.getLogger("pgbus_flask").error("cannot reach %s", "redis://:S3CRET@cache:6379/0")
    try:
        raise RuntimeError("connect to postgresql://app:S3CRET@db/app failed")
    except RuntimeError:
        logging.getLogger("pgbus_flask.web").exception("page failed")
    assert "S3CRET" not in caplog.text
    assert "redis://:***@cache:6379/0" in caplog.text and "postgresql://app:***@db/app" in caplog.text


def test_a_connection_string_libpq_refuses_is_a_config_error_without_its_password() -> None:
    from pgbus_flask.db import Database

    with pytest.raises(ConfigError, match="PGBUS_DATABASE_URL") as refused:
        with Database("host=127.0.0.1 password=S3CRET bogus=1").connection():
            pass
    assert "S3CRET" not in str(refused.value)
