"""docs/deploy.md stays true: gunicorn --preload, and the names and claims it relies on."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pgbus_flask.config import KEYS_BY_NAME
from pgbus_flask.migrate import migrations
from pgbus_flask.worker.cli import command as worker_command
from tests.support import ROOT


def deploy_md() -> str:
    return Path(ROOT, "docs", "deploy.md").read_text(encoding="utf-8")


WEB_APP = '''\
from __future__ import annotations

import os

from flask import Flask

from pgbus_flask import PgBus
from tests.workflows import ThreeSteps

app = Flask(__name__)
app.config.update(SECRET_KEY="s3cret", PGBUS_DATABASE_URL=os.environ["WEB_DATABASE_URL"],
                  PGBUS_REDIS_URL=os.environ["WEB_REDIS_URL"], PGBUS_DASHBOARD_AUTH=lambda request: "ops")
bus = PgBus(app)

# The master uses PostgreSQL and Redis before gunicorn forks its workers.
bus.migrate()
with app.app_context():
    ThreeSteps.start(order_id=1)
    with bus.engine.db.connection() as conn:
        MASTER_BACKEND = conn.execute("SELECT pg_backend_pid()").fetchone()[0]


@app.get("/whoami")
def whoami():
    with bus.engine.db.connection() as conn:
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
    return {"pid": os.getpid(), "backend": backend, "master_backend": MASTER_BACKEND}
'''


def test_gunicorn_preload_workers_use_connections_of_their_own(pg_url: str, redis_url: str, clean: None,
                                                               tmp_path: Path) -> None:
    (tmp_path / "webapp.py").write_text(WEB_APP)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), ROOT]), "WEB_DATABASE_URL": pg_url,
           "WEB_REDIS_URL": redis_url}
    log = (tmp_path / "gunicorn.log").open("w+")
    server = subprocess.Popen([sys.executable, "-m", "gunicorn", "--preload", "-w", "3", "-b", "127.0.0.1:0",
                               "webapp:app"], cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while True:
            text = (tmp_path / "gunicorn.log").read_text()
            booted = text.count("Booting worker")
            port = re.search(r"Listening at: http://127\.0\.0\.1:(\d+)", text)
            if port and booted == 3:
                break
            assert server.poll() is None and time.monotonic() < deadline, text
            time.sleep(0.2)
        base = f"http://127.0.0.1:{port.group(1)}"

        def get(path: str) -> tuple[int, bytes]:
            with urllib.request.urlopen(base + path, timeout=60) as response:
                return response.status, response.read()

        pages = ["/pgbus/", "/pgbus/runs", "/pgbus/attention", "/pgbus/api/overview", "/whoami"] * 24
        with ThreadPoolExecutor(max_workers=24) as pool:
            answers = list(pool.map(get, pages))
        assert Counter(status for status, _ in answers) == Counter({200: len(pages)})
        by_page = list(zip(pages, answers, strict=True))
        assert all(b"ThreeSteps" in body for path, (_, body) in by_page if path == "/pgbus/runs")

        seen = [json.loads(body) for path, (_, body) in by_page if path == "/whoami"]
        master_backend = seen[0]["master_backend"]
        owner: dict[int, int] = {}
        for answer in seen:
            assert answer["backend"] != master_backend, "a worker used the master's connection"
            assert owner.setdefault(answer["backend"], answer["pid"]) == answer["pid"], "a connection in two workers"
        assert len({answer["pid"] for answer in seen}) >= 2, "the requests reached more than one worker"
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        log.close()


def test_the_deploy_notes_name_real_settings_and_worker_options() -> None:
    text = deploy_md()
    named = set(re.findall(r"\bPGBUS_[A-Z_]+\b", text))
    assert named and named <= set(KEYS_BY_NAME), named - set(KEYS_BY_NAME)
    options = {option for param in worker_command.params for option in param.opts}
    used = {option for line in text.splitlines() if "pgbus-worker" in line
            for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", line.split("pgbus-worker", 1)[1])}
    assert used and used <= options, used - options


def test_migrations_only_add_as_the_upgrade_notes_say() -> None:
    """docs/deploy.md: old workers keep running on a newer schema because no migration
    removes or changes what they use. A migration that does must update those notes."""
    changing = re.compile(r"\b(DROP|RENAME)\b|ALTER\s+COLUMN|ALTER\s+TABLE\s+\w+\s+ALTER", re.I)
    wrong = [version for version, sql in migrations()[1:]
             if changing.search(_without_replaced_parts(re.sub(r"--[^\n]*", "", sql)))]
    assert wrong == [], f"{wrong}: update 'Upgrading' in docs/deploy.md"
    notes = " ".join(deploy_md().split())
    assert "every migration so far only adds" in notes
    assert "an index it drops is replaced by one that serves the same reads" in notes
    assert "a trigger it drops is created again under the same name" in notes


def _without_replaced_parts(sql: str) -> str:
    """``sql`` without what an older process cannot miss: a DROP INDEX (no query names an index; the
    migration builds the one that replaces it, a wider one, say), and the DROP TRIGGER (and the DROP
    FUNCTION of its function) of a trigger the same migration creates again under the same name."""
    sql = re.sub(r"DROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?\w+\s*;", "", sql, flags=re.I)
    recreated = set(re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?TRIGGER\s+(\w+)", sql, re.I))
    dropped = re.findall(r"DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?(\w+)\s+ON\s+\w+\s*;", sql, re.I)
    if dropped and set(dropped) <= recreated:
        sql = re.sub(r"DROP\s+TRIGGER\s+(?:IF\s+EXISTS\s+)?\w+\s+ON\s+\w+\s*;", "", sql, flags=re.I)
        sql = re.sub(r"DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?\w+\(\)\s*;", "", sql, flags=re.I)
    return sql


def test_the_readme_links_the_deploy_notes() -> None:
    assert "(docs/deploy.md)" in Path(ROOT, "README.md").read_text(encoding="utf-8")
