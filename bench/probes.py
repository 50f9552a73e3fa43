"""Probes of ``bench.steps``: what this process sends PostgreSQL (counted inside psycopg),
time spent in engine functions (patched where the engine looks them up), the commands a Redis
database runs (MONITOR, by client address), and the CPU time of processes (from /proc).

Each in-process probe is a context manager that puts everything back on exit.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import psycopg
from redis import Redis

#: CLIENT SETNAME of the benchmark's own Redis connections, so MONITOR counts can leave them out.
BENCH_CLIENT = "pgbus-bench-producer"

_STOP = "pgbus-bench-monitor-stop"


def _command_kind(command: Any) -> str:
    """BEGIN, COMMIT, ROLLBACK, SAVEPOINT (also RELEASE and ROLLBACK TO) or OTHER."""
    text = command.decode(errors="replace") if isinstance(command, bytes) else repr(command)
    text = text.upper()
    if "SAVEPOINT" in text or text.lstrip().startswith("RELEASE"):
        return "SAVEPOINT"
    for kind in ("BEGIN", "COMMIT", "ROLLBACK"):
        if text.lstrip().startswith(kind) or f"'{kind}" in text:
            return kind
    return "OTHER"


class PgCounter:
    """Counts what this process sends PostgreSQL while active.

    ``statements``: ``Cursor.execute`` / ``executemany`` calls (``conn.execute`` included);
    ``BEGIN``, ``COMMIT``, ``ROLLBACK``, ``SAVEPOINT`` (with RELEASE): psycopg's transaction
    commands; ``transactions``: BEGINs plus statements run alone on an idle autocommit
    connection (what ``pg_stat_database.xact_commit`` counts). ``wait_seconds``: time spent in
    psycopg's ``Connection.wait``, i.e. waiting for PostgreSQL's answers (round trips), and
    ``wait_COMMIT`` (``wait_statements``, ...) the part of it spent on each kind of command.
    """

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.wait_seconds = 0.0
        self.waits: collections.Counter[str] = collections.Counter()
        self._saved: list[tuple[Any, str, Any]] = []

    def reset(self) -> dict[str, float]:
        """The counts so far (and zero them)."""
        out: dict[str, float] = {**self.counts, "wait_seconds": self.wait_seconds,
                                 **{f"wait_{kind}": seconds for kind, seconds in self.waits.items()}}
        self.counts.clear()
        self.waits.clear()
        self.wait_seconds = 0.0
        return out

    def __enter__(self) -> PgCounter:
        import psycopg._connection_base as cbase

        counts = self.counts
        real_execute, real_many = psycopg.Cursor.execute, psycopg.Cursor.executemany
        real_command, real_wait = cbase.BaseConnection._exec_command, psycopg.Connection.wait

        in_block: set[int] = set()  # connections between our BEGIN and COMMIT / ROLLBACK

        def alone(cursor: Any) -> None:
            conn = cursor.connection
            if conn.autocommit and id(conn) not in in_block:
                counts["transactions"] += 1

        def execute(cursor: Any, *a: Any, **kw: Any) -> Any:
            query = a[0] if a else kw.get("query")
            kind = _command_kind(query) if isinstance(query, (str, bytes)) else "OTHER"
            if kind == "OTHER" or kind == "SAVEPOINT":
                counts["statements" if kind == "OTHER" else kind] += 1
                alone(cursor)
            else:  # BEGIN / COMMIT / ROLLBACK sent as statements (pgbus's pipelined transactions)
                counts[kind] += 1
                conn = id(cursor.connection)
                if kind == "BEGIN":
                    counts["transactions"] += 1
                    in_block.add(conn)
                else:
                    in_block.discard(conn)
            return real_execute(cursor, *a, **kw)

        def executemany(cursor: Any, *a: Any, **kw: Any) -> Any:
            counts["statements"] += 1
            alone(cursor)
            return real_many(cursor, *a, **kw)

        waiting: list[str] = []  # the kind of command the wait in progress is for

        def command(conn: Any, cmd: Any, *a: Any, **kw: Any) -> Any:
            kind = _command_kind(cmd)
            counts[kind] += 1
            if waiting:
                waiting[-1] = kind
            if kind == "BEGIN":
                counts["transactions"] += 1
                in_block.add(id(conn))
            elif kind in ("COMMIT", "ROLLBACK"):
                in_block.discard(id(conn))
            return real_command(conn, cmd, *a, **kw)

        def wait(conn: Any, *a: Any, **kw: Any) -> Any:
            # A transaction command's generator runs inside this wait, and names its kind.
            waiting.append("statements")
            t = time.perf_counter()
            try:
                return real_wait(conn, *a, **kw)
            finally:
                spent = time.perf_counter() - t
                self.wait_seconds += spent
                self.waits[waiting.pop()] += spent

        for owner, name, new in ((psycopg.Cursor, "execute", execute), (psycopg.Cursor, "executemany", executemany),
                                 (cbase.BaseConnection, "_exec_command", command),
                                 (psycopg.Connection, "wait", wait)):
            self._saved.append((owner, name, owner.__dict__[name]))
            setattr(owner, name, new)
        return self

    def __exit__(self, *exc: Any) -> None:
        for owner, name, real in reversed(self._saved):
            setattr(owner, name, real)
        self._saved.clear()


class Timers:
    """Wall time spent in engine functions, patched in every ``pgbus_flask`` module (and class)
    that binds them, so a call is timed however the engine looks the function up."""

    def __init__(self) -> None:
        self.seconds: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self.missing: list[str] = []
        self._saved: list[tuple[Any, str, Any]] = []

    def time(self, key: str, module: str, name: str) -> None:
        """Time ``module.name`` (``name`` may be ``Class.method``) under ``key``; a function the
        engine no longer has is listed in ``missing``."""
        import importlib

        try:
            owner: Any = importlib.import_module(module)
            *path, attr = name.split(".")
            for part in path:
                owner = getattr(owner, part)
            real = getattr(owner, attr)
        except (ImportError, AttributeError):
            self.missing.append(f"{module}.{name}")
            return
        timed = self._wrap(key, real)
        if path:  # a method: patch the class
            self._saved.append((owner, attr, owner.__dict__[attr]))
            setattr(owner, attr, timed)
            return
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("pgbus_flask") and getattr(mod, attr, None) is real:
                self._saved.append((mod, attr, real))
                setattr(mod, attr, timed)

    def _wrap(self, key: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return real(*a, **kw)
            finally:
                self.seconds[key] += time.perf_counter() - t
                self.calls[key] += 1

        return timed

    def __enter__(self) -> Timers:
        return self

    def __exit__(self, *exc: Any) -> None:
        for owner, name, real in reversed(self._saved):
            setattr(owner, name, real)
        self._saved.clear()


class RedisMonitor:
    """Counts the commands the Redis server runs on the database of ``url`` while active, by the
    client that sent them (MONITOR on a connection of its own, read by a thread).

    Commands a Lua script runs are counted apart (``lua``). :meth:`workers` leaves out the
    clients named :data:`BENCH_CLIENT` (the benchmark's own: its enqueues, its polls): those
    CLIENT LIST shows when the monitor starts and those seen naming themselves since.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = Redis.from_url(url, socket_timeout=None)
        self.db = int(self.client.connection_pool.connection_kwargs.get("db", 0))
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()  # (client, COMMAND)
        self.bench_clients: set[str] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, name="redis-monitor", daemon=True)
        self.error: BaseException | None = None

    def _read(self) -> None:
        db = str(self.db).encode()
        setname = f'"SETNAME" "{BENCH_CLIENT}"'.encode()
        try:
            with self.client.monitor() as monitor:
                self._ready.set()
                conn = monitor.connection
                while True:
                    raw = conn.read_response()
                    if not isinstance(raw, bytes):
                        continue
                    # b'<time> [<db> <client>] "<COMMAND>" "<arg>" ...'
                    rest = raw.split(b" ", 1)[1]
                    end = rest.index(b"] ")
                    db_id, client = rest[1:end].split(b" ", 1)
                    if setname in rest:  # before its SELECT, so on any database
                        self.bench_clients.add(client.decode(errors="replace"))
                    if db_id != db:
                        continue
                    start = end + 3
                    name = rest[start:rest.index(b'"', start)].decode(errors="replace").upper()
                    if name == "ECHO" and _STOP.encode() in rest:
                        return
                    self.counts[(client.decode(errors="replace"), name)] += 1
        except BaseException as exc:  # reported (in error), not raised, from this thread
            self.error = exc
            self._ready.set()

    def __enter__(self) -> RedisMonitor:
        helper = named_redis(self.url)
        try:
            self.bench_clients = {entry["addr"] for entry in helper.client_list() if entry.get("name") == BENCH_CLIENT}
        finally:
            helper.close()
        self._thread.start()
        self._ready.wait(10)
        time.sleep(0.1)  # MONITOR's OK has been read; give the server a moment to attach it
        return self

    def __exit__(self, *exc: Any) -> None:
        helper = named_redis(self.url)  # named, so its ECHO is left out too
        try:
            helper.echo(_STOP)
            self._thread.join(30)
        finally:
            helper.close()
            self.client.close()

    def workers(self) -> collections.Counter[str]:
        """Commands by name that clients other than the benchmark's sent (the workers')."""
        out: collections.Counter[str] = collections.Counter()
        for (who, name), n in self.counts.items():
            if who != "lua" and who not in self.bench_clients:
                out[name] += n
        return out

    def idle_rate(self, seconds: float = 2.0) -> float:
        """Commands per second the workers send while idle, measured now over ``seconds``."""
        before = sum(self.workers().values())
        time.sleep(seconds)
        return (sum(self.workers().values()) - before) / seconds

    def lua(self) -> int:
        """Commands Lua scripts ran (any client's)."""
        return sum(n for (who, _name), n in self.counts.items() if who == "lua")

    def bench(self) -> collections.Counter[str]:
        """Commands by name that the benchmark's own clients sent (its enqueues)."""
        out: collections.Counter[str] = collections.Counter()
        for (who, name), n in self.counts.items():
            if who in self.bench_clients:
                out[name] += n
        return out


