"""PostgreSQL access: one connection pool per process, and transactions with
after-commit callbacks.

The pool is opened lazily in the process that uses it. After a fork (RQ's
forking worker) the child opens its own pool: no connection crosses a fork.
A forking worker's horse, which runs one job and exits, gets a :class:`HorsePool`
instead: no threads, no warm-up, one connection opened when the job first needs it.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Protocol

import psycopg
from psycopg import pq, sql
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from .config import redact
from .errors import ConfigError, DatabaseError, DatabaseUnavailable, PgbusError, SchemaMissing
from .sql import STATEMENTS, statement

log = logging.getLogger("pgbus_flask")

# Pools left behind by a fork: kept referenced so that garbage collection in
# the child never closes the parent's sockets.
_ORPHANED_POOLS: list[ConnectionPool] = []
_ORPHANED_CONNECTIONS: list[psycopg.Connection[Any]] = []


# SQLSTATEs that mean the server is going away or not taking connections: an outage,
# worth waiting out. Class 08 (connection exceptions) is one too, and so is an error
# with no SQLSTATE at all (the connection broke before the server could answer).
OUTAGE_SQLSTATES = frozenset({
    "57P01",  # admin_shutdown
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now (starting up, shutting down, in recovery)
    "53300",  # too_many_connections
})

# What to tell the caller for the refusals that are not outages and that a caller can act on.
_REFUSALS = {
    "54000": "PostgreSQL refused a value that is over one of its size limits",
    "57014": "PostgreSQL cancelled the statement (statement_timeout, or a cancel request)",
    "55P03": "PostgreSQL could not take a lock in time (lock_timeout)",
    "40001": "PostgreSQL could not serialize this transaction with a concurrent one; try again",
    "40P01": "PostgreSQL found a deadlock with a concurrent transaction; try again",
    "25P03": "PostgreSQL ended an idle transaction (idle_in_transaction_session_timeout)",
}


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` means PostgreSQL cannot be reached (retry later), as opposed to a
    refusal of this statement (retrying the same thing will fail the same way)."""
    if isinstance(exc, (PoolTimeout, DatabaseUnavailable)):
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in OUTAGE_SQLSTATES


def translate(exc: BaseException) -> PgbusError | None:
    """The library's error for a psycopg error (None: not one the boundary translates)."""
    if isinstance(exc, PoolTimeout) or is_outage(exc):
        return DatabaseUnavailable(f"PostgreSQL is unreachable: {_first_line(exc)}")
    if isinstance(exc, (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)):
        return SchemaMissing(_first_line(exc))
    if isinstance(exc, (psycopg.OperationalError, psycopg.DataError)):
        state = exc.sqlstate
        what = _REFUSALS.get(state or "", "PostgreSQL refused the statement")
        return DatabaseError(f"{what}: {_first_line(exc)} (SQLSTATE {state})", state)
    return None


def _first_line(exc: BaseException) -> str:
    """The first line of a driver error, with any password in it hidden."""
    text = str(exc).strip().splitlines()
    return redact(text[0]) if text else type(exc).__name__


