"""Real Redis Sentinel on loopback, for tests/processes/test_sentinel.py.

A master ``redis-server``, one replica (``--replicaof``) and three ``redis-sentinel`` processes
(quorum 2) on free loopback ports, each with its files in one temporary folder. The sentinels
judge the master down after ``down_after_ms`` and promote the replica. Debian's ``redis-server``
and ``redis-sentinel`` packages (or whichever are on the PATH) run them; where redis-sentinel is
missing the tests skip and say why, except when ``PGBUS_REQUIRE_SENTINEL=1`` (CI), where they fail.
Nothing persists: a master killed with SIGKILL loses whatever its replica had not copied yet.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from redis import Redis

from pgbus_flask.testing import wait_until

from .procs import free_port

SERVICE = "mymaster"


def sentinel_binary() -> str | None:
    return shutil.which("redis-sentinel")


def server_binary() -> str | None:
    return shutil.which("redis-server")


def required() -> bool:
    """True where a missing redis-sentinel must fail the tests instead of skipping them (CI)."""
    return os.environ.get("PGBUS_REQUIRE_SENTINEL", "") == "1"


class SentinelSet:
    """A master, a replica and three sentinels watching them as ``SERVICE``."""

    def __init__(self, server: str, sentinel: str, *, down_after_ms: int = 1000,
                 failover_timeout_ms: int = 3000) -> None:
        self.server = server
        self.sentinel = sentinel
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.folder = Path(tempfile.mkdtemp(prefix="pgbus-sentinel-"))
        self.master_port = free_port()
        self.replica_port = free_port()
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def url(self, db: int = 0) -> str:
        """PGBUS_REDIS_URL for the service: every sentinel, the service name, the database."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/{db}?socket_timeout=5"

    def _start(self, name: str, argv: list[str]) -> None:
        with open(self.folder / f"{name}.log", "wb") as out:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=self.folder)

    def _redis(self, name: str, port: int) -> list[str]:
        return [self.server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.folder), "--dbfilename", f"{name}.rdb", "--daemonize", "no"]

    def start(self, timeout: float = 45.0) -> None:
        """Start all five and wait until every sentinel sees the master, the replica and the two others."""
        self._start("master", self._redis("master", self.master_port))
        self._start("replica", [*self._redis("replica", self.replica_port),
                                "--replicaof", "127.0.0.1", str(self.master_port)])
        for index, port in enumerate(self.sentinel_ports):
            conf = self.folder / f"sentinel-{index}.conf"  # each its own: a sentinel rewrites its file
            conf.write_text("\n".join([
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {self.folder}",
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.master_port} 2",
                f"sentinel down-after-milliseconds {SERVICE} {self.down_after_ms}",
                f"sentinel failover-timeout {SERVICE} {self.failover_timeout_ms}",
                f"sentinel parallel-syncs {SERVICE} 1",
                "",
            ]), encoding="utf-8")
            self._start(f"sentinel-{index}", [self.sentinel, str(conf)])
        try:
            wait_until(self._replica_synced, timeout=timeout, interval=0.1, message="the replica synced")
            wait_until(self._sentinels_ready, timeout=timeout, interval=0.2,
                       message="every sentinel sees the master, the replica and the two other sentinels")
        except BaseException:
            self.stop()
            raise

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None and not (name == "master" and getattr(self, "_killed", False)):
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{self.output(name)}")

    def _ask(self, port: int, *command: Any) -> Any:
        client = Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, socket_timeout=1)
        try:
            return client.execute_command(*command)
        finally:
            client.close()

    def _replica_synced(self) -> bool:
        self._check_alive()
        client = Redis(host="127.0.0.1", port=self.replica_port, socket_connect_timeout=1, socket_timeout=1)
        try:
            return client.info("replication").get("master_link_status") == "up"
        except Exception:
            return False
        finally:
            client.close()

    def _sentinels_ready(self) -> bool:
        self._check_alive()
        for port in self.sentinel_ports:
            try:
                client = Redis(host="127.0.0.1", port=port, socket_timeout=1, decode_responses=True)
                master = client.sentinel_master(SERVICE)
                client.close()
            except Exception:
                return False
            if int(master.get("num-slaves", 0)) < 1 or int(master.get("num-other-sentinels", 0)) < 2:
                return False
        return True

    def master_port_seen(self) -> int | None:
        """The master's port as the first sentinel that answers names it."""
        for port in self.sentinel_ports:
            try:
                client = Redis(host="127.0.0.1", port=port, socket_timeout=1, decode_responses=True)
                address = client.sentinel_get_master_addr_by_name(SERVICE)
                client.close()
            except Exception:
                continue
            if address:
                return int(address[1])
        return None

    def kill_master(self) -> float:
        """SIGKILL the master, as a crashed machine; the moment it died (time.monotonic())."""
        self._killed = True
        proc = self.procs["master"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        return time.monotonic()

    def fail_over(self) -> float:
        """Ask a sentinel for a failover with the master alive (``SENTINEL FAILOVER``, as an operator
        does before maintenance): the master becomes a replica of the promoted one, and its clients
        get ReadOnlyError on writes, or an error ending their blocking reads. The moment asked."""
        self._ask(self.sentinel_ports[0], "SENTINEL", "FAILOVER", SERVICE)
        return time.monotonic()

    def wait_promoted(self, timeout: float = 60.0) -> float:
        """Wait until the sentinels name the replica as master and it says so itself; that moment."""

        def promoted() -> bool:
            self._check_alive()
            if self.master_port_seen() != self.replica_port:
                return False
            try:
                role = self._ask(self.replica_port, "ROLE")
            except Exception:
                return False
            return bool(role) and role[0] in (b"master", "master")

        wait_until(promoted, timeout=timeout, interval=0.05, message="the sentinels promoted the replica")
        return time.monotonic()

    def output(self, name: str, limit: int = 3000) -> str:
        try:
            return (self.folder / f"{name}.log").read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def describe(self) -> str:
        """Every process's log tail, for assertion messages."""
        return "\n".join(f"--- {name} (rc {proc.poll()}):\n{self.output(name, 1500)}"
                         for name, proc in self.procs.items())

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.folder, ignore_errors=True)
