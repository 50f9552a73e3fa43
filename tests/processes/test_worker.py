"""The worker commands, as real processes: pgbus-worker (env or --app) and plain `rq worker`."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rq.job import Job
from rq.registry import FailedJobRegistry

from pgbus_flask import engine as engine_module
from pgbus_flask.engine import Engine, resolve_engine
from pgbus_flask.errors import ConfigError
from pgbus_flask.testing import wait_until
from tests.proc_workflows import FansOutSleepy, SleepsBriefly
from tests.support import ROOT
from tests.support import QuietWorker as SimpleWorker  # RQ's, without its pub/sub listener
from tests.workflows import ThreeSteps


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

        # Idle, not only registered: RQ installs its signal handlers after registering, and a
        # SIGTERM before that ends the process the default way (-15).
        wait_until(lambda: any(w.name == "sigterm-check" and w.get_state() == "idle"
                               for w in Worker.all(connection=engine.redis)),
                   timeout=30, message="worker idle")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_plain_rq_worker_with_rq_default_worker_class(engine: Engine, pg_url: str, redis_url: str,
                                                      tmp_path: Path) -> None:
    """`rq worker` as a new user types it (no -w: RQ's forking Worker) runs pgbus steps and fan-out
    children, each in a horse that builds its engine from the PGBUS_* environment."""
    marker = tmp_path / "children-are-quick"
    marker.write_text("")
    steps = SleepsBriefly.start(seconds=0)
    fans = FansOutSleepy.start(marker=str(marker), n=3)
    # The worker's output goes to a file, not a pipe: nobody reads a pipe while the test waits, and a
    # worker whose pipe is full blocks on its next log line.
    log_path = tmp_path / "rq-worker.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [bin_path("rq"), "worker", "--burst", "--url", redis_url, engine.settings.queue],
            env=env(pg_url, redis_url, PGBUS_DATABASE_URL=pg_url, PGBUS_REDIS_URL=redis_url,
                    PGBUS_IMPORT="tests.proc_workflows", PYTHONUNBUFFERED="1"),
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
        )
    try:
        def finished() -> bool:
            statuses = {steps.refresh().status, fans.refresh().status}
            if proc.poll() is not None and statuses != {"finished"}:
                attempts = [(s["step_name"], s["attempt"], s["status"], s["error_class"], s["error_message"])
                            for r in (steps, fans) for s in r.steps()]
                raise AssertionError(f"rq worker exited ({proc.returncode}) with runs {statuses},"
                                     f" attempts {attempts}:\n{log_path.read_text()}")
            return statuses == {"finished"}

        wait_until(finished, timeout=120, message="both runs finished")
        # RQ's own Worker may take up to a minute to exit (docs/workers.md): with RQ 3.0 and redis-py
        # 8.2 its command-channel thread can read the UNSUBSCRIBE reply before its stop flag is set,
        # then wait out its 60 s poll while the worker joins it. The pgbus worker classes poll every second.
        try:
            assert proc.wait(timeout=90) == 0, log_path.read_text()
        except subprocess.TimeoutExpired:
            raise AssertionError(f"rq worker --burst still running 90 s after the runs finished:\n"
                                 f"{log_path.read_text()}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    pids = {s["worker"].rsplit(":", 1)[-1] for r in (steps, fans) for s in r.steps()}
    assert str(proc.pid) not in pids and str(os.getpid()) not in pids  # horses ran them
    assert len(pids) >= 2  # one horse per job


def _sessions_opened_by(pg_url: str, command: list[str], environ: dict[str, str]) -> tuple[int, str]:
    """Sessions ``command`` opened on the test database (pg_stat_database), once every backend it
    opened has ended (a backend flushes its statistics before it leaves pg_stat_activity)."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:  # one reader: its own session counts before

        def reading() -> tuple[int, set[int]]:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            pids = {r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                                               " AND pid <> pg_backend_pid()")}
            row = conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()").fetchone()
            assert row is not None
            return int(row[0]), pids

        before, present = reading()
        done = run_cmd(command, environ)
        assert done.returncode == 0, done.stdout + done.stderr
        wait_until(lambda: not (reading()[1] - present), timeout=30, message="the worker's backends ended")
        return reading()[0] - before, done.stdout + done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", ["pgbus-worker", "rq worker -c pgbus_flask.rq_config"])
def test_forked_horse_opens_one_connection_for_a_one_step_job(command: str, engine: Engine, pg_url: str,
                                                              redis_url: str) -> None:
    """A forking worker's horse opens exactly one PostgreSQL connection for its job, when the job needs it:
    no probe connection, no pool warm-up (docs/scaling.md, "Which worker class")."""
    run = ThreeSteps.start(order_id=4)  # inline continuation off: three jobs, one step each
    settings = dict(PGBUS_DATABASE_URL=pg_url, PGBUS_REDIS_URL=redis_url, PGBUS_IMPORT="tests.workflows",
                    PGBUS_INLINE_STEPS="0")
    if command == "pgbus-worker":
        argv = [bin_path("pgbus-worker"), "--burst", "--no-scheduler", "--no-sweep", "--worker-class",
                "pgbus_flask.worker.runner.PgbusForkWorker"]
    else:  # RQ's own forking Worker, the engine built in the parent by the settings module
        argv = [bin_path("rq"), "worker", "--burst", "-c", "pgbus_flask.rq_config"]
    opened, output = _sessions_opened_by(pg_url, argv, env(pg_url, redis_url, **settings))
    assert run.refresh().status == "finished", output
    horses = {s["worker"].rsplit(":", 1)[-1] for s in run.steps()}
    assert len(horses) == 3  # one horse per step job
    assert opened == 3, output  # one connection each, and none in the worker that forks them