def named_redis(url: str) -> Redis:
    """A Redis client whose connections carry :data:`BENCH_CLIENT` as their name."""
    return Redis.from_url(url, client_name=BENCH_CLIENT, socket_connect_timeout=5, socket_timeout=30)


# -- CPU time ------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far, its reaped children (a forking
    worker's horses) included, from /proc; None when it cannot be read (gone, not Linux,
    PostgreSQL on another host)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # fields[0] is proc(5)'s field 3 (state): utime, stime, cutime, cstime are its fields 14-17.
    return sum(int(f) for f in fields[11:15]) / _TICK


def machine_busy() -> float | None:
    """CPU seconds all of the machine's cores have spent busy (not idle or waiting on I/O) since boot."""
    try:
        with open("/proc/stat") as fh:
            ticks = [int(f) for f in fh.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return (sum(ticks) - ticks[3] - ticks[4]) / _TICK


def cpu_of(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds of each readable process of ``pids``."""
    out = {}
    for pid in pids:
        seconds = cpu_seconds(pid)
        if seconds is not None:
            out[pid] = seconds
    return out


def cpu_spent(before: dict[int, float], after: dict[int, float]) -> float | None:
    """CPU seconds spent between two :func:`cpu_of` readings (a process new in ``after`` counts
    whole); None when nothing could be read."""
    if not after:
        return None
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def backend_pids(server_url: str, name: str) -> list[int]:
    """PostgreSQL backends connected to database ``name`` now."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        return [int(r[0]) for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,))]


def redis_cpu(url: str) -> float | None:
    """The Redis server's CPU seconds so far (INFO cpu: the whole server, every database's clients)."""
    try:
        client = named_redis(url)
        try:
            info = client.info("cpu")
        finally:
            client.close()
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    except Exception:
        return None


class CpuMeter:
    """CPU seconds that the worker processes, the PostgreSQL backends of one database, the Redis
    server (all of it) and this process spend between :meth:`start` and :meth:`stop`; and what
    every other process on the machine spent meanwhile, in cores (how quiet the machine was)."""

    def __init__(self, worker_pids: Iterable[int], server_url: str | None = None, dbname: str | None = None,
                 redis_url: str | None = None) -> None:
        self.worker_pids = list(worker_pids)
        self.server_url, self.dbname, self.redis_url = server_url, dbname, redis_url
        self._before: dict[str, Any] = {}

    def _backends(self) -> list[int]:
        if self.server_url is None or self.dbname is None:
            return []
        return backend_pids(self.server_url, self.dbname)

    def start(self) -> None:
        self._pids = self._backends()
        self._before = {
            "workers": cpu_of(self.worker_pids), "postgres": cpu_of(self._pids),
            "redis": redis_cpu(self.redis_url) if self.redis_url else None, "self": time.process_time(),
            "machine": machine_busy(), "wall": time.monotonic(),
        }

    def stop(self) -> dict[str, float | None]:
        """CPU seconds by part: ``workers``, ``postgres``, ``redis``, ``self`` (None: not readable), and
        ``others_cores``: the machine's busy CPU seconds less those, over the wall time."""
        b = self._before
        backends = sorted(set(self._pids) | set(self._backends()))
        redis_now = redis_cpu(self.redis_url) if self.redis_url else None
        machine, wall = machine_busy(), time.monotonic() - b["wall"]
        out: dict[str, float | None] = {
            "workers": cpu_spent(b["workers"], cpu_of(self.worker_pids)),
            "postgres": cpu_spent(b["postgres"], cpu_of(backends)) if backends else None,
            "redis": redis_now - b["redis"] if redis_now is not None and b["redis"] is not None else None,
            "self": time.process_time() - b["self"],
        }
        ours = sum(v for v in out.values() if v is not None)
        out["others_cores"] = (machine - b["machine"] - ours) / wall if machine is not None and b["machine"] \
            is not None and wall > 0 else None
        return out


def stack_of(pid: int) -> str:
    """What process ``pid`` is doing: its Python stack by py-spy when installed, else its
    command line and kernel wait channel."""
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.path.exists(spy):
        out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
        return (out.stdout or out.stderr).strip()
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/wchan") as fh:
            return f"{cmd} (waiting in {fh.read()}; pip install py-spy for its Python stack)"
    except OSError as exc:
        return repr(exc)


class TurnCounter:
    """A TCP proxy on 127.0.0.1 in front of ``host:port`` that counts round trips: a turn is
    counted each time a client sends after the server last answered it (or first). What a
    client sends before reading an answer (a Redis pipeline, statements psycopg pipelines up
    to a Sync) is one turn; each time it reads an answer before going on is another.

    It adds a hop to every round trip: count through it, time without it.
    """

    def __init__(self, host: str, port: int) -> None:
        import selectors
        import socket

        self.upstream = (host, port)
        self.turns = 0
        self._listen = socket.create_server(("127.0.0.1", 0))
        self._listen.setblocking(False)
        self.port = self._listen.getsockname()[1]
        self._sel = selectors.DefaultSelector()
        self._sel.register(self._listen, selectors.EVENT_READ, None)
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="turn-counter", daemon=True)

    def _loop(self) -> None:
        import selectors
        import socket

        last: dict[int, str] = {}  # id of the client socket -> who sent last
        while not self._stop:
            for key, _ in self._sel.select(0.2):
                if key.data is None:
                    client, _addr = self._listen.accept()
                    server = socket.create_connection(self.upstream)
                    for sock in (client, server):
                        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self._sel.register(client, selectors.EVENT_READ, (server, client, "client"))
                    self._sel.register(server, selectors.EVENT_READ, (client, client, "server"))
                    continue
                sock, (other, client, side) = key.fileobj, key.data
                try:
                    data = sock.recv(65536)  # type: ignore[union-attr]
                except OSError:
                    data = b""
                if not data:
                    for s in (sock, other):
                        with contextlib.suppress(KeyError, ValueError):
                            self._sel.unregister(s)
                        s.close()  # type: ignore[union-attr]
                    last.pop(id(client), None)
                    continue
                if side == "client" and last.get(id(client)) != "client":
                    self.turns += 1
                last[id(client)] = side
                other.sendall(data)

    def __enter__(self) -> TurnCounter:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop = True
        self._thread.join(5)
        for key in list(self._sel.get_map().values()):
            with contextlib.suppress(OSError):
                key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()

    def url(self, url: str) -> str:
        """``url`` (postgresql:// or redis://) pointing at this proxy instead."""
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(url)
        netloc = parts.netloc.rsplit("@", 1)
        netloc[-1] = f"127.0.0.1:{self.port}"
        return urlunsplit((parts.scheme, "@".join(netloc), parts.path, parts.query, parts.fragment))

    def take(self) -> int:
        """Turns so far (and zero them)."""
        turns, self.turns = self.turns, 0
        return turns

