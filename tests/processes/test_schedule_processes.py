"""Two real ``pgbus-worker`` processes sweeping every 0.2 s at once, a schedule ticking every
second: every tick in the window has exactly one run, with no gap, and each run finishes."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pgbus_flask import schedules
from pgbus_flask.definition import REGISTRY
from pgbus_flask.engine import Engine
from pgbus_flask.testing import wait_until
from tests.support import procs

pytestmark = pytest.mark.slow
NAME = "EverySecond"


def rows(engine: Engine, query: str, *params: object) -> list[tuple]:
    with engine.db.connection() as conn:
        return conn.execute(query.encode(), params).fetchall()


def test_two_workers_sweeping_at_once_start_every_tick_once(engine: Engine, pg_url: str, redis_url: str,
                                                            tmp_path: Path) -> None:
    assert NAME not in REGISTRY, "only the workers declare it"
    env = {"PGBUS_SWEEP_INTERVAL": "0.2", "PGBUS_IMPORT": "tests.schedule_proc_workflows"}
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=("--no-scheduler",), env=env) as ws:
        stored = wait_until(lambda: rows(engine, "SELECT created_at FROM pgbus_schedules WHERE workflow_class = %s",
                                         NAME), timeout=30, message="a worker's sweep stored the schedule")
        appeared = stored[0][0]
        wait_until(lambda: rows(engine, "SELECT count(*) FROM pgbus_workflows WHERE workflow_class = %s"
                                        " AND status = 'finished'", NAME)[0][0] >= 8,
                   timeout=60, message=f"eight ticks' runs finished\n{procs.describe(ws)}")
        schedules.pause(engine, NAME, "cli:test", "end of the window")
        window_end = rows(engine, "SELECT now()")[0][0]
        wait_until(lambda: rows(engine, "SELECT count(*) FROM pgbus_workflows WHERE workflow_class = %s"
                                        " AND status <> 'finished'", NAME)[0][0] == 0,
                   timeout=60, message=f"every run finished\n{procs.describe(ws)}")
        assert all(w.alive() for w in ws), procs.describe(ws)

    runs = rows(engine, "SELECT idempotency_key, count(*) FROM pgbus_workflows WHERE workflow_class = %s"
                        " GROUP BY 1 ORDER BY 1", NAME)
    assert all(n == 1 for _, n in runs), f"a tick started twice: {runs}"
    ticks = [datetime.fromisoformat(key.split(":", 2)[2]) for key, _ in runs]
    print(f"\n{len(ticks)} ticks from {ticks[0]:%H:%M:%S} to {ticks[-1]:%H:%M:%S}; schedule stored at {appeared}")
    # The first tick is the first whole second after the sweep that stored the schedule: none before it.
    assert ticks[0] == appeared.replace(microsecond=0) + timedelta(seconds=1), (ticks[0], appeared)
    assert ticks == [ticks[0] + timedelta(seconds=i) for i in range(len(ticks))], "no gap, no duplicate"
    assert ticks[-1] <= window_end
    outputs = rows(engine, "SELECT w.idempotency_key, s.output FROM pgbus_workflows w JOIN pgbus_workflow_steps s"
                           " USING (workflow_id) WHERE w.workflow_class = %s AND s.status = 'completed'", NAME)
    assert len(outputs) == len(ticks)
    for key, output in outputs:
        assert output["source"] == "process test" and key.endswith(output["tick"]["v"]), output
    [(last_tick, next_tick)] = rows(engine, "SELECT last_tick, next_tick FROM pgbus_schedules"
                                            " WHERE workflow_class = %s", NAME)
    assert last_tick == ticks[-1] and next_tick == last_tick + timedelta(seconds=1)