class Transaction:
    """One ``bus.transaction()`` block: its connection and its after-commit callbacks."""

    def __init__(self, database: Database, conn: psycopg.Connection[Any], parent: Transaction | None, *,
                 begin_pending: bool = False) -> None:
        self.database = database
        self._conn = conn
        #: True while a block opened with ``pipeline=True`` has not sent its BEGIN yet: the first
        #: :meth:`query` sends it with its own statement, in one round trip.
        self._begin_pending = begin_pending
        self.parent = parent
        self._callbacks: list[Callable[[], Any]] = []
        #: PostgreSQL's now() for this transaction, once something asked for it.
        self.now: datetime | None = None
        #: Rows kept to be written by kind, in one statement, just before COMMIT.
        self.buffered: dict[str, list[Any]] = {}
        self._flushers: dict[str, Callable[[psycopg.Connection[Any], list[Any]], Any]] = {}

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The block's connection, inside its transaction (a pending BEGIN is sent first)."""
        if self._begin_pending:
            self._begin_pending = False
            self._conn.execute("BEGIN")
        return self._conn

    def query(self, sql: Any, params: Any = None) -> psycopg.Cursor[Any]:
        """Run a statement (rows as dicts); with a BEGIN still pending, both go in one round trip."""
        if not self._begin_pending:
            return self._conn.cursor(row_factory=dict_row).execute(sql, params)
        self._begin_pending = False
        with self._conn.pipeline():
            self._conn.execute("BEGIN")
            cursor = self._conn.cursor(row_factory=dict_row).execute(sql, params)
        return cursor

    def buffer(self, kind: str, row: Any, flush: Callable[[psycopg.Connection[Any], list[Any]], Any]) -> None:
        """Keep ``row`` to be written with the others of its ``kind`` by ``flush(conn, rows)``
        just before the outermost COMMIT (one statement instead of one per row); a savepoint
        that rolls back drops its rows."""
        self.buffered.setdefault(kind, []).append(row)
        self._flushers.setdefault(kind, flush)

    def _merge_into(self, outer: Transaction) -> None:
        """A released savepoint hands its callbacks and kept rows to the block around it."""
        outer._callbacks.extend(self._callbacks)
        for kind, rows in self.buffered.items():
            outer.buffered.setdefault(kind, []).extend(rows)
            outer._flushers.setdefault(kind, self._flushers[kind])

    def _flush(self) -> None:
        # "woken" last: it reads what the statements before it gave back (the events' attention
        # refresh may give a slot back too: a run made ready with its step due later)
        for kind in sorted(self.buffered, key=lambda k: k == "woken"):
            rows = self.buffered[kind]
            if rows:
                self._flushers[kind](self.conn, rows)
        self.buffered.clear()
        hook = self.database.notice_hook
        if hook is not None and hook.wanted():  # after every write: the notices its triggers left
            _read_notices(self, hook)

    def after_commit(self, callback: Callable[[], Any]) -> None:
        """Run ``callback`` once the outermost transaction commits; never if this block rolls back."""
        self._callbacks.append(callback)

    def callbacks(self) -> list[Callable[[], Any]]:
        """The after-commit callbacks of this block (for a block whose commit is someone else's)."""
        return list(self._callbacks)

    def watch_woken(self, send: Callable[[list[int]], Any]) -> None:
        """Just before COMMIT, read which waiting steps a slot given back in this block woke (the
        SQL of migration 0017 leaves their ids in the setting ``pgbus.woken``); once committed, call
        ``send`` with them. The read travels with the COMMIT (a pipelined block: no round trip)."""
        if "woken" not in self.buffered:
            self.buffer("woken", send, _read_woken)

    def execute(self, query: Any, params: Any = None) -> psycopg.Cursor[Any]:
        """Run a statement on this transaction's connection (rows as dicts)."""
        cur = self.conn.cursor(row_factory=dict_row)
        return cur.execute(query, params)


#: A row as the library reads it: column name to value.
Row = dict[str, Any]


def _read_woken(conn: psycopg.Connection[Any], senders: list[Callable[[list[int]], Any]]) -> None:
    tx = _current.get()
    assert tx is not None
    cursor = conn.cursor()
    cursor.execute("SELECT current_setting('pgbus.woken', true)", prepare=AFTER_A_FAILURE)

    def send() -> None:
        row = cursor.fetchone()
        woken = [int(part) for part in row[0].split(",") if part] if row and row[0] else []
        if woken:
            senders[0](woken)

    tx.after_commit(send)


class NoticeHook(Protocol):
    """What reads a transaction's notices (pgbus_flask.notify.NoticeHook)."""

    def wanted(self) -> bool: ...

    def committed(self, notices: list[dict[str, Any]]) -> None: ...


def _read_notices(tx: Transaction, hook: NoticeHook) -> None:
    """Read the notices the triggers of migration 0019 left in the setting ``pgbus.notices`` (the read
    travels with the COMMIT in a pipelined block) and hand them to ``hook`` once committed."""
    from .signals import parse

    cursor = tx.conn.cursor()
    cursor.execute("SELECT current_setting('pgbus.notices', true)", prepare=AFTER_A_FAILURE)

    def committed() -> None:
        row = cursor.fetchone()
        notices = parse(row[0] if row else None)
        if notices:
            hook.committed(notices)

    tx.after_commit(committed)


def run(target: Transaction | psycopg.Connection[Any], name: str | sql.Composable, params: Any = None,
        *, prepare: bool | None = None) -> psycopg.Cursor[Row]:
    """Run a statement on a transaction block or a connection; its rows come as dicts.

    ``name`` names a statement of ``pgbus_flask/sql/*.sql``, or is a statement composed by
    :mod:`pgbus_flask.filters` (its text depends on the arguments). Given a block whose BEGIN is
    still pending, both go in one round trip (:meth:`Transaction.query`). The same name sends the
    same text every time, so psycopg prepares a statement the process runs often; ``prepare=False``
    for one that follows, in a pipeline, a statement that may fail (see :data:`AFTER_A_FAILURE`).
    """
    text = name if isinstance(name, sql.Composable) else STATEMENTS.get(name) or statement(name)
    if isinstance(target, Transaction):
        return target.query(text, params)
    return target.cursor(row_factory=dict_row).execute(text, params, prepare=prepare)  # type: ignore[arg-type]


