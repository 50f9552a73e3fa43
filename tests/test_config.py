"""Settings: defaults, checks that name the key, several apps at once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from flask import Flask

from pgbus_flask import ConfigError, PgBus
from pgbus_flask.config import KEYS, Settings

URLS = {"PGBUS_DATABASE_URL": "postgresql://u@localhost/db", "PGBUS_REDIS_URL": "redis://localhost:6379/0"}


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
    ],
)
def test_bad_values_fail_naming_the_key(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Settings.load({**URLS, key: value})
    assert str(info.value).startswith(key)


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
