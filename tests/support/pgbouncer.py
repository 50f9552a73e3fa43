"""A real PgBouncer in transaction mode in front of the test database, for tests/processes/test_pooler.py.

Debian's ``pgbouncer`` package (or whichever ``pgbouncer`` is on the PATH) runs in the
foreground as a subprocess, on a free loopback port, with a small server pool so that
consecutive transactions of one client land on different server connections
(``server_round_robin``): exactly what breaks session-level state and prepared statements.
Where pgbouncer is missing the tests skip and say why, except when ``PGBUS_REQUIRE_PGBOUNCER=1``
(CI), where they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .procs import free_port

#: Where Debian installs it (not on a normal user's PATH: it lives in /usr/sbin).
DEBIAN_BINARY = "/usr/sbin/pgbouncer"


def pgbouncer_binary() -> str | None:
    found = shutil.which("pgbouncer")
    if found:
        return found
    return DEBIAN_BINARY if os.access(DEBIAN_BINARY, os.X_OK) else None


def required() -> bool:
    """True where a missing pgbouncer must fail the tests instead of skipping them (CI)."""
    return os.environ.get("PGBUS_REQUIRE_PGBOUNCER", "") == "1"


def unreachable_socket(target_url: str) -> bool:
    """True when ``target_url`` names a unix socket folder (the embedded server's) and this process
    runs as root: pgbouncer then runs as 'nobody', who cannot open a socket in root's private folders."""
    host = str(conninfo_to_dict(target_url).get("host") or "")
    return os.geteuid() == 0 and (host == "" or host.startswith("/"))


def _ini_value(value: str) -> str:
    """A value for a ``[databases]`` connection string: quoted, as libpq's keyword strings are."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class PgBouncer:
    """One pgbouncer process in front of the database ``target_url`` names."""

    def __init__(self, binary: str, target_url: str, *, pool_mode: str = "transaction", pool_size: int = 2) -> None:
        self.binary = binary
        self.target = conninfo_to_dict(target_url)
        self.dbname = str(self.target.get("dbname") or "postgres")
        self.user = str(self.target.get("user") or "postgres")
        self.pool_mode = pool_mode
        self.pool_size = pool_size
        self.port = free_port()
        # Its own folder, readable by the unprivileged user pgbouncer switches to when started as root.
        self.folder = Path(tempfile.mkdtemp(prefix="pgbus-pgbouncer-"))
        self.folder.chmod(0o755)
        self.log = self.folder / "pgbouncer.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """A postgresql:// URL of the test database through pgbouncer."""
        return f"postgresql://{quote(self.user, safe='')}@127.0.0.1:{self.port}/{quote(self.dbname, safe='')}"

    def _write_config(self) -> Path:
        server = " ".join(f"{key}={_ini_value(str(value))}" for key, value in self.target.items()
                          if key in ("host", "port", "dbname", "user", "password", "hostaddr"))
        (self.folder / "users.txt").write_text(f'"{self.user}" ""\n', encoding="utf-8")
        ini = self.folder / "pgbouncer.ini"
        ini.write_text("\n".join([
            "[databases]",
            f"{self.dbname} = {server}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.folder / 'users.txt'}",
            f"pool_mode = {self.pool_mode}",
            "max_client_conn = 500",
            f"default_pool_size = {self.pool_size}",
            f"min_pool_size = {self.pool_size}",
            # Hand out the server connections in turn, not the last used one first: a client's
            # next transaction then lands on another server connection, every time.
            "server_round_robin = 1",
            "log_connections = 0",
            "log_disconnections = 0",
            "ignore_startup_parameters = extra_float_digits",
            "",
        ]), encoding="utf-8")
        return ini

    def start(self, timeout: float = 20.0) -> None:
        ini = self._write_config()
        # pgbouncer refuses to run as root: it switches to an unprivileged user when told to.
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([self.binary, *user, str(ini)], stdout=out, stderr=subprocess.STDOUT,
                                         cwd=self.folder)
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self.proc.returncode}:\n{self.output()}")
            try:
                with psycopg.connect(self.url, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                last = exc
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"pgbouncer did not accept connections within {timeout}s ({last}):\n{self.output()}")

    def output(self, limit: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # pgbouncer's immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.folder, ignore_errors=True)