#: ``prepare=`` for a statement that follows, in one pipeline, a statement that may fail. PostgreSQL
#: skips everything after an error until the pipeline's sync, the Parse of a statement psycopg chose
#: to prepare there too (its fifth run on the connection); psycopg still counts it as prepared, and
#: every later run of it on that connection fails with 'prepared statement "_pg3_N" does not exist'.
#: Such statements are never prepared (BEGIN and COMMIT gain nothing from it anyway).
AFTER_A_FAILURE = False


def run_many(target: psycopg.Connection[Any], name: str, params_seq: Any) -> None:
    """Run the named statement once for each parameters of ``params_seq`` (psycopg's executemany)."""
    with target.cursor() as cur:
        cur.executemany(STATEMENTS.get(name) or statement(name), params_seq)


def fetch_one(target: Transaction | psycopg.Connection[Any], name: str | sql.Composable,
              params: Any = None) -> Row | None:
    """The first row of :func:`run` (None when there is none)."""
    return run(target, name, params).fetchone()


def fetch_all(target: Transaction | psycopg.Connection[Any], name: str | sql.Composable,
              params: Any = None) -> list[Row]:
    """Every row of :func:`run`."""
    return run(target, name, params).fetchall()


def in_forked_horse() -> bool:
    """Whether this process is the horse of a forking RQ worker (RQ's ``Worker``, which a plain
    ``rq worker`` runs, ``PgbusForkWorker``, ``SpawnWorker``), inside the one job it was made for:
    such a worker sets RQ_JOB_ID to that job's id before the horse starts. Its parent sets it too,
    but never runs a job itself; a ``SimpleWorker`` does not set it."""
    job_id = os.environ.get("RQ_JOB_ID")
    if not job_id:
        return False
    from rq import get_current_job

    job = get_current_job()
    return job is not None and job.id == job_id


class HorsePool:
    """The connections of a process that runs one job and exits (a forking worker's horse).

    What ConnectionPool does for a long-lived process costs a horse more than its job: a probe
    connection, a connection opened ahead by a pool thread, the scheduler and worker threads.
    Here a connection is opened in the caller's thread when one is asked for and none is idle,
    and kept for the next request (up to ``max_size`` idle); a one-step job opens exactly one.
    Same interface as the part of psycopg_pool's that pgbus uses (connection, getconn/putconn,
    check, wait, close, get_stats), thread-safe.
    """

    def __init__(self, url: str, *, max_size: int, kwargs: dict[str, Any], connect_timeout: int = 10) -> None:
        self.url, self.max_size, self.kwargs, self.connect_timeout = url, max_size, kwargs, connect_timeout
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self._opened = self._requests = 0
        self._closed = False

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        with self._lock:
            self._requests += 1
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn
        conn = _connect(self.url, connect_timeout=self.connect_timeout, **self.kwargs)
        with self._lock:
            self._opened += 1
        return conn

    def putconn(self, conn: psycopg.Connection[Any]) -> None:
        """Take ``conn`` back, rolled back to IDLE (as ConnectionPool does) or closed if it cannot be."""
        status = conn.info.transaction_status
        if status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
            try:
                conn.rollback()
            except psycopg.Error:
                conn.close()
        elif status != pq.TransactionStatus.IDLE:  # ACTIVE (returned mid-operation) or UNKNOWN (closed)
            conn.close()
        with self._lock:
            if not conn.closed and not self._closed and len(self._idle) < self.max_size:
                self._idle.append(conn)
                return
        conn.close()

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        conn = self.getconn(timeout)
        try:
            yield conn
        finally:
            self.putconn(conn)

    def check(self) -> None:
        """Close the idle connections the server has closed."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            try:
                conn.execute("")
            except psycopg.Error:
                conn.close()
                continue
            self.putconn(conn)

    def wait(self, timeout: float = 30.0) -> None:
        """Nothing to wait for: no connection is opened ahead."""

    def close(self, timeout: float = 5.0) -> None:
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for conn in idle:
            conn.close()

    def get_stats(self) -> dict[str, int]:
        """psycopg_pool's names: connections opened so far, idle now, requests served."""
        with self._lock:
            return {"connections_num": self._opened, "pool_available": len(self._idle),
                    "requests_num": self._requests, "pool_max": self.max_size}


