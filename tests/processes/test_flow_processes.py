"""Flow control with real ``pgbus-worker`` processes (docs/flow-control.md): workers SIGKILLed while
their runs hold slots leak none, strand no run and never let a limit be exceeded.

The workers run their own sweep every second (a killed worker's attempt is declared stalled after its
3-second timeout, in the transaction that gives its slot back). Every wait has a deadline.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pgbus_flask.engine import Engine
from pgbus_flask.testing import wait_until
from tests.flow_workflows import ChaosTenant
from tests.support import procs
from tests.support.procs import rows, scalar

pytestmark = pytest.mark.slow

ENV = {"PGBUS_IMPORT": procs.IMPORTS + ",tests.flow_workflows", "PGBUS_SWEEP_INTERVAL": "1",
       "PGBUS_STALL_THRESHOLD": "2"}


def most_at_once(intervals: list[tuple[datetime, datetime]]) -> int:
    """The most intervals that overlap at one moment."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
                   key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, change in edges:
        now += change
        most = max(most, now)
    return most


def leaked_slots(engine: Engine) -> list[Any]:
    return rows(engine, """
        SELECT t.limit_name, t.limit_key, t.slot::text FROM pgbus_limit_slots t
        LEFT JOIN pgbus_workflows w ON w.workflow_id = t.holder_run
        WHERE t.holder_run IS NOT NULL AND (w.workflow_id IS NULL OR w.status NOT IN ('ready', 'running'))
        UNION ALL SELECT 'run', workflow_class, workflow_id::text FROM pgbus_workflows w
        WHERE holds_slot AND NOT EXISTS (SELECT 1 FROM pgbus_limit_slots t WHERE t.holder_run = w.workflow_id)""")


def test_workers_killed_while_holding_slots_leak_none_and_never_exceed_the_limit(
        engine: Engine, pg_url: str, redis_url: str, tmp_path: Path) -> None:
    tenants = ["t1", "t2", "t3", "t4"]
    runs = [ChaosTenant.start(tenant=tenants[i % 4], seconds=0.3, bus=engine) for i in range(64)]
    killed = 0
    with procs.workers(pg_url, redis_url, tmp_path, 3, args=("--no-scheduler",), env=ENV) as ws:
        pool = list(ws)

        def finished() -> int:
            return int(scalar(engine, "SELECT count(*) FROM pgbus_workflows WHERE workflow_class = 'ChaosTenant'"
                                      " AND status = 'finished'"))

        for _ in range(4):  # kill a worker that holds a slot, start another in its place
            before = finished()

            def holder() -> Any:
                """A live worker with an attempt in progress (a killed one's stays in progress a while)."""
                pids = {int(r["worker"].rsplit(":", 1)[1]) for r in rows(
                    engine, "SELECT worker FROM pgbus_workflow_steps WHERE status = 'in_progress'")}
                return next((w for w in pool if w.pid in pids and w.alive()), None)

            victim = wait_until(holder, timeout=30, message="a live worker with an attempt in progress")
            victim.kill()
            killed += 1
            pool.remove(victim)
            pool.append(procs.start_worker(pg_url, redis_url, tmp_path, args=("--no-scheduler",), env=ENV))
            ws.append(pool[-1])
            wait_until(lambda before=before: finished() > before, timeout=60,
                       message="runs finish again after a kill")
        wait_until(lambda: finished() == len(runs), timeout=180, interval=0.5,
                   message="every run finished after the kills")
    assert killed == 4
    assert leaked_slots(engine) == []
    assert scalar(engine, "SELECT count(*) FROM pgbus_limit_slots WHERE holder_run IS NOT NULL") == 0
    stalled = scalar(engine, "SELECT count(*) FROM pgbus_workflow_steps WHERE error_class LIKE '%%StepStalled'")
    assert stalled >= 1  # the kills did land in a step
    by_tenant: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    for row in rows(engine, """
            SELECT w.limit_key, s.started_at, s.finished_at FROM pgbus_workflow_steps s
            JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id
            WHERE w.workflow_class = 'ChaosTenant' AND s.started_at IS NOT NULL"""):
        by_tenant[row["limit_key"]].append((row["started_at"], row["finished_at"]))
    assert {t: most_at_once(v) <= 2 for t, v in by_tenant.items()} == {t: True for t in tenants}, {
        t: most_at_once(v) for t, v in by_tenant.items()}
    assert len(runs) == 64
