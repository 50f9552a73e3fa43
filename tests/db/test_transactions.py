"""bus.transaction(): after-commit callbacks, savepoints, app-owned connections."""

from __future__ import annotations

import logging

import psycopg
import pytest

from pgbus_flask import PgbusError
from pgbus_flask.engine import Engine


def count(engine: Engine) -> int:
    with engine.db.connection() as conn:
        return conn.execute("SELECT count(*) FROM tx_probe").fetchone()[0]  # type: ignore[index]


@pytest.fixture
def probe(engine: Engine) -> Engine:
    with engine.db.connection() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS tx_probe (n int)")
        conn.execute("TRUNCATE tx_probe")
    return engine


def test_commit_fires_callbacks_once_after_commit_in_order(probe: Engine) -> None:
    seen: list[tuple[str, int]] = []
    with probe.db.transaction() as tx:
        tx.execute("INSERT INTO tx_probe VALUES (1)")
        # Each callback records how many rows another connection sees: 1 means after commit.
        tx.after_commit(lambda: seen.append(("first", count(probe))))
        tx.after_commit(lambda: seen.append(("second", count(probe))))
        assert seen == []
    assert seen == [("first", 1), ("second", 1)]


def test_rollback_fires_no_callback(probe: Engine) -> None:
    seen: list[str] = []
    with pytest.raises(RuntimeError), probe.db.transaction() as tx:
        tx.execute("INSERT INTO tx_probe VALUES (1)")
        tx.after_commit(lambda: seen.append("fired"))
        raise RuntimeError("boom")
    assert seen == []
    assert count(probe) == 0


def test_nested_rollback_drops_only_its_own_callbacks(probe: Engine) -> None:
    seen: list[str] = []
    with probe.db.transaction() as outer:
        outer.execute("INSERT INTO tx_probe VALUES (1)")
        outer.after_commit(lambda: seen.append("outer"))
        with pytest.raises(ValueError), probe.db.transaction() as inner:
            assert inner.conn is outer.conn
            inner.execute("INSERT INTO tx_probe VALUES (2)")
            inner.after_commit(lambda: seen.append("inner rolled back"))
            raise ValueError("inner fails")
        with probe.db.transaction() as kept:
            kept.execute("INSERT INTO tx_probe VALUES (3)")
            kept.after_commit(lambda: seen.append("inner kept"))
        assert seen == []  # nothing fires at a savepoint release
    assert seen == ["outer", "inner kept"]
    with probe.db.connection() as conn:
        assert [r[0] for r in conn.execute("SELECT n FROM tx_probe ORDER BY n")] == [1, 3]


@pytest.mark.parametrize("pipeline", [False, True])
def test_psycopg_rollback_rolls_back_quietly_and_fires_no_callback(probe: Engine, pipeline: bool) -> None:
    """``raise psycopg.Rollback`` ends a block as psycopg's own blocks do: rolled back, no error, and
    nothing sent as if it had committed (a rolled-back cancel once sent its after-commit work)."""
    seen: list[str] = []
    with probe.db.transaction(pipeline=pipeline) as tx:
        tx.execute("INSERT INTO tx_probe VALUES (1)")
        tx.after_commit(lambda: seen.append("fired"))
        raise psycopg.Rollback
    assert seen == [] and count(probe) == 0
    with probe.db.transaction() as outer:
        outer.execute("INSERT INTO tx_probe VALUES (2)")
        outer.after_commit(lambda: seen.append("outer"))
        with probe.db.transaction() as inner:
            inner.execute("INSERT INTO tx_probe VALUES (3)")
            inner.after_commit(lambda: seen.append("inner rolled back"))
            raise psycopg.Rollback
    assert seen == ["outer"]
    with probe.db.connection() as conn:
        assert [r[0] for r in conn.execute("SELECT n FROM tx_probe ORDER BY n")] == [2]


def test_app_owned_connection_commit_decides(probe: Engine, pg_url: str) -> None:
    seen: list[int] = []
    with psycopg.connect(pg_url) as app_conn:
        with probe.db.transaction(conn=app_conn) as tx:
            assert tx.conn is app_conn
            app_conn.execute("INSERT INTO tx_probe VALUES (1)")
            with probe.db.transaction() as nested:  # library code joins the app's transaction
                assert nested.conn is app_conn
                nested.after_commit(lambda: seen.append(count(probe)))
            assert count(probe) == 0  # not committed yet: another connection sees nothing
        assert seen == [1]
        with pytest.raises(KeyError), probe.db.transaction(conn=app_conn) as tx:
            app_conn.execute("INSERT INTO tx_probe VALUES (2)")
            tx.after_commit(lambda: seen.append(-1))
            raise KeyError("the app's own code fails")
    assert seen == [1]
    assert count(probe) == 1


def test_app_connection_already_in_a_transaction_is_refused(probe: Engine, pg_url: str) -> None:
    with psycopg.connect(pg_url) as app_conn:
        app_conn.execute("SELECT 1")  # a non-autocommit connection is now inside a transaction
        with pytest.raises(PgbusError, match="already inside a transaction"), probe.db.transaction(conn=app_conn):
            pass


def test_a_failing_callback_is_logged_and_the_rest_still_run(probe: Engine, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def broken() -> None:
        raise ZeroDivisionError("callback bug")

    with caplog.at_level(logging.ERROR, logger="pgbus_flask"), probe.db.transaction() as tx:
        tx.after_commit(lambda: seen.append("before"))
        tx.after_commit(broken)
        tx.after_commit(lambda: seen.append("after"))
    assert seen == ["before", "after"]
    assert "callback bug" in caplog.text