def prepare_for_fork() -> None:
    """Do once, in a forking worker before it forks, what each horse would otherwise redo: psycopg's
    parse of every named statement (its cache holds 128 queries; the library has about 110) and the
    regular expression its array dumper compiles on first use. Opens no connection; best effort (these
    are psycopg internals: if they move, horses only do the work themselves again)."""
    try:
        from psycopg import _queries
        from psycopg.types import array
    except ImportError:  # pragma: no cover - psycopg moved them
        return
    for text in STATEMENTS.values():
        with contextlib.suppress(Exception):
            _queries._query2pg(text.encode("utf-8"), "utf-8")
    with contextlib.suppress(Exception):
        array._get_needs_quotes_regexp(b",")


#: What :attr:`Database.pool` is: psycopg's pool, or in a forking worker's horse a :class:`HorsePool`.
Pool = ConnectionPool | HorsePool


def _connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """One connection, a URL libpq cannot parse named as the setting at fault."""
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.ProgrammingError as exc:  # libpq could not parse it (and may quote it)
        raise ConfigError("PGBUS_DATABASE_URL", f"is not a connection string libpq accepts: "
                                                f"{_first_line(exc)}") from None


_current: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar("pgbus_transaction", default=None)


class Database:
    """A lazily opened, fork-aware psycopg pool for one database URL.

    ``pooler="transaction"`` (PGBUS_DATABASE_POOLER) says a transaction-mode pooler such as
    PgBouncer sits in front: each transaction may reach another server connection, so no
    connection pgbus opens prepares statements on the server (psycopg does after 5 runs of one).
    """

    def __init__(self, url: str, *, max_size: int = 5, pooler: str = "session") -> None:
        self.url = url
        self.max_size = max_size
        self.pooler = pooler
        self._pool: Pool | None = None
        self._pid = 0
        self._lock = threading.Lock()
        #: Asked at each outermost COMMIT whether to read the transaction's notices (pgbus_flask.notify).
        self.notice_hook: NoticeHook | None = None
        _DATABASES.add(self)

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """What every psycopg connection to this database is opened with (beside the URL)."""
        return {"prepare_threshold": None} if self.pooler == "transaction" else {}

    @property
    def pool(self) -> Pool:
        if self._pool is None or self._pid != os.getpid():
            with self._lock:
                if self._pool is not None and self._pid != os.getpid():
                    if isinstance(self._pool, ConnectionPool):
                        _ORPHANED_POOLS.append(self._pool)
                    else:  # the parent's idle connections: keep them from being closed here
                        _ORPHANED_CONNECTIONS.extend(self._pool._idle)
                    self._pool = None
                if self._pool is None and in_forked_horse():
                    self._pool = HorsePool(self.url, max_size=self.max_size,
                                           kwargs={"autocommit": True, **self.connect_kwargs})
                    self._pid = os.getpid()
                if self._pool is None:
                    # One direct connection first: a refused or unknown server fails at once
                    # instead of after the pool's timeout (a dashboard page should not hang).
                    _connect(self.url, connect_timeout=5, **self.connect_kwargs).close()
                    pool = ConnectionPool(
                        self.url, min_size=1, max_size=self.max_size, open=False,
                        kwargs={"autocommit": True, **self.connect_kwargs}, timeout=10, name="pgbus",
                    )
                    # Wait for the first connection: in a forked horse a background
                    # connect would race the first checkout and open a second one.
                    try:
                        pool.open(wait=True, timeout=10)
                    except PoolTimeout:
                        pool.close()
                        raise
                    self._pool, self._pid = pool, os.getpid()
        return self._pool

    def discard_broken(self) -> None:
        """Drop pooled connections the server has closed (after an outage or a restart)."""
        try:
            self.pool.check()
        except Exception:
            log.debug("pgbus: pool check failed", exc_info=True)

    def close(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.close()
        self._pool = None

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled autocommit connection. The boundary where psycopg's errors become the
        library's (:func:`translate`): DatabaseUnavailable for an outage only, SchemaMissing,
        and DatabaseError for every other refusal (a size limit, a timeout, a cancelled query)."""
        try:
            with self.pool.connection() as conn:
                yield conn
        except (PoolTimeout, psycopg.OperationalError, psycopg.DataError, psycopg.errors.UndefinedTable,
                psycopg.errors.UndefinedColumn) as exc:
            translated = translate(exc)
            if translated is None:
                raise
            raise translated from exc

    @contextmanager
    def reading(self) -> Iterator[psycopg.Connection[Any]]:
        """The open transaction's connection (to read its own writes), else a pooled one."""
        tx = _current.get()
        if tx is not None and tx.database is self:
            yield tx.conn
            return
        with self.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self, conn: psycopg.Connection[Any] | None = None, *,
                    pipeline: bool = False) -> Iterator[Transaction]:
        """A transaction block with ``after_commit`` callbacks.

        Inside another block of this database (same connection or none given)
        it is a savepoint: its callbacks join the outer block's if it succeeds,
        and are dropped if it rolls back. The outermost block commits, then
        runs the callbacks in order; a callback that raises is logged and the
        rest still run.

        :param conn: a psycopg connection the application owns. The block is
            the application's transaction on it: the application's own writes
            in the block commit or roll back with the workflow rows.
        :param pipeline: when the block is the outermost one on a pooled connection,
            its BEGIN travels with its first :meth:`Transaction.query` and its kept rows
            with its COMMIT, each in one round trip (psycopg's pipeline mode). Ignored for
            savepoints and the application's connection.
        """
        outer = _current.get()
        if outer is not None and outer.database is self and (conn is None or conn is outer.conn):
            rolled_back = False
            with outer.conn.transaction():
                tx = Transaction(self, outer.conn, outer)
                token = _current.set(tx)
                try:
                    yield tx
                except psycopg.Rollback:  # psycopg rolls the savepoint back and swallows it: so do its rows
                    rolled_back = True
                    raise
                finally:
                    _current.reset(token)
            if not rolled_back:
                tx._merge_into(outer)
            return
        if conn is not None:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                raise PgbusError(
                    "the connection given to transaction() is already inside a transaction, so pgbus cannot "
                    "know when it commits: open bus.transaction(conn=...) where the transaction begins"
                )
            with self._outermost(conn) as tx:
                yield tx
            return
        with self.connection() as pooled, self._outermost(pooled, pipeline=pipeline) as tx:
            yield tx

    @contextmanager
    def joined(self, tx: Transaction) -> Iterator[None]:
        """Make ``tx`` (a block on a connection whose transaction someone else commits: a
        SQLAlchemy session's, see pgbus_flask.orm) the current one, with the errors translated."""
        with self._translated(), self._current_is(tx):
            yield

    @contextmanager
    def _outermost(self, conn: psycopg.Connection[Any], *, pipeline: bool = False) -> Iterator[Transaction]:
        if pipeline:
            with self._pipelined(conn) as tx:
                yield tx
            return
        tx = Transaction(self, conn, None)
        rolled_back = False
        with self._translated(), self._current_is(tx):
            with conn.transaction():
                try:
                    yield tx
                except psycopg.Rollback:  # psycopg rolls back and swallows it: nothing committed, nothing to send
                    rolled_back = True
                    raise
                tx._flush()
        if not rolled_back:
            self._run_callbacks(tx)

    @contextmanager
    def _pipelined(self, conn: psycopg.Connection[Any]) -> Iterator[Transaction]:
        """An outermost block on a pooled (autocommit) connection whose BEGIN travels with its first
        statement (:meth:`Transaction.query`) and whose kept rows travel with its COMMIT."""
        tx = Transaction(self, conn, None, begin_pending=True)
        with self._translated(), self._current_is(tx):
            try:
                yield tx
                if not tx._begin_pending:  # nothing was sent: nothing to commit
                    with conn.pipeline():
                        tx._flush()
                        conn.execute("COMMIT", prepare=AFTER_A_FAILURE)
            except psycopg.Rollback:  # as psycopg's own blocks do: rolled back quietly, nothing to send
                if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    conn.execute("ROLLBACK")
                return
            except BaseException:
                if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    with contextlib.suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                raise
        self._run_callbacks(tx)

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """psycopg's errors as the library's (:func:`translate`) where it has one for them."""
        try:
            yield
        except (psycopg.OperationalError, psycopg.DataError, psycopg.errors.UndefinedTable,
                psycopg.errors.UndefinedColumn) as exc:
            translated = translate(exc)
            if translated is None:
                raise
            raise translated from exc

    @contextmanager
    def _current_is(self, tx: Transaction) -> Iterator[None]:
        token = _current.set(tx)
        try:
            yield
        finally:
            _current.reset(token)

    @staticmethod
    def _run_callbacks(tx: Transaction) -> None:
        for callback in tx._callbacks:
            try:
                callback()
            except Exception:
                log.exception("pgbus after-commit callback %r failed", callback)


#: Every Database of this process, so that a forked child gets unheld locks (below).
_DATABASES: weakref.WeakSet[Database] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A fork while another thread (the sweep's, opening the pool) held a Database's lock would
    # leave it held forever in the child: a forking worker's horse then hangs on its first query.
    for database in list(_DATABASES):
        database._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def current_transaction() -> Transaction | None:
    """The innermost open ``transaction()`` block of this context, if any."""
    return _current.get()
