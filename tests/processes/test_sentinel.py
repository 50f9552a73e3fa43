"""Redis Sentinel failover under load (docs/deploy.md#redis-sentinel).

A real master, one replica and three sentinels (tests/support/sentinel.py); two ``pgbus-worker``
processes and this test's engine reach Redis through ``redis+sentinel://``. 500 FiveNoop runs
drain while the master is killed with SIGKILL (or, with it alive, a failover is asked for): the
sentinels promote the replica, the clients follow it, and the sweep resends the steps whose jobs
died with the old master (replication is asynchronous, so the last jobs sent to it may never have
reached the replica) or could not be sent while there was none. Every run finishes, each step with
one completed attempt; the figures are printed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pgbus_flask import engine as engine_module
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.testing import wait_until
from tests.support import procs, settings_for
from tests.support.procs import assert_one_completed_attempt_per_step, run_statuses, scalar, wait_finished
from tests.support.sentinel import SentinelSet, required, sentinel_binary, server_binary
from tests.workflows import FiveNoop

RUNS = 500
STEPS = 5
#: Short enough for the sweep to resend the lost steps within the test; the workers sweep every second.
FAST_SWEEP = {"PGBUS_STALL_THRESHOLD": "2", "PGBUS_SWEEP_INTERVAL": "1"}


@pytest.fixture
def sentinels() -> Iterator[SentinelSet]:
    server, sentinel = server_binary(), sentinel_binary()
    if server is None or sentinel is None:
        missing = "redis-server" if server is None else "redis-sentinel"
        if required():
            pytest.fail(f"PGBUS_REQUIRE_SENTINEL=1 but {missing} is not on the PATH (apt-get install {missing})",
                        pytrace=False)
        pytest.skip(f"{missing} is not on the PATH (Debian: apt-get install {missing})")
    found = SentinelSet(server, sentinel, down_after_ms=1000, failover_timeout_ms=3000)
    found.start()
    yield found
    found.stop()


@pytest.fixture
def sentinel_engine(clean: None, pg_url: str, sentinels: SentinelSet) -> Iterator[Engine]:
    eng = Engine(Settings.load(settings_for(pg_url, sentinels.url(), **FAST_SWEEP))).make_default()
    yield eng
    eng.close()
    engine_module._default = None


@pytest.mark.parametrize("how", ["master killed", "failover asked"])
def test_the_engine_follows_a_failover(sentinel_engine: Engine, sentinels: SentinelSet, how: str) -> None:
    """One client, no workers: a command right after the promotion may fail once (its connection
    was to the old master, dead or now a read-only replica); the next one reaches the new master
    and nothing needs restarting."""
    client = sentinel_engine.redis
    client.set("pgbus-test:before", "1")
    wait_until(lambda: sentinels._ask(sentinels.replica_port, "GET", "pgbus-test:before") == b"1", timeout=10,
               message="the write replicated")
    if how == "master killed":
        sentinels.kill_master()
    else:
        sentinels.fail_over()
    sentinels.wait_promoted()

    failures: list[str] = []

    def reaches_the_new_master() -> bool:
        try:
            client.set("pgbus-test:after", "1")
        except Exception as exc:  # the old connection's ConnectionError; the pool then asks the sentinels again
            failures.append(repr(exc))
            return False
        # A failover asked for turns the old master into a replica a moment after the sentinels name
        # the new one: a write in between still lands on the old one (and is lost with its data).
        return bool(sentinels._ask(sentinels.replica_port, "GET", "pgbus-test:after") == b"1")

    wait_until(reaches_the_new_master, timeout=15, message="a write reached the promoted replica")
    assert client.get("pgbus-test:before") == b"1"
    assert len(failures) <= 3, failures

    # close() closes the master's connections and the sentinels' (a client handed a pool leaves it open).
    pool = client.connection_pool
    sentinel_clients = pool.sentinel_manager.sentinels
    assert any(c._sock is not None for c in pool._get_free_connections())
    sentinel_engine.close()
    assert all(c._sock is None for c in [*pool._get_free_connections(), *pool._get_in_use_connections()])
    for sentinel_client in sentinel_clients:
        assert all(c._sock is None for c in sentinel_client.connection_pool._get_free_connections())


@pytest.mark.parametrize("how", ["master killed", "failover asked"])
def test_500_runs_drain_through_a_failover(sentinel_engine: Engine, sentinels: SentinelSet, pg_url: str,
                                           tmp_path: Path, how: str) -> None:
    """``master killed``: SIGKILL, as a crashed machine (the jobs it had not replicated are lost).
    ``failover asked``: SENTINEL FAILOVER with the master alive; it turns replica under its clients."""
    eng = sentinel_engine
    url = sentinels.url()
    workers = [procs.start_worker(pg_url, url, tmp_path, args=("--no-scheduler",), env=FAST_SWEEP)
               for _ in range(2)]
    try:
        def ready() -> bool:
            for w in workers:
                assert w.alive(), f"worker {w.name} exited with {w.proc.returncode}:\n{w.output()}"
            return procs.registered(eng.redis, [w.name for w in workers])

        wait_until(ready, timeout=30, message="workers registered with RQ through the sentinels")
        began = time.monotonic()
        for _ in range(RUNS // 2):
            FiveNoop.start(bus=eng)
        wait_until(lambda: run_statuses(eng).get("finished", 0) >= RUNS // 5, timeout=60, interval=0.05,
                   message=f"{RUNS // 5} runs finished before the failover")
        finished_at_kill = run_statuses(eng).get("finished", 0)

        # The other half is started while the master dies and the sentinels elect another:
        # start() commits its runs whether or not their first job reaches Redis.
        errors: list[BaseException] = []

        def start_rest() -> None:
            try:
                for _ in range(RUNS - RUNS // 2):
                    FiveNoop.start(bus=eng)
                    time.sleep(0.005)
            except BaseException as exc:  # reported by the test below
                errors.append(exc)

        killed = sentinels.kill_master() if how == "master killed" else sentinels.fail_over()
        starter = threading.Thread(target=start_rest)
        starter.start()
        promoted = sentinels.wait_promoted()
        starter.join(120)
        assert not starter.is_alive() and not errors, errors

        try:
            wait_finished(eng, RUNS, workers, timeout=180)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{sentinels.describe()}") from None
        total = time.monotonic() - began
        assert_one_completed_attempt_per_step(eng, RUNS, STEPS)
        resent = scalar(eng, "SELECT coalesce(sum(resends), 0) FROM pgbus_workflow_steps")
        assert sentinels.master_port_seen() == sentinels.replica_port
        assert all(w.alive() for w in workers), procs.describe(workers)
    finally:
        procs.stop_all(workers)
    print(f"\nSentinel failover ({how}): {RUNS} runs x {STEPS} steps, 2 workers; {finished_at_kill} runs finished"
          f" before; {promoted - killed:.1f} s without a master (until the sentinels named the replica);"
          f" {resent} steps resent by the sweep; every run finished in {total:.1f} s")
