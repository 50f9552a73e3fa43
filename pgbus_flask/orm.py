"""SQLAlchemy sessions: pgbus writes within the session's transaction and sends jobs after it commits.

``OrderWorkflow.start(..., session=db.session)``, ``run.signal(..., session=...)``,
every verb's ``session=`` and ``bus.transaction(session=...)`` come here. SQLAlchemy is
optional (``pip install pgbus-flask[sqlalchemy]``); nothing imports it until a session is
given.

- **Same database** as ``PGBUS_DATABASE_URL`` (same server and database, checked once per
  session transaction): pgbus writes through the session's own connection, in a savepoint
  of its transaction, so the run and the app's rows commit or roll back together.
- **Another database**: pgbus writes in a transaction of its own, held open and committed
  right after the session's transaction commits (rolled back when it rolls back). The one
  window: PostgreSQL going away between the two commits loses the pgbus writes (logged).
  A session dropped without commit, rollback or close gives the held connection back,
  rolled back, when it is garbage-collected.

Either way the step jobs are enqueued from the session's commit: never after a rollback or
for a ``begin_nested()`` savepoint that rolled back, once after the outermost commit. So that
commit must be the database's COMMIT: a Session joined to a transaction its Connection
already held is refused (docs/decisions.md, "SQLAlchemy sessions").
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from . import db, filters
from .db import Database, Pool, Transaction, current_transaction
from .errors import PgbusError

log = logging.getLogger("pgbus_flask")

_INFO = "pgbus"  # the key of pgbus's bookkeeping in session.info


class _State:
    """What pgbus keeps for one session: callbacks by the session transaction they were made in,
    whether the session's database is pgbus's, and a held pgbus transaction (other database)."""

    def __init__(self) -> None:
        self.callbacks: list[tuple[Any, Callable[[], Any]]] = []
        self.same_database: bool | None = None
        self.held: psycopg.Connection[Any] | None = None
        self.held_return: Callable[[], None] | None = None
        #: Gives the held connection back if the session is dropped without commit, rollback or close.
        self.held_finalizer: weakref.finalize[Any, Any] | None = None
        #: Savepoints of the held transaction, one per begin_nested() of the session that pgbus wrote in.
        self.savepoints: dict[Any, str] = {}
        self.commit_seen = False


def _real_session(session: Any) -> Any:
    """The Session behind Flask-SQLAlchemy's ``db.session`` (a scoped_session), or the session."""
    try:
        from sqlalchemy.orm import Session, scoped_session
    except ImportError:  # pragma: no cover - only without the extra
        raise PgbusError("session= needs SQLAlchemy: pip install 'pgbus-flask[sqlalchemy]'") from None
    if isinstance(session, scoped_session):
        session = session()
    if not isinstance(session, Session):
        raise PgbusError(f"session= takes a SQLAlchemy Session or Flask-SQLAlchemy's db.session, got {session!r:.100}")
    return session


def _driver_connection(session: Any) -> psycopg.Connection[Any]:
    bind = session.connection()  # begins the session's transaction if it has none yet
    dialect = bind.dialect
    if dialect.name != "postgresql" or dialect.driver != "psycopg":
        raise PgbusError(
            f"session= needs SQLAlchemy on PostgreSQL with the psycopg 3 driver; this session uses "
            f"{dialect.name}+{dialect.driver}: write the URL as postgresql+psycopg://... (pip install psycopg)"
        )
    conn = bind.connection.driver_connection
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        db.run(conn, "begin_now")  # psycopg begins SQLAlchemy's transaction now, so what follows nests in it
    return conn  # type: ignore[no-any-return]


def _refuse_a_joined_transaction(session: Any) -> None:
    """Refuse a Session whose commit is not its database's COMMIT: one that joined a transaction its
    Connection already held (SQLAlchemy's ``join_transaction_mode``). Nothing tells pgbus when that
    transaction commits (the Connection's ``commit`` event comes before the COMMIT), so it could
    neither commit its own transaction nor send a job at the right time."""
    bind = session.connection()
    # SQLAlchemy 2 keeps, per connection of the outermost session transaction: (connection, the
    # Transaction it began or joined, whether its commit commits that, whether it closes it).
    _conn, joined, commits, _closes = session.get_transaction()._connections[bind]
    if commits and joined is bind.get_transaction():
        return
    does = "only releases a savepoint" if joined is not bind.get_transaction() else "leaves it open"
    raise PgbusError(
        f"session= needs a Session whose commit is the database's COMMIT; this one joined a transaction "
        f"its Connection already held (join_transaction_mode={session.join_transaction_mode!r}) and its "
        f"commit {does}, so pgbus cannot know when its writes and jobs may go. Bind the Session to the "
        f"Engine or to a Connection with no transaction begun, or give it join_transaction_mode="
        f"'control_fully' on the Connection's outermost transaction"
    )


