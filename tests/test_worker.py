"""The worker commands, as real processes: pgbus-worker (env or --app) and plain `rq worker`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pgbus_flask.engine import Engine

from .conftest import ROOT
from .workflows import ThreeSteps


def env(pg_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_")}
    base.update(PYTHONPATH=ROOT, **extra)
    return base


def run_cmd(args: list[str], environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=environ, cwd=ROOT, capture_output=True, text=True, timeout=120)


def bin_path(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


@pytest.mark.slow
def test_pgbus_worker_from_environment_burst(engine: Engine, pg_url: str, redis_url: str) -> None:
    runs = [ThreeSteps.start(order_id=i) for i in range(3)]
    done = run_cmd([bin_path("pgbus-worker"), "--burst", "--no-scheduler", "--no-sweep"],
                   env(pg_url, redis_url, PGBUS_DATABASE_URL=pg_url, PGBUS_REDIS_URL=redis_url,
                       PGBUS_IMPORT="tests.workflows"))
    assert done.returncode == 0, done.stderr
    assert {r.refresh().status for r in runs} == {"finished"}
    assert all(not s["worker"].endswith(f":{os.getpid()}") for s in runs[0].steps())  # another process ran them


@pytest.mark.slow
def test_pgbus_worker_with_app_factory(engine: Engine, pg_url: str, redis_url: str) -> None:
    run = ThreeSteps.start(order_id=1)
    done = run_cmd([bin_path("pgbus-worker"), "--app", "tests.app_factory:create_app", "--burst",
                    "--no-scheduler"],
                   env(pg_url, redis_url, TEST_APP_DATABASE_URL=pg_url, TEST_APP_REDIS_URL=redis_url))
    assert done.returncode == 0, done.stderr
    assert run.refresh().status == "finished"


@pytest.mark.slow
def test_plain_rq_worker_with_the_project_worker_class(engine: Engine, pg_url: str, redis_url: str) -> None:
    run = ThreeSteps.start(order_id=1)
    done = run_cmd([bin_path("rq"), "worker", "-w", "pgbus_flask.worker.runner.PgbusWorker", "--burst",
                    "--url", redis_url, engine.settings.queue],
                   env(pg_url, redis_url, PGBUS_DATABASE_URL=pg_url, PGBUS_REDIS_URL=redis_url,
                       PGBUS_IMPORT="tests.workflows"))
    assert done.returncode == 0, done.stderr
    assert run.refresh().status == "finished"


def test_pgbus_worker_without_urls_says_which_is_missing(pg_url: str, redis_url: str) -> None:
    done = run_cmd([bin_path("pgbus-worker"), "--burst"], env(pg_url, redis_url))
    assert done.returncode == 2
    assert "PGBUS_DATABASE_URL is not set" in done.stderr


def test_pgbus_worker_with_a_bad_app_says_so(pg_url: str, redis_url: str) -> None:
    done = run_cmd([bin_path("pgbus-worker"), "--app", "tests.workflows", "--burst"], env(pg_url, redis_url))
    assert done.returncode == 2
    assert "has neither 'app' nor 'create_app'" in done.stderr


@pytest.mark.slow
def test_idle_pgbus_worker_stops_on_sigterm(engine: Engine, pg_url: str, redis_url: str) -> None:
    import signal

    from pgbus_flask.testing import wait_until

    proc = subprocess.Popen(
        [bin_path("pgbus-worker"), "--no-scheduler", "--no-sweep", "--name", "sigterm-check"],
        env=env(pg_url, redis_url, PGBUS_DATABASE_URL=pg_url, PGBUS_REDIS_URL=redis_url,
                PGBUS_IMPORT="tests.workflows"),
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        from rq import Worker

        wait_until(lambda: any(w.name == "sigterm-check" for w in Worker.all(connection=engine.redis)),
                   timeout=30, message="worker registered")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
