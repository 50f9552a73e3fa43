"""SQLAlchemy sessions (issue 10): start, signal and act inside the app's Flask-SQLAlchemy session,
jobs sent once after it commits; and the ORM in transactional steps.

Real Flask-SQLAlchemy sessions on the test PostgreSQL (and on a second database for the
"another database" case); the queue is RQ's, read back from Redis.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest
from flask import Flask
from flask_sqlalchemy import SQLAlchemy
from psycopg_pool import ConnectionPool, PoolTimeout
from sqlalchemy import Connection, String, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from pgbus_flask import PgBus, PgbusError, Workflow, step
from pgbus_flask import engine as engine_module
from pgbus_flask.engine import Engine
from pgbus_flask.handle import Run
from pgbus_flask.testing import drop_database, fresh_database, wait_until
from tests.support import settings_for
from tests.support import work as run_jobs


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


class Order(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "app_orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    state: Mapped[str] = mapped_column(String(20), default="new")


class OrderFlow(Workflow):
    @step
    def charge(self) -> str:
        return f"charged {self.kwargs['order_id']}"

    @step(transactional=True)
    def mark_paid(self) -> str:
        order = self.session.get(Order, self.kwargs["order_id"])
        order.state = "paid"
        if self.kwargs.get("fail"):
            raise RuntimeError("bookkeeping is down")
        return "paid"


class ShipsOrder(Workflow):
    @step
    def pack(self) -> str:
        return f"packed {self.kwargs['order_id']}"

    @step
    def ship(self) -> str:
        return "shipped"


def sa_url(pg_url: str) -> str:
    return pg_url.replace("postgresql://", "postgresql+psycopg://", 1)


def make_app(pg_url: str, redis_url: str, app_db_url: str) -> Flask:
    app = Flask("shop_test")
    app.config.update(TESTING=True, SECRET_KEY="test", SQLALCHEMY_DATABASE_URI=sa_url(app_db_url),
                      **settings_for(pg_url, redis_url))
    db.init_app(app)
    app.config["TEST_BUS"] = PgBus(app)
    with app.app_context():
        db.drop_all()
        db.create_all()
    return app


@pytest.fixture
def shop(clean: None, pg_url: str, redis_url: str) -> Iterator[Flask]:
    app = make_app(pg_url, redis_url, pg_url)
    yield app
    with app.app_context():
        db.session.remove()
        db.drop_all()
        db.engine.dispose()
    app.extensions["pgbus"].close()
    engine_module._default = None


@pytest.fixture
def other_db(pg_url: str) -> Iterator[str]:
    """A second database on the same server: the app's, not pgbus's."""
    # The URL is built by parts: the embedded server's has its socket in ?host=, which splitting
    # the text on "/" dropped. A name per process, so parallel sessions never share it.
    name = f"pgbus_test_app_other_{os.getpid()}"
    yield fresh_database(pg_url, name)
    drop_database(pg_url, name)


@pytest.fixture
def shop_elsewhere(clean: None, pg_url: str, redis_url: str, other_db: str) -> Iterator[Flask]:
    app = make_app(pg_url, redis_url, other_db)
    yield app
    with app.app_context():
        db.session.remove()
        db.engine.dispose()
    app.extensions["pgbus"].close()
    engine_module._default = None


def bus_engine(app: Flask) -> Engine:
    return app.extensions["pgbus"]  # type: ignore[no-any-return]


def runs(app: Flask) -> int:
    with bus_engine(app).db.connection() as conn:
        return conn.execute("SELECT count(*) FROM pgbus_workflows").fetchone()[0]  # type: ignore[index,no-any-return]


def queued(app: Flask) -> int:
    engine = bus_engine(app)
    return engine.queue(engine.settings.queue).count


def place_order(order_id: int) -> Run:
    db.session.add(Order(id=order_id))
    return ShipsOrder.start(order_id=order_id, subject=("Order", order_id), session=db.session)


@pytest.mark.parametrize("where", ["shop", "shop_elsewhere"])
def test_start_commits_with_the_order_and_sends_once(where: str, request: pytest.FixtureRequest) -> None:
    app: Flask = request.getfixturevalue(where)
    with app.app_context():
        run = place_order(1)
        assert run.status == "ready"
        assert queued(app) == 0, "nothing is sent before the session commits"
        db.session.commit()
        assert runs(app) == 1
        assert queued(app) == 1
        db.session.commit()  # a later commit of the same session sends nothing more
        assert queued(app) == 1
        run_jobs(bus_engine(app))
        assert Run(bus_engine(app), run.workflow_id).status == "finished"
        assert db.session.get(Order, 1) is not None


@pytest.mark.parametrize("where", ["shop", "shop_elsewhere"])
def test_a_rollback_leaves_no_run_and_sends_nothing(where: str, request: pytest.FixtureRequest) -> None:
    app: Flask = request.getfixturevalue(where)
    with app.app_context():
        place_order(2)
        db.session.rollback()
        assert runs(app) == 0
        assert queued(app) == 0
        assert db.session.get(Order, 2) is None
        place_order(3)  # the session goes on working after the rollback
        db.session.commit()
        assert (runs(app), queued(app)) == (1, 1)


@pytest.mark.parametrize("where", ["shop", "shop_elsewhere"])
def test_a_rolled_back_savepoint_takes_its_start_with_it(where: str, request: pytest.FixtureRequest) -> None:
    app: Flask = request.getfixturevalue(where)
    with app.app_context():
        place_order(4)
        nested = db.session.begin_nested()
        place_order(5)
        nested.rollback()
        kept = db.session.begin_nested()
        place_order(6)
        kept.commit()
        assert queued(app) == 0, "a released savepoint sends nothing before the outermost commit"
        db.session.commit()
        engine = bus_engine(app)
        with engine.db.connection() as conn:
            subjects = sorted(r[0] for r in conn.execute("SELECT subject_id FROM pgbus_workflows"))
        assert subjects == ["4", "6"]
        assert queued(app) == 2


def test_verbs_and_signals_act_inside_the_session(shop: Flask) -> None:
    with shop.app_context():
        run = place_order(7)
        db.session.commit()
        run.pause(actor="dashboard:ann", reason="check the address", session=db.session)
        assert run.status == "paused"  # read in the session's transaction
        db.session.rollback()
        assert run.refresh().status == "ready", "the rolled-back pause never happened"
        run.pause(actor="dashboard:ann", session=db.session)
        db.session.commit()
        assert run.refresh().status == "paused"
        queue = bus_engine(shop).queue(bus_engine(shop).settings.queue)
        before = queue.get_job_ids()  # the step's first job, sent by the start
        run.resume(actor="dashboard:ann", session=db.session)
        assert queue.get_job_ids() == before
        db.session.commit()
        after = queue.get_job_ids()
        assert len(after) == 1 and after != before, "resume's step is sent after the commit, replacing the first job"
        result = run.signal("note", {"by": "ann"}, session=db.session)
        db.session.rollback()
        assert result is not None and run.signals() == []


def test_bus_transaction_with_a_session(shop: Flask) -> None:
    bus: PgBus = shop.config["TEST_BUS"]
    with shop.app_context():
        db.session.add(Order(id=8))
        with bus.transaction(session=db.session):
            ShipsOrder.start(order_id=8)
            ShipsOrder.start(order_id=9)
        assert queued(shop) == 0
        db.session.commit()
        assert (runs(shop), queued(shop)) == (2, 2)


def test_an_orm_write_in_a_transactional_step_commits_with_it(shop: Flask) -> None:
    with shop.app_context():
        db.session.add(Order(id=10))
        run = OrderFlow.start(order_id=10, session=db.session)
        db.session.commit()
        failing = OrderFlow.start(order_id=11, fail=True, session=db.session)
        db.session.add(Order(id=11))
        db.session.commit()
        run_jobs(bus_engine(shop))
        db.session.expire_all()
        assert db.session.get(Order, 10).state == "paid"  # type: ignore[union-attr]
        assert Run(bus_engine(shop), run.workflow_id).status == "finished"
        assert db.session.get(Order, 11).state == "new", "the failed step's ORM write rolled back"  # type: ignore[union-attr]
        assert Run(bus_engine(shop), failing.workflow_id).status == "paused"


def test_another_driver_gets_a_clear_error(engine: Engine) -> None:
    sqlite = Session(create_engine("sqlite://"))
    with pytest.raises(PgbusError, match=r"psycopg 3 driver.*sqlite\+pysqlite.*postgresql\+psycopg://"):
        OrderFlow.start(order_id=1, session=sqlite, bus=engine)
    with engine.db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM pgbus_workflows").fetchone()[0] == 0  # type: ignore[index]


def test_a_session_and_a_connection_together_are_refused(engine: Engine) -> None:
    with pytest.raises(PgbusError, match="conn= or session="):
        OrderFlow.start(order_id=1, session=object(), conn=object(), bus=engine)


def test_a_plain_sqlalchemy_session_without_flask(engine: Engine, pg_url: str) -> None:
    """SQLAlchemy 2.x without Flask-SQLAlchemy: a Session of the app's own engine."""
    app_engine = create_engine(sa_url(pg_url))
    try:
        with Session(app_engine) as session:
            run = ShipsOrder.start(order_id=12, session=session, bus=engine)
            assert engine.queue(engine.settings.queue).count == 0
            session.commit()
        assert engine.queue(engine.settings.queue).count == 1
        with Session(app_engine) as session:
            ShipsOrder.start(order_id=13, session=session, bus=engine)
            session.rollback()
        with engine.db.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pgbus_workflows").fetchone()[0] == 1  # type: ignore[index]
        assert run.refresh().status == "ready"
    finally:
        app_engine.dispose()