def _state(session: Any) -> _State:
    state = session.info.get(_INFO)
    if state is None:
        from sqlalchemy import event

        state = session.info[_INFO] = _State()
        event.listen(session, "after_commit", _after_commit)
        event.listen(session, "after_soft_rollback", _after_soft_rollback)
        event.listen(session, "after_transaction_end", _after_transaction_end)
    return state  # type: ignore[no-any-return]


def _innermost(session: Any) -> Any:
    return session.get_nested_transaction() or session.get_transaction()


def _within(transaction: Any, ancestor: Any) -> bool:
    while transaction is not None:
        if transaction is ancestor:
            return True
        transaction = transaction.parent
    return False


def _after_commit(session: Any) -> None:
    session.info[_INFO].commit_seen = True


def _after_soft_rollback(session: Any, previous: Any) -> None:
    state: _State = session.info[_INFO]
    state.callbacks = [(tr, cb) for tr, cb in state.callbacks if not _within(tr, previous)]
    undone = [tr for tr in state.savepoints if _within(tr, previous)]
    if undone and state.held is not None and previous.parent is not None:
        outermost = min(undone, key=_depth)
        db.run(state.held, filters.rollback_to(state.savepoints[outermost]))
    for tr in undone:
        del state.savepoints[tr]
    if previous.parent is None:
        state.callbacks = []
        _end_held(state, commit=False)


def _after_transaction_end(session: Any, transaction: Any) -> None:
    state: _State = session.info[_INFO]
    committed, state.commit_seen = state.commit_seen, False
    if transaction.parent is not None:
        return  # a savepoint ended: its callbacks wait for the outermost commit
    callbacks, state.callbacks = state.callbacks, []
    state.same_database = None
    if not committed:
        _end_held(state, commit=False)
        return
    if state.held is not None and not _end_held(state, commit=True):
        return  # pgbus's own commit failed: nothing of it exists, so nothing is sent
    for _transaction, callback in callbacks:
        try:
            callback()
        except Exception:
            log.exception("pgbus after-commit callback %r failed", callback)


def _depth(transaction: Any) -> int:
    depth = 0
    while transaction.parent is not None:
        transaction, depth = transaction.parent, depth + 1
    return depth


def _end_held(state: _State, *, commit: bool) -> bool:
    conn, give_back = state.held, state.held_return
    state.held = state.held_return = None
    state.savepoints = {}
    if state.held_finalizer is not None:
        state.held_finalizer.detach()
        state.held_finalizer = None
    if conn is None:
        return True
    try:
        conn.execute("COMMIT" if commit else "ROLLBACK")
        return True
    except Exception:
        log.exception("pgbus: %s of pgbus's own transaction after the session's failed; its writes are lost",
                      "COMMIT" if commit else "ROLLBACK")
        return False
    finally:
        if give_back is not None:
            give_back()


def _same_database(database: Database, conn: psycopg.Connection[Any]) -> bool:
    theirs = db.fetch_one(conn, "database_identity")
    with database.connection() as ours:
        mine = db.fetch_one(ours, "database_identity")
    return theirs == mine


@contextmanager
def session_transaction(database: Database, session: Any) -> Iterator[Transaction]:
    """A pgbus transaction block inside ``session``'s transaction (see the module's docstring)."""
    session = _real_session(session)
    _refuse_a_joined_transaction(session)
    session.flush()  # the app's pending rows first, as an autoflush would
    state = _state(session)
    conn = _driver_connection(session)
    if state.same_database is None:
        state.same_database = _same_database(database, conn)
    if not state.same_database:
        conn = _held_connection(database, state, session)
    outer = current_transaction()
    if outer is not None and outer.conn is conn:
        with database.transaction() as tx:  # already inside: a savepoint of the block around it
            yield tx
        return
    tx = Transaction(database, conn, None)
    with database.joined(tx):
        with conn.transaction():  # a savepoint: a refusal leaves the session's transaction usable
            yield tx
            tx._flush()
    made_in = _innermost(session)
    state.callbacks += [(made_in, callback) for callback in tx.callbacks()]


def _held_connection(database: Database, state: _State, session: Any) -> psycopg.Connection[Any]:
    """pgbus's own connection for this session transaction, in a transaction held open, with a
    savepoint for each of the session's begin_nested() levels (so that rolling one back undoes
    what pgbus wrote inside it)."""
    if state.held is None:
        pool = database.pool
        held = pool.getconn()
        try:
            held.execute("BEGIN")
        except Exception:
            pool.putconn(held)
            raise
        state.held, state.held_return = held, lambda: pool.putconn(held)
        state.held_finalizer = _give_back_when_dropped(session, pool, held)
    conn = state.held
    chain = []
    level = session.get_nested_transaction()
    while level is not None and level.nested:
        chain.append(level)
        level = level.parent
    for level in reversed(chain):
        if level not in state.savepoints:
            name = f"pgbus_nested_{len(state.savepoints) + 1}"
            db.run(conn, filters.savepoint(name))
            state.savepoints[level] = name
    return conn


