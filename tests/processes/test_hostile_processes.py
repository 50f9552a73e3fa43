"""Outcomes holding NUL and lone surrogates through a real ``pgbus-worker --burst``
process: each outcome recorded, the next step runs, and the worker keeps serving the
rest of its queue (RQ used to crash saving such a failure and leave the queue unrun)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgbus_flask.engine import Engine
from pgbus_flask.testing import wait_until
from tests.proc_workflows import HostileOutcome
from tests.support import procs
from tests.support.hostile import CASES, TEXTS, assert_outcome_kept
from tests.workflows import FiveNoop

pytestmark = pytest.mark.slow


def burst(pg_url: str, redis_url: str, log_dir: Path) -> procs.WorkerProc:
    """One ``pgbus-worker --burst`` run to its end."""
    worker = procs.start_worker(pg_url, redis_url, log_dir, args=("--no-sweep", "--no-scheduler", "--burst"))
    try:
        wait_until(lambda: not worker.alive(), timeout=90, interval=0.1, message="the burst worker exits")
    finally:
        worker.stop()
    return worker


def test_hostile_outcomes_through_a_real_worker(engine: Engine, pg_url: str, redis_url: str,
                                                tmp_path: Path) -> None:
    runs = {(case, name): HostileOutcome.start(text=text, case=case)
            for name, text in TEXTS.items() for case in CASES}
    last = FiveNoop.start()  # queued behind every hostile step

    worker = burst(pg_url, redis_url, tmp_path)
    assert worker.proc.returncode == 0, worker.output()
    assert "unhandled exception" not in worker.output()
    last.refresh()
    assert last.status == "finished", worker.output()

    for (case, _name), run in runs.items():
        run.refresh()
        if case == "pause":
            assert run.status == "paused", (case, run.status, worker.output())
            run.resume(actor="test:procs")
    worker = burst(pg_url, redis_url, tmp_path)
    assert worker.proc.returncode == 0, worker.output()
    for (case, name), run in runs.items():
        assert_outcome_kept(run, case, TEXTS[name])