@pytest.fixture
def no_default_engine(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process with no pgbus engine (as a plain `rq worker` horse starts); any engine built
    from the environment during the test is closed after it."""
    for name in [k for k in os.environ if k.startswith("PGBUS_") and not k.startswith("PGBUS_TEST_")]:
        monkeypatch.delenv(name)
    engine_module._default = None
    yield
    built = engine_module._default
    if built is not None and built is not engine:
        built.close()
    engine_module._default = engine


def test_step_job_without_an_engine_builds_one_from_the_environment(
        engine: Engine, no_default_engine: None, pg_url: str, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    run = ThreeSteps.start(bus=engine, order_id=2)
    monkeypatch.setenv("PGBUS_DATABASE_URL", pg_url)
    monkeypatch.setenv("PGBUS_REDIS_URL", redis_url)
    monkeypatch.setenv("PGBUS_IMPORT", "tests.workflows")
    SimpleWorker([engine.queue(engine.settings.queue)], connection=engine.redis).work(burst=True,
                                                                                      logging_level="WARNING")
    assert run.refresh().status == "finished"
    built = engine_module._default
    assert built is not None and built is not engine and built.settings.imports == ("tests.workflows",)


def test_step_job_without_engine_or_settings_names_the_variables(
        engine: Engine, no_default_engine: None) -> None:
    run = ThreeSteps.start(bus=engine, order_id=3)
    SimpleWorker([engine.queue(engine.settings.queue)], connection=engine.redis).work(burst=True,
                                                                                      logging_level="WARNING")
    failed = FailedJobRegistry(queue=engine.queue(engine.settings.queue))
    [job_id] = failed.get_job_ids()
    error = Job.fetch(job_id, connection=engine.redis).latest_result().exc_string  # type: ignore[union-attr]
    for name in ("PGBUS_DATABASE_URL", "PGBUS_REDIS_URL", "PGBUS_IMPORT"):
        assert name in error, error
    assert run.refresh().status == "ready" and engine_module._default is None


def test_engine_from_environment_is_built_once_across_threads(
        engine: Engine, no_default_engine: None, pg_url: str, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGBUS_DATABASE_URL", pg_url)
    monkeypatch.setenv("PGBUS_REDIS_URL", redis_url)
    built: list[Engine] = []
    start = threading.Barrier(8)

    def build() -> None:
        start.wait()
        built.append(resolve_engine())

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(built) == 8 and len({id(e) for e in built}) == 1 and built[0] is engine_module._default


def test_engine_from_environment_with_a_bad_import_says_so(
        engine: Engine, no_default_engine: None, pg_url: str, redis_url: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGBUS_DATABASE_URL", pg_url)
    monkeypatch.setenv("PGBUS_REDIS_URL", redis_url)
    monkeypatch.setenv("PGBUS_IMPORT", "tests.no_such_module")
    with pytest.raises(ConfigError, match=r"PGBUS_IMPORT names 'tests\.no_such_module', which cannot be imported"):
        resolve_engine()
    assert engine_module._default is None


def test_readme_rq_worker_line_sets_the_url_before_expanding_it() -> None:
    """`VAR=x cmd "$VAR"` expands $VAR before the assignment: the README must export first."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        commands = f.read().replace("\\\n", " ").splitlines()
    uses = [c.strip() for c in commands if "rq worker" in c and "$PGBUS_REDIS_URL" in c]
    assert uses
    for command in uses:
        assert not re.match(r"^(\w+=\S*\s+)*PGBUS_REDIS_URL=", command), command


def test_rq_config_gives_rq_the_redis_url_and_the_workflows_queues(pg_url: str) -> None:
    """What `rq worker -c pgbus_flask.rq_config` reads: REDIS_URL, or RQ's SENTINEL dict for a Sentinel URL."""
    show = "import pgbus_flask.rq_config as c; print(repr(getattr(c, 'REDIS_URL', None))); print(repr(c.QUEUES));" \
           " print(repr(getattr(c, 'SENTINEL', None)))"
    settings = dict(PGBUS_DATABASE_URL=pg_url, PGBUS_IMPORT="tests.workflows")
    plain = run_cmd([sys.executable, "-c", show], env(pg_url, "", PGBUS_REDIS_URL="redis://127.0.0.1:6390/3",
                                                     **settings))
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.splitlines() == ["'redis://127.0.0.1:6390/3'", "['pgbus.high', 'pgbus', 'pgbus.low']", "None"]
    sentinel = run_cmd([sys.executable, "-c", show], env(
        pg_url, "", PGBUS_REDIS_URL="redis+sentinel://:pw@h1:26380,h2/mymaster/2?sentinel_password=sp", **settings))
    assert sentinel.returncode == 0, sentinel.stderr
    url, queues, found = sentinel.stdout.splitlines()
    assert url == "None" and queues == "['pgbus.high', 'pgbus', 'pgbus.low']"  # the priority bands, high first
    assert ast.literal_eval(found) == {"INSTANCES": [("h1", 26380), ("h2", 26379)], "MASTER_NAME": "mymaster", "DB": 2,
                           "USERNAME": None, "PASSWORD": "pw", "SOCKET_TIMEOUT": 30.0,
                           "SENTINEL_KWARGS": {"password": "sp"}}
    missing = run_cmd([sys.executable, "-c", show], env(pg_url, ""))
    assert missing.returncode != 0 and "PGBUS_DATABASE_URL and PGBUS_REDIS_URL" in missing.stderr
