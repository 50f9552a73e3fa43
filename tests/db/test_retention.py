"""Retention per status: PGBUS_RETENTION_FINISHED and PGBUS_RETENTION_CANCELLED (PGBUS_RETENTION the
default of both, "forever" or None keeping the runs). The sweep deletes exactly the finished and
cancelled runs older than their status's retention, with their steps, audit trail, signals, fan-out
batches and children; every other row stays as it was, paused runs (failed ones among them) whatever
their age."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from pgbus_flask import ConfigError, queries
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.sweep import sweep
from tests.child_workflows import Fulfilment
from tests.support import work
from tests.workflows import CancelsOnError, FailsUntil, FansOut, ThreeSteps, WaitsForever, WaitsForPayment

URLS = {"PGBUS_DATABASE_URL": "postgresql://u@localhost/db", "PGBUS_REDIS_URL": "redis://localhost:6379/0"}
HOUR, DAY = 3600, 86400

#: Every table that holds a run's rows, and how a row finds its run.
TABLES = {
    "pgbus_workflows": "workflow_id",
    "pgbus_workflow_steps": "workflow_id",
    "pgbus_workflow_events": "workflow_id",
    "pgbus_workflow_signals": "workflow_id",
    "pgbus_batches": "workflow_id",
    "pgbus_batch_children": "(SELECT workflow_id FROM pgbus_batches b WHERE b.id = batch_id)",
}


def set_age(engine: Engine, run_ids: list[UUID], seconds: int) -> None:
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflows SET updated_at = now() - make_interval(secs => %s)"
                     " WHERE workflow_id = ANY(%s)", (seconds, run_ids))


def seed_runs(engine: Engine) -> dict[str, list[UUID]]:
    """Runs of every status, each group given an age (since its last change)."""
    paid = WaitsForPayment.start()
    work(engine)
    paid.signal("payment_confirmed", {"amount": 5})
    fans = FansOut.start(n=3)
    family = Fulfilment.start(parcels=[1, 2])
    young = ThreeSteps.start(order_id=1)
    doomed = CancelsOnError.start()
    by_person, young_cancelled = ThreeSteps.start(order_id=2), ThreeSteps.start(order_id=3)
    failed, waiting = FailsUntil.start(fail_until=99), WaitsForever.start()
    by_person.cancel(actor="ops", reason="duplicate order")
    young_cancelled.cancel(actor="ops")
    while work(engine):  # the children's ends wake their parent
        pass
    with engine.db.connection() as conn:
        children = [r[0] for r in conn.execute("SELECT workflow_id FROM pgbus_workflows WHERE parent_workflow_id = %s",
                                               (family.workflow_id,)).fetchall()]
    assert len(children) == 2
    runs = {
        "finished_2d": [paid.workflow_id, family.workflow_id, *children],
        "finished_2h": [fans.workflow_id],
        "finished_30m": [young.workflow_id],
        "cancelled_2d": [doomed.workflow_id],
        "cancelled_2h": [by_person.workflow_id],
        "cancelled_30m": [young_cancelled.workflow_id],
        "paused_400d": [failed.workflow_id],
        "waiting_400d": [waiting.workflow_id],
    }
    ages = {"2d": 2 * DAY, "2h": 2 * HOUR, "30m": 1800, "400d": 400 * DAY}
    statuses = {run.workflow_id: run for run in (paid, fans, family, young, doomed, by_person, young_cancelled,
                                                 failed, waiting)}
    for group, ids in runs.items():
        status, age = group.split("_")
        for run_id in ids:
            if run_id in statuses:
                statuses[run_id].refresh()
                assert statuses[run_id].status == status, (group, statuses[run_id].status)
        set_age(engine, ids, ages[age])
    return runs


def rows_by_run(engine: Engine) -> dict[str, dict[UUID, list[tuple[Any, ...]]]]:
    """Every row of every run table, by the run it belongs to."""
    found: dict[str, dict[UUID, list[tuple[Any, ...]]]] = {}
    with engine.db.connection() as conn:
        for table, run_of in TABLES.items():
            found[table] = {}
            for row in conn.execute(f"SELECT {run_of}, t.* FROM {table} t ORDER BY 2, 3").fetchall():
                found[table].setdefault(row[0], []).append(tuple(row[1:]))
    return found


KEEP_FINISHED_1H = ("finished_2d", "finished_2h", "cancelled_2d", "cancelled_2h")


@pytest.mark.parametrize(
    "deleted",
    [
        pytest.param(KEEP_FINISHED_1H, marks=pytest.mark.settings(PGBUS_RETENTION=HOUR), id="retention-for-both"),
        pytest.param(("finished_2d", "finished_2h", "cancelled_2d"),
                     marks=pytest.mark.settings(PGBUS_RETENTION_FINISHED=HOUR, PGBUS_RETENTION_CANCELLED=DAY),
                     id="each-its-own"),
        pytest.param(("finished_2d", "finished_2h"),
                     marks=pytest.mark.settings(PGBUS_RETENTION=HOUR, PGBUS_RETENTION_CANCELLED="forever"),
                     id="cancelled-forever"),
        pytest.param(("cancelled_2d", "cancelled_2h"),
                     marks=pytest.mark.settings(PGBUS_RETENTION=HOUR, PGBUS_RETENTION_FINISHED=None),
                     id="finished-none"),
        pytest.param(("finished_2d",),
                     marks=pytest.mark.settings(PGBUS_RETENTION=None, PGBUS_RETENTION_FINISHED=timedelta(days=1)),
                     id="only-finished"),
        pytest.param((), marks=pytest.mark.settings(PGBUS_RETENTION="forever"), id="forever"),
        pytest.param((), id="default-30-days"),
    ],
)
def test_the_sweep_deletes_exactly_the_runs_past_their_status_retention(engine: Engine,
                                                                        deleted: tuple[str, ...]) -> None:
    runs = seed_runs(engine)
    gone = {run_id for group in deleted for run_id in runs[group]}
    before = rows_by_run(engine)
    for table in ("pgbus_workflow_steps", "pgbus_workflow_events"):  # every run has some of these
        assert set(before[table]) == {run_id for ids in runs.values() for run_id in ids}
    assert runs["finished_2d"][0] in before["pgbus_workflow_signals"]
    assert runs["finished_2h"][0] in before["pgbus_batch_children"]

    report = sweep(engine)

    assert report.errors == [] and report.deleted_runs == len(gone)
    after = rows_by_run(engine)
    for table, rows in before.items():
        kept = {run_id: run_rows for run_id, run_rows in rows.items() if run_id not in gone}
        assert after[table] == kept, table  # the deleted runs' rows went, and no other row changed
    with engine.db.connection() as conn:
        by_status = conn.execute("SELECT workflow_class, status, count(*) FROM pgbus_workflows GROUP BY 1, 2")
        assert queries.status_counts(engine) == {(r[0], r[1]): r[2] for r in by_status.fetchall()}
    assert sweep(engine).deleted_runs == 0


@pytest.mark.settings(PGBUS_RETENTION=HOUR)
def test_each_status_is_deleted_a_batch_at_a_time_until_none_is_left(engine: Engine,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """More old runs than one sweep deletes: the rest go in the next sweeps, the oldest first."""
    from pgbus_flask import sweep as sweep_module

    monkeypatch.setattr(sweep_module, "DELETE_BATCH", 2)
    monkeypatch.setattr(sweep_module, "DELETE_ROUNDS", 2)
    finished = [ThreeSteps.start(order_id=i) for i in range(6)]
    work(engine)
    cancelled = [ThreeSteps.start(order_id=i) for i in range(5)]
    for run in cancelled:
        run.cancel(actor="ops")
    for age, run in enumerate(finished + cancelled):
        set_age(engine, [run.workflow_id], 2 * HOUR + age * 60)
    assert [sweep(engine).deleted_runs for _ in range(3)] == [8, 3, 0]
    with engine.db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM pgbus_workflows").fetchone()[0] == 0  # type: ignore[index]


@pytest.mark.parametrize(
    ("values", "finished", "cancelled"),
    [
        ({}, timedelta(days=30), timedelta(days=30)),
        ({"PGBUS_RETENTION": 60}, timedelta(minutes=1), timedelta(minutes=1)),
        ({"PGBUS_RETENTION": None}, None, None),
        ({"PGBUS_RETENTION": "Forever"}, None, None),
        ({"PGBUS_RETENTION_FINISHED": "86400"}, timedelta(days=1), timedelta(days=30)),
        ({"PGBUS_RETENTION": "", "PGBUS_RETENTION_CANCELLED": timedelta(days=90)}, None, timedelta(days=90)),
        ({"PGBUS_RETENTION_CANCELLED": "forever", "PGBUS_RETENTION_FINISHED": 7}, timedelta(seconds=7), None),
        ({"PGBUS_RETENTION": 60, "PGBUS_RETENTION_CANCELLED": "PGBUS_RETENTION"}, timedelta(minutes=1),
         timedelta(minutes=1)),
    ],
)
def test_how_the_three_settings_combine(values: dict[str, Any], finished: timedelta | None,
                                        cancelled: timedelta | None) -> None:
    settings = Settings.load({**URLS, **values})
    assert (settings.retention_finished, settings.retention_cancelled) == (finished, cancelled)
    environ = {**URLS, **{k: "" if v is None else str(v.total_seconds()) if isinstance(v, timedelta) else str(v)
                          for k, v in values.items()}}
    from_env = Settings.from_environ(environ)
    assert (from_env.retention_finished, from_env.retention_cancelled) == (finished, cancelled)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("PGBUS_RETENTION_FINISHED", "30d", "a number of seconds, a timedelta, 'forever' or None"),
        ("PGBUS_RETENTION_CANCELLED", "never", "'PGBUS_RETENTION' \\(its default"),
        ("PGBUS_RETENTION_CANCELLED", 0, "must be positive"),
        ("PGBUS_RETENTION_FINISHED", timedelta(days=-1), "must be positive"),
        ("PGBUS_RETENTION_FINISHED", True, "must be a duration"),
        ("PGBUS_RETENTION", "PGBUS_RETENTION", "a number of seconds, a timedelta, 'forever' or None"),
        ("PGBUS_RETENTION", "-5", "must be positive"),
    ],
)
def test_a_bad_retention_fails_naming_its_setting(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        Settings.load({**URLS, key: value})
    assert str(info.value).startswith(key)
