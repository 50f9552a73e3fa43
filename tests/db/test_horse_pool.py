"""The connections of a forking worker's horse (db.HorsePool) and how a process knows it is one."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from rq import Queue

from pgbus_flask import db
from pgbus_flask.engine import Engine
from tests.support import QuietWorker

#: What :func:`seen_by_the_job` saw, by job id.
SEEN: dict[str, Any] = {}


def seen_by_the_job(key: str) -> None:
    SEEN[key] = db.in_forked_horse()


def test_a_pool_of_connections_opened_when_asked_for_and_reused(pg_url: str) -> None:
    pool = db.HorsePool(pg_url, max_size=1, kwargs={"autocommit": True})
    try:
        assert pool.get_stats()["connections_num"] == 0  # nothing opened ahead
        with pool.connection() as first, pool.connection() as second:  # two at once: two connections
            assert first is not second
        assert pool.get_stats()["connections_num"] == 2 and pool.get_stats()["pool_available"] == 1  # max_size kept
        with pool.connection() as again:
            assert again in (first, second)
        assert pool.get_stats()["connections_num"] == 2
    finally:
        pool.close()
    assert first.closed and second.closed


def test_a_connection_given_back_inside_a_transaction_is_rolled_back(pg_url: str) -> None:
    pool = db.HorsePool(pg_url, max_size=2, kwargs={"autocommit": True})
    try:
        conn = pool.getconn()
        conn.execute("BEGIN")
        conn.execute("CREATE TEMP TABLE horse_left (x int)")
        pool.putconn(conn)
        with pool.connection() as same:
            assert same is conn and same.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert same.execute("SELECT to_regclass('pg_temp.horse_left')").fetchone() == (None,)
        conn.close()  # the server side going away: a closed connection is never handed out again
        pool.putconn(conn)
        with pool.connection() as fresh:
            assert fresh is not conn and not fresh.closed
    finally:
        pool.close()


def test_a_bad_url_names_the_setting(pg_url: str) -> None:
    pool = db.HorsePool("host=127.0.0.1 port=notaport bad", max_size=1, kwargs={})
    with pytest.raises(Exception, match="PGBUS_DATABASE_URL"):
        pool.getconn()


def test_only_the_job_a_forking_worker_forked_for_counts_as_a_horse(engine: Engine,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """RQ_JOB_ID is what RQ's forking workers set for the horse's job (in the parent too, which runs no job)."""
    queue = Queue("horse_check", connection=engine.redis)
    for job_id in ("the-horses-job", "another-job"):
        queue.enqueue(seen_by_the_job, job_id, job_id=job_id)
    assert not db.in_forked_horse()  # no job here
    monkeypatch.setenv("RQ_JOB_ID", "the-horses-job")
    assert not db.in_forked_horse()  # the variable alone (a forking worker's parent) is not enough
    QuietWorker([queue], connection=engine.redis).work(burst=True, logging_level="WARNING")
    assert SEEN == {"the-horses-job": True, "another-job": False}