# -- a Session on a Connection the app hands in (issue 19, item 3) --------------------------------


def joined_session(conn: Connection, how: str) -> Session:
    """A Session on ``conn`` whose commit is not the database's COMMIT, joined as ``how`` says."""
    conn.begin()
    if how == "default in a savepoint":
        conn.begin_nested()
        return Session(bind=conn)
    if how == "control_fully in a savepoint":
        conn.begin_nested()
        return Session(bind=conn, join_transaction_mode="control_fully")
    if how == "default":
        return Session(bind=conn)
    return Session(bind=conn, join_transaction_mode=how)  # type: ignore[arg-type]


@pytest.mark.parametrize("outer", ["commit", "rollback"])
@pytest.mark.parametrize("how", ["default", "default in a savepoint", "create_savepoint",
                                 "control_fully in a savepoint"])
@pytest.mark.parametrize("where", ["shop", "shop_elsewhere"])
def test_a_session_joined_to_its_connections_transaction_is_refused(
        where: str, how: str, outer: str, request: pytest.FixtureRequest) -> None:
    """A Session given a Connection that already holds a transaction joins it (SQLAlchemy's
    join_transaction_mode) and its commit is then no COMMIT: the default mode leaves the outer
    transaction open ("rollback_only"), or, in a savepoint of the Connection, releases a savepoint of
    its own ("create_savepoint", also the usual test-suite recipe); "control_fully" inside a savepoint
    releases that savepoint. Nothing tells pgbus when the outer transaction commits (SQLAlchemy's
    Connection ``commit`` event comes before the COMMIT), so start() is refused, writes nothing and
    sends nothing, whether the outer transaction then commits or rolls back; the app's own
    transaction goes on. ("rollback_only" is the default's first case; "control_fully" on the outer
    transaction itself commits it, so it is accepted: see the next test.)"""
    app: Flask = request.getfixturevalue(where)
    with app.app_context(), db.engine.connect() as conn:
        session = joined_session(conn, how)
        session.add(Order(id=20))
        with pytest.raises(PgbusError, match=r"session=.*COMMIT.*join_transaction_mode.*Engine"):
            ShipsOrder.start(order_id=20, session=session)
        with pytest.raises(PgbusError, match="COMMIT"), app.config["TEST_BUS"].transaction(session=session):
            pass
        session.commit()
        conn.commit() if outer == "commit" else conn.rollback()
        session.close()
    assert (runs(app), queued(app)) == (0, 0)
    with app.app_context():
        assert db.session.query(Order).count() == (1 if outer == "commit" else 0)


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
@pytest.mark.parametrize("how", ["connection with no transaction", "control_fully"])
@pytest.mark.parametrize("where", ["shop", "shop_elsewhere"])
def test_a_session_that_commits_its_connections_transaction_is_accepted(
        where: str, how: str, outcome: str, request: pytest.FixtureRequest) -> None:
    """A Session that begins its Connection's transaction, or takes it over with "control_fully",
    commits it with its own commit: pgbus goes with that commit or rollback."""
    app: Flask = request.getfixturevalue(where)
    with app.app_context(), db.engine.connect() as conn:
        if how == "control_fully":
            conn.begin()
            session = Session(bind=conn, join_transaction_mode="control_fully")
        else:
            session = Session(bind=conn)
        session.add(Order(id=21))
        ShipsOrder.start(order_id=21, session=session)
        assert queued(app) == 0
        session.commit() if outcome == "commit" else session.rollback()
        assert not conn.in_transaction()
        session.close()
    done = 1 if outcome == "commit" else 0
    assert (runs(app), queued(app)) == (done, done)
    with app.app_context():
        assert db.session.query(Order).count() == done


