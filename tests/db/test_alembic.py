"""Alembic and Flask-Migrate: autogenerate leaves pgbus's objects alone, and a revision can run pgbus's migrations.

Each test works in databases of its own (created and dropped here), through
Alembic's own ``init`` template and Flask-Migrate's ``flask db`` commands.
"""

from __future__ import annotations

import importlib.util
import io
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from alembic import command
from alembic.config import Config
from flask import Flask
from sqlalchemy import ForeignKey, Index, MetaData, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from pgbus_flask import PgbusError
from pgbus_flask import engine as engine_module
from pgbus_flask.handle import Run
from pgbus_flask.migrate import apply, migrations
from pgbus_flask.testing import fresh_database
from tests.support import work
from tests.support.schema import catalog
from tests.workflows import ThreeSteps


@contextmanager
def database(server_url: str, label: str) -> Iterator[str]:
    """A new empty database, dropped afterwards."""
    name = f"pgbus_alembic_{os.getpid()}_{label}"
    url = fresh_database(server_url, name)
    try:
        yield url
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlalchemy_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(("postgresql+psycopg", *parts[1:]))


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    __table_args__ = (Index("orders_by_email", "email"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(200))


class OrderLine(Base):
    __tablename__ = "order_lines"
    id: Mapped[int] = mapped_column(primary_key=True)
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"))


class RunRow(Base):
    """An app reading pgbus's runs through the ORM (a few columns, different types)."""
    __tablename__ = "pgbus_workflows"
    id: Mapped[int] = mapped_column(primary_key=True)
    status: Mapped[str] = mapped_column(String(20))


def alembic_env(tmp_path: Path, url: str, metadata: MetaData, *, two_lines: bool) -> Config:
    """Alembic's generic template, its env.py reading ``metadata``; with ``two_lines``, the two
    lines docs/alembic.md asks for."""
    folder = tmp_path / "alembic"
    command.init(Config(str(tmp_path / "alembic.ini"), stdout=io.StringIO()), str(folder))
    env = (folder / "env.py").read_text()
    env = env.replace("target_metadata = None", 'target_metadata = config.attributes["metadata"]')
    if two_lines:
        env = env.replace("from alembic import context", "from alembic import context\n"
                          "from pgbus_flask.alembic import include_object")
        env = env.replace("connection=connection, target_metadata=target_metadata",
                          "connection=connection, target_metadata=target_metadata, include_object=include_object")
        assert env.count("include_object") == 3
    (folder / "env.py").write_text(env)
    # No ini file: env.py then leaves this process's logging configuration alone.
    cfg = Config(stdout=io.StringIO())
    cfg.set_main_option("script_location", str(folder))
    cfg.set_main_option("sqlalchemy.url", sqlalchemy_url(url))
    cfg.attributes["metadata"] = metadata
    return cfg


def autogenerate(cfg: Config, message: str) -> str:
    """The text of the revision ``alembic revision --autogenerate`` writes."""
    script = command.revision(cfg, message=message, autogenerate=True)
    assert script is not None and not isinstance(script, list)
    return Path(script.path).read_text()


def upgrade_body(revision: str) -> str:
    found = re.search(r"def upgrade\(\)[^:]*:\n(.*?)\n\ndef downgrade", revision, re.S)
    assert found, revision
    return found.group(1)


def test_every_object_pgbus_creates_carries_its_prefix(server_url: str) -> None:
    """What the include_object filter relies on: pgbus_ names every object pgbus makes."""
    with database(server_url, "prefix") as url, psycopg.connect(url, autocommit=True) as conn:
        apply(conn)
        names = conn.execute("""
            SELECT 'relation', relname FROM pg_class WHERE relnamespace = 'public'::regnamespace
            UNION ALL SELECT 'constraint', conname FROM pg_constraint WHERE connamespace = 'public'::regnamespace
            UNION ALL SELECT 'function', proname FROM pg_proc WHERE pronamespace = 'public'::regnamespace
            UNION ALL SELECT 'trigger', tgname FROM pg_trigger WHERE NOT tgisinternal
            UNION ALL SELECT 'type', typname FROM pg_type WHERE typnamespace = 'public'::regnamespace""").fetchall()
    assert len(names) > 40
    assert [(kind, name) for kind, name in names if not name.lstrip("_").startswith("pgbus_")] == []


def test_autogenerate_without_the_filter_would_drop_pgbus_and_with_it_sees_only_the_models(
        server_url: str, tmp_path: Path) -> None:
    with database(server_url, "autogen") as url:
        with psycopg.connect(url, autocommit=True) as conn:
            apply(conn)

        unfiltered = autogenerate(alembic_env(tmp_path / "plain", url, Base.metadata, two_lines=False), "orders")
        assert "op.drop_table('pgbus_workflow_steps')" in unfiltered  # what the issue reports
        assert "op.drop_column('pgbus_workflows', 'current_step')" in unfiltered

        cfg = alembic_env(tmp_path / "filtered", url, Base.metadata, two_lines=True)
        revision = autogenerate(cfg, "orders")
        assert "op.create_table('orders'" in revision
        assert "op.create_table('order_lines'" in revision
        assert "op.create_index('orders_by_email'" in revision
        assert "pgbus" not in revision

        command.upgrade(cfg, "head")
        assert "op." not in upgrade_body(autogenerate(cfg, "nothing")), "nothing left to change"
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT count(*) FROM pgbus_schema_migrations").fetchone() == (len(migrations()),)


PGBUS_REVISION = '''\
"""pgbus tables"""
from alembic import op

import pgbus_flask.alembic

revision = "0001pgbus"
down_revision = None


def upgrade():
    pgbus_flask.alembic.upgrade(op)


def downgrade():
    pass
'''


def test_a_revision_applies_what_flask_pgbus_migrate_has_not(server_url: str, tmp_path: Path) -> None:
    """A database an older pgbus migrated (0001 only) gets the rest from the revision, recorded
    alike: flask pgbus migrate then finds nothing to do, and the schema is a fresh one's."""
    with database(server_url, "reference") as reference, database(server_url, "partial") as url:
        with psycopg.connect(reference, autocommit=True) as conn:
            apply(conn)
        first, sql = migrations()[0]
        with psycopg.connect(url) as conn:
            conn.execute("CREATE TABLE pgbus_schema_migrations"
                         " (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
            conn.execute(sql.encode())
            conn.execute("INSERT INTO pgbus_schema_migrations (version) VALUES (%s)", (first,))

        cfg = alembic_env(tmp_path, url, MetaData(), two_lines=True)
        (Path(cfg.get_main_option("script_location") or "") / "versions" / "0001_pgbus.py").write_text(PGBUS_REVISION)
        with pytest.raises(PgbusError, match="offline mode"):
            command.upgrade(cfg, "head", sql=True)
        command.upgrade(cfg, "head")

        with psycopg.connect(url, autocommit=True) as conn:
            versions = [row[0] for row in conn.execute("SELECT version FROM pgbus_schema_migrations ORDER BY 1")]
            assert versions == [version for version, _ in migrations()]
            assert apply(conn) == []
            assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [("0001pgbus",)]
        assert catalog(url) == catalog(reference)
        command.upgrade(cfg, "0001pgbus")  # again: nothing to do, no error


SHOP = '''\
from __future__ import annotations

import os

from flask import Flask
from flask_migrate import Migrate
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from pgbus_flask import PgBus
from pgbus_flask.alembic import without_pgbus


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)


class Order(db.Model):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    total: Mapped[int]


def not_legacy(obj, name, type_, reflected, compare_to):
    """The app's own filter: a table another tool owns."""
    return not (type_ == "table" and name == "legacy_report")


app = Flask(__name__)
app.config.update(SQLALCHEMY_DATABASE_URI=os.environ["SHOP_SQLALCHEMY_URL"],
                  PGBUS_DATABASE_URL=os.environ["SHOP_DATABASE_URL"], PGBUS_REDIS_URL=os.environ["SHOP_REDIS_URL"])
db.init_app(app)
Migrate(app, db, include_object=without_pgbus(not_legacy))
PgBus(app)
'''


def flask(folder: Path, url: str, redis_url: str, *args: str) -> str:
    """``flask ARGS`` in a process of its own (Flask-Migrate's env.py reconfigures logging)."""
    env = {**os.environ, "PYTHONPATH": str(folder), "FLASK_APP": "shop", "SHOP_SQLALCHEMY_URL": sqlalchemy_url(url),
           "SHOP_DATABASE_URL": url, "SHOP_REDIS_URL": redis_url}
    done = subprocess.run([sys.executable, "-m", "flask", *args], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@contextmanager
def shop_app(folder: Path, url: str, redis_url: str) -> Iterator[Flask]:
    """The shop app of ``folder``, in this process."""
    (folder / "shop.py").write_text(SHOP)
    os.environ.update(SHOP_SQLALCHEMY_URL=sqlalchemy_url(url), SHOP_DATABASE_URL=url, SHOP_REDIS_URL=redis_url)
    spec = importlib.util.spec_from_file_location(f"shop_{os.getpid()}", folder / "shop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # SQLAlchemy resolves the models' annotations through it
    try:
        spec.loader.exec_module(module)
        yield module.app
    finally:
        del sys.modules[spec.name]
        for name in ("SHOP_SQLALCHEMY_URL", "SHOP_DATABASE_URL", "SHOP_REDIS_URL"):
            os.environ.pop(name, None)
        if hasattr(module, "app"):
            module.app.extensions["pgbus"].close()
        engine_module._default = None


@pytest.mark.slow  # starts a process
def test_flask_migrate_with_one_history(server_url: str, redis_url: str, clean: None, tmp_path: Path) -> None:
    """flask db upgrade creates pgbus's tables from a revision and flask pgbus migrate agrees;
    flask db migrate then writes the models' tables and nothing of pgbus's (nor what the app's
    own filter leaves out), and the app runs workflows on that schema."""
    with database(server_url, "flask_migrate") as url, shop_app(tmp_path, url, redis_url) as app:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE legacy_report (id int PRIMARY KEY)")
        cli = app.test_cli_runner()
        assert cli.invoke(args=["db", "init", "--directory", str(tmp_path / "migrations")]).exit_code == 0
        versions = tmp_path / "migrations" / "versions"
        (versions / "0001_pgbus.py").write_text(PGBUS_REVISION)

        flask(tmp_path, url, redis_url, "db", "upgrade")
        migrated = cli.invoke(args=["pgbus", "migrate"])
        assert migrated.exit_code == 0 and "schema is up to date" in migrated.output

        flask(tmp_path, url, redis_url, "db", "migrate", "-m", "orders")
        written = [p for p in versions.glob("*.py") if p.name != "0001_pgbus.py"]
        assert len(written) == 1
        body = upgrade_body(written[0].read_text())
        assert "op.create_table('orders'" in body
        assert "pgbus" not in body and "legacy_report" not in body

        with app.app_context():
            run = ThreeSteps.start(order_id=1)
            work(app.extensions["pgbus"])
            assert Run(app.extensions["pgbus"], run.workflow_id).status == "finished"


@pytest.mark.slow  # starts a process
def test_the_package_imports_without_alembic_or_sqlalchemy() -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["alembic"] = sys.modules["sqlalchemy"] = sys.modules["flask_sqlalchemy"] = None
        import pgbus_flask, pgbus_flask.alembic, pgbus_flask.web, pgbus_flask.cli
        assert pgbus_flask.alembic.include_object(None, "pgbus_workflows", "table", True, None) is False
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
