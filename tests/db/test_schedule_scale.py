"""The sweep's schedule part costs what is due, not what is stored: measured with 100,000 finished
runs (half of them earlier ticks of the schedule itself) and printed (``pytest -s``), never asserted
against a clock. What is asserted is the shape: the part reads the schedules table and writes
through the idempotency index, never scanning the runs."""

from __future__ import annotations

import json
import statistics
import time
from datetime import timedelta
from typing import Any

import pytest

from pgbus_flask import schedules
from pgbus_flask.engine import Engine
from pgbus_flask.sql import statement
from pgbus_flask.sweep import sweep
from tests.support.schedule_helpers import Declare

RUNS = 100_000
SEED = f"""
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             idempotency_key, updated_at, finished_at)
SELECT md5('run' || i)::uuid, CASE WHEN i % 2 = 0 THEN 'Ticking' ELSE 'Other' END, 'finished', 'record', 'x',
       'schedule', CASE WHEN i % 2 = 0 THEN 'schedule:Ticking:' || to_char(timestamptz '2020-01-01 00:00+00'
       + i * interval '1 minute', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"') END, now(), now()
FROM generate_series(1, {RUNS}) AS i;
ANALYZE pgbus_workflows;
"""


def median_ms(action: Any, repeat: int = 15) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def measure(engine: Engine) -> tuple[float, float]:
    """Median ms of the schedule part with nothing due, and with one tick due (a run started)."""
    idle = median_ms(lambda: schedules.sweep_part(engine))
    due: list[float] = []
    for _ in range(15):
        with engine.db.connection() as conn:
            conn.execute("UPDATE pgbus_schedules SET next_tick = next_tick - interval '1 minute'"
                         " WHERE workflow_class = 'Ticking'")
        began = time.perf_counter()
        assert schedules.sweep_part(engine).started == 1
        due.append((time.perf_counter() - began) * 1000)
        with engine.db.connection() as conn:  # the same tick is due again next round: a new run each time
            conn.execute("DELETE FROM pgbus_workflows WHERE workflow_id = (SELECT last_run_id FROM pgbus_schedules"
                         " WHERE workflow_class = 'Ticking')")
    return idle, statistics.median(due)


@pytest.mark.scale  # 100,000 runs
def test_the_schedule_part_with_100000_finished_runs(engine: Engine, declare: Declare) -> None:
    declare("Ticking", timedelta(minutes=1))
    sweep(engine)  # stores the schedule
    empty = measure(engine)
    with engine.db.connection() as conn:
        conn.execute(SEED.encode())
    full = measure(engine)
    print(f"\nschedule part, medians of 15: nothing due {empty[0]:.2f} ms with no runs, {full[0]:.2f} ms with"
          f" {RUNS:,} finished runs; one tick due (its run started) {empty[1]:.2f} ms / {full[1]:.2f} ms")

    with engine.db.connection() as conn:
        plan = conn.execute(("EXPLAIN (FORMAT JSON) " + statement("schedules_due")).encode(),
                            (schedules.DUE_LIMIT,)).fetchone()
    assert plan is not None
    text = json.dumps(plan[0])
    assert "pgbus_workflows" not in text and "pgbus_schedules" in text, text