# -- a Session never closed (issue 19, item 4) ---------------------------------------------------


def all_free(engine: Engine) -> bool:
    """Whether every connection of pgbus's pool can be taken at once: none is held for a Session. (Not
    ``pool_size - pool_available`` from the pool's stats: a connection the pool is still opening counts
    as taken there, and under load that made this test fail now and then with nothing held.)"""
    pool = engine.db.pool
    assert isinstance(pool, ConnectionPool)
    taken = []
    try:
        for _ in range(pool.max_size):
            taken.append(pool.getconn(timeout=10))
        return True
    except PoolTimeout:
        return False
    finally:
        for conn in taken:
            pool.putconn(conn)


@pytest.mark.settings(PGBUS_POOL_SIZE=3)
def test_sessions_dropped_unclosed_give_pgbus_its_connections_back(
        engine: Engine, other_db: str, caplog: pytest.LogCaptureFixture) -> None:
    """On another database pgbus holds a pooled connection in a transaction for the session. Ten
    Sessions dropped without commit, rollback or close (with PGBUS_POOL_SIZE=3) give theirs back,
    rolled back, once collected: an eleventh start goes through, and the dropped runs never
    existed. Closing or rolling back without a commit gives it back at once. (On pgbus's own
    database pgbus holds nothing: SQLAlchemy reclaims the session's connection itself.)"""
    app_engine = create_engine(sa_url(other_db))
    try:
        Order.__table__.create(app_engine)
        for order_id in range(10):
            session = Session(app_engine)
            ShipsOrder.start(order_id=order_id, session=session, bus=engine)
            del session
            gc.collect()
        with Session(app_engine) as session:
            run = ShipsOrder.start(order_id=10, session=session, bus=engine)
            session.commit()
        for end in ("close", "rollback"):
            session = Session(app_engine)
            ShipsOrder.start(order_id=11, session=session, bus=engine)
            getattr(session, end)()
            assert all_free(engine), f"{end}() gave the held connection back"
        wait_until(lambda: all_free(engine), message="every held connection back in the pool")
    finally:
        app_engine.dispose()
    with engine.db.connection() as conn:
        ids = [r[0] for r in conn.execute("SELECT workflow_id FROM pgbus_workflows")]
    assert ids == [run.workflow_id], "only the committed session's run exists"
    assert engine.queue(engine.settings.queue).count == 1
    assert "dropped without commit, rollback or close" in caplog.text
