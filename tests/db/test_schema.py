"""Migrations: from zero they give exactly schema.sql; twice, or concurrently, is safe."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from click.testing import Result
from flask import Flask

from pgbus_flask.migrate import apply, migrations, schema_sql
from pgbus_flask.testing import fresh_database
from tests.support.schema import catalog


def test_migrating_from_zero_gives_schema_sql(server_url: str) -> None:
    from_file = fresh_database(server_url, "pgbus_schema_file")
    from_migrations = fresh_database(server_url, "pgbus_schema_migrated")
    with psycopg.connect(from_file, autocommit=True) as conn:
        conn.execute(schema_sql().encode())
    with psycopg.connect(from_migrations, autocommit=True) as conn:
        assert apply(conn) == [version for version, _ in migrations()]
    expected, actual = catalog(from_file), catalog(from_migrations)
    assert actual == expected
    assert len(expected["indexes"]) >= 15


def test_migrate_twice_and_concurrently(server_url: str) -> None:
    url = fresh_database(server_url, "pgbus_schema_twice")
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def migrate_once() -> None:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                results.append(apply(conn))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=migrate_once) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sorted(len(r) for r in results) == [0, 0, 0, len(migrations())]
    before = catalog(url)
    with psycopg.connect(url, autocommit=True) as conn:
        assert apply(conn) == []
    assert catalog(url) == before


@contextmanager
def app_on_new_database(server_url: str, redis_url: str, name: str) -> Iterator[tuple[Flask, str]]:
    """A testing app with PgBus on a fresh, unmigrated database."""
    from pgbus_flask import PgBus
    from pgbus_flask import engine as engine_module

    url = fresh_database(server_url, name)
    app = Flask(name)
    app.config.update(PGBUS_DATABASE_URL=url, PGBUS_REDIS_URL=redis_url, TESTING=True)
    PgBus(app)
    try:
        yield app, url
    finally:
        app.extensions["pgbus"].close()
        engine_module._default = None


def test_flask_pgbus_migrate_twice(server_url: str, redis_url: str) -> None:
    with app_on_new_database(server_url, redis_url, "pgbus_schema_cli") as (app, url):
        runner = app.test_cli_runner()
        first: Result = runner.invoke(args=["pgbus", "migrate"])
        assert first.exit_code == 0, first.output
        assert "applied: 0001_initial" in first.output
        before = catalog(url)
        second = runner.invoke(args=["pgbus", "migrate"])
        assert second.exit_code == 0, second.output
        assert "schema is up to date" in second.output
        assert catalog(url) == before


def test_an_unmigrated_database_gets_a_clear_error_everywhere(server_url: str, redis_url: str) -> None:
    from pgbus_flask import SchemaMissing
    from tests.workflows import ThreeSteps

    with app_on_new_database(server_url, redis_url, "pgbus_schema_missing") as (app, _url):
        with app.app_context(), pytest.raises(SchemaMissing, match="run `flask pgbus migrate`"):
            ThreeSteps.start(order_id=1)
        result = app.test_cli_runner().invoke(args=["pgbus", "runs"])
        assert result.exit_code == 1 and "flask pgbus migrate" in result.output
        page = app.test_client().get("/pgbus/?locale=de")
        assert page.status_code == 503
        assert "Die pgbus-Tabellen fehlen" in page.get_data(as_text=True)
