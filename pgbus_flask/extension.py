"""``PgBus``: the Flask extension (and the standalone entry point)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import orm
from . import schedules as stored_schedules
from .config import Settings, keyword_values
from .db import Transaction
from .engine import Engine, default_engine_is_unset, resolve_engine
from .errors import PgbusError
from .schedules import Schedule

if TYPE_CHECKING:
    from flask import Flask

    from .handle import Run


class PgBus:
    """Durable workflows for a Flask app.

    ``PgBus(app)`` or ``bus = PgBus(); bus.init_app(app)`` (several apps
    may share one ``PgBus``: each gets its own engine in
    ``app.extensions["pgbus"]``). ``PgBus(database_url=..., redis_url=...)``
    works without Flask. Keyword settings are the ``PGBUS_*`` keys in lower
    case without the prefix, and win over ``app.config``.
    """

    def __init__(self, app: Flask | None = None, **settings: Any) -> None:
        self._overrides = keyword_values(settings)
        self._standalone: Engine | None = None
        if app is not None:
            self.init_app(app)
        elif self._overrides.get("PGBUS_DATABASE_URL") or self._overrides.get("PGBUS_REDIS_URL"):
            self._standalone = Engine(Settings.load(self._overrides)).make_default()

    def init_app(self, app: Flask) -> None:
        values = {k: v for k, v in app.config.items() if k.startswith("PGBUS_")}
        values.update(self._overrides)
        engine = Engine(Settings.load(values))
        app.extensions["pgbus"] = engine
        if default_engine_is_unset():
            engine.make_default()
        from .cli import pgbus_cli

        app.cli.add_command(pgbus_cli)
        if engine.settings.dashboard_prefix:
            from .web import make_blueprint

            app.register_blueprint(make_blueprint(engine), url_prefix=engine.settings.dashboard_prefix)

    @property
    def engine(self) -> Engine:
        """This bus's engine: the current app's, or the standalone one."""
        if self._standalone is not None:
            return self._standalone
        return resolve_engine()

    @contextmanager
    def transaction(self, conn: Any = None, *, session: Any = None) -> Iterator[Transaction]:
        """See :meth:`pgbus_flask.db.Database.transaction`; with ``session=`` (SQLAlchemy), a
        block inside the session's transaction whose jobs are sent when it commits
        (:func:`pgbus_flask.orm.session_transaction`)."""
        if session is not None:
            if conn is not None:
                raise PgbusError("transaction() takes conn= or session=, not both")
            with orm.session_transaction(self.engine.db, session) as tx:
                yield tx
            return
        with self.engine.db.transaction(conn) as tx:
            yield tx

    def run(self, workflow_id: Any) -> Run:
        """The handle of one run (WorkflowNotFound if there is none)."""
        from .handle import Run

        return Run(self.engine, workflow_id)

    def schedules(self) -> list[Schedule]:
        """Every schedule (stored, or registered here and not yet stored by a sweep), by class name."""
        return stored_schedules.list_schedules(self.engine)

    def schedule(self, name: str) -> Schedule:
        """The schedule of workflow class ``name`` (UnknownSchedule if it declares none)."""
        return stored_schedules.get_schedule(self.engine, name)

    def schedule_events(self, name: str) -> list[dict[str, Any]]:
        """The audit trail of a schedule (declared, changed, paused, resumed ...), newest first."""
        return stored_schedules.schedule_events(self.engine, name)

    def pause_schedule(self, name: str, *, actor: str = "app", reason: str | None = None) -> Schedule:
        """Start no run for ``name``'s schedule until it is resumed (ScheduleConflict if paused already)."""
        return stored_schedules.pause(self.engine, name, actor, reason)

    def resume_schedule(self, name: str, *, actor: str = "app", reason: str | None = None) -> Schedule:
        """Resume a paused schedule; its ``schedule_missed`` decides what was missed meanwhile
        ("skip": nothing of it, "all": every tick). ScheduleConflict if it is not paused."""
        return stored_schedules.resume(self.engine, name, actor, reason)

    def migrate(self) -> list[str]:
        """Apply missing migrations; returns the versions applied."""
        from .migrate import migrate

        return migrate(self.engine.db)

    def sweep(self) -> Any:
        """Run the sweep once (see :mod:`pgbus_flask.sweep`)."""
        from .sweep import sweep

        return sweep(self.engine)

    def close(self) -> None:
        self.engine.close()