# -- the held connection of a Session dropped without commit, rollback or close ----------------
#
# Its finalizer runs from the garbage collector, inside whatever code that interrupts (a putconn
# there waits forever if that code holds the pool's lock): it only queues the connection
# (SimpleQueue.put is safe there); a thread of pgbus's rolls it back and gives it back.

_dropped: queue.SimpleQueue[tuple[Pool, psycopg.Connection[Any]]] = queue.SimpleQueue()
_reclaimer_pid = 0
_reclaimer_lock = threading.Lock()
#: A forked child's copies of the parent's held connections: kept, since closing one would end the
#: parent's session (as db._ORPHANED_POOLS).
_FORKED: list[psycopg.Connection[Any]] = []


def _give_back_when_dropped(session: Any, pool: Pool,
                            conn: psycopg.Connection[Any]) -> weakref.finalize[Any, Any]:
    _start_reclaimer()
    finalizer = weakref.finalize(session, _dropped_session, os.getpid(), pool, conn)
    finalizer.atexit = False  # at exit the connection closes, and PostgreSQL rolls it back
    return finalizer


def _dropped_session(pid: int, pool: Pool, conn: psycopg.Connection[Any]) -> None:
    if os.getpid() == pid:
        _dropped.put((pool, conn))
    else:
        _FORKED.append(conn)


def _start_reclaimer() -> None:
    global _dropped, _reclaimer_pid
    if _reclaimer_pid == os.getpid():
        return
    with _reclaimer_lock:
        if _reclaimer_pid != os.getpid():  # first use, or a forked child (threads do not cross a fork)
            _dropped = queue.SimpleQueue()
            threading.Thread(target=_reclaim, args=(_dropped,), name="pgbus-reclaim", daemon=True).start()
            _reclaimer_pid = os.getpid()


def _reclaim(dropped: queue.SimpleQueue[tuple[Pool, psycopg.Connection[Any]]]) -> None:
    while True:
        pool, conn = dropped.get()
        log.warning("pgbus: a SQLAlchemy Session was dropped without commit, rollback or close while "
                    "pgbus held a transaction for it: pgbus's writes in it are rolled back")
        try:
            conn.execute("ROLLBACK")
        except Exception:
            log.debug("pgbus: rollback of a dropped session's connection failed", exc_info=True)
        try:
            pool.putconn(conn)  # one that could not roll back is broken: the pool replaces it
        except Exception:
            log.exception("pgbus: could not give a dropped session's connection back to its pool")


def _after_fork_in_child() -> None:
    global _reclaimer_lock
    _reclaimer_lock = threading.Lock()  # a fork while another thread held it would leave it held


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# -- the transaction of a @step(transactional=True) --------------------------------------------


def sqlalchemy_installed() -> bool:
    try:
        import sqlalchemy  # noqa: F401
    except ImportError:
        return False
    return True


def _sqlalchemy_engine(database: Database) -> Any:
    """One SQLAlchemy engine per pgbus database, on the psycopg 3 driver, for transactional steps."""
    sa_engine = getattr(database, "_sqlalchemy_engine", None)
    if sa_engine is None:
        from sqlalchemy import create_engine

        url, kwargs = database.url, database.connect_kwargs
        sa_engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url, **kwargs),
                                  pool_size=database.max_size, pool_pre_ping=True)
        database._sqlalchemy_engine = sa_engine  # type: ignore[attr-defined]
    return sa_engine


@contextmanager
def step_transaction(database: Database) -> Iterator[tuple[Transaction, Any]]:
    """The transaction a transactional step runs in, as ``(pgbus block, SQLAlchemy session)``.

    With SQLAlchemy installed, a Session on pgbus's database owns the transaction (so the
    step's ``self.session`` and ``self.conn`` are one transaction): leaving the block flushes
    the session, writes pgbus's kept rows and commits; an exception rolls it all back. Without
    SQLAlchemy it is an ordinary pgbus transaction and the session is None.
    """
    if not sqlalchemy_installed():
        with database.transaction() as tx:
            yield tx, None
        return
    from sqlalchemy.orm import Session

    with Session(_sqlalchemy_engine(database), expire_on_commit=False) as session:
        conn = _driver_connection(session)
        tx = Transaction(database, conn, None)
        try:
            with database.joined(tx):
                yield tx, session
                session.flush()
                tx._flush()
                session.commit()
        except BaseException:
            session.rollback()
            raise
    for callback in tx.callbacks():
        try:
            callback()
        except Exception:
            log.exception("pgbus after-commit callback %r failed", callback)
