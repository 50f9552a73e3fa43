"""Alembic and Flask-Migrate: keep autogenerate off pgbus's tables, or run pgbus's migrations from a revision.

pgbus owns every database object whose name starts with ``pgbus_`` (its
tables, their indexes, constraints and sequences, its trigger and function)
and migrates them itself (``flask pgbus migrate``). An app whose models
declare none of them would otherwise get a ``drop_table`` for each from
``flask db migrate``::

    # Flask-Migrate: no env.py change needed
    from pgbus_flask.alembic import include_object
    migrate = Migrate(app, db, include_object=include_object)

    # plain Alembic, in env.py
    from pgbus_flask.alembic import include_object
    context.configure(connection=connection, target_metadata=target_metadata, include_object=include_object)

Teams that want one migration history call :func:`upgrade` from a revision
instead of running ``flask pgbus migrate``; both apply the same files and
record them in ``pgbus_schema_migrations``, so either may run after the other.

This module imports neither Alembic nor SQLAlchemy: it only uses what Alembic hands it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import PgbusError
from .migrate import apply_with

if TYPE_CHECKING:
    from alembic.operations import Operations

log = logging.getLogger("pgbus_flask")

#: The prefix of every object pgbus creates.
PREFIX = "pgbus_"

#: Alembic's ``include_object(object, name, type_, reflected, compare_to) -> bool``.
IncludeObject = Callable[[Any, str | None, str, bool, Any], bool]


def is_pgbus_object(obj: Any, name: str | None, type_: str) -> bool:
    """Whether an object Alembic compares belongs to pgbus: a ``pgbus_*`` table, or a
    column, index or constraint of one (whatever its own name)."""
    if type_ == "table":
        return (name or "").startswith(PREFIX)
    table = getattr(obj, "table", None)
    table_name = getattr(table, "name", None)
    if isinstance(table_name, str):
        return table_name.startswith(PREFIX)
    return (name or "").startswith(PREFIX)


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic's ``include_object`` hook: every object but pgbus's.

    Keeps autogenerate from dropping pgbus's tables (they are in the database and in no
    model) and from creating or altering them (an app may map one read-only).
    """
    return not is_pgbus_object(obj, name, type_)


def without_pgbus(app_filter: IncludeObject) -> IncludeObject:
    """The app's own ``include_object`` hook, with pgbus's objects left out first::

        Migrate(app, db, include_object=without_pgbus(my_include_object))
    """

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        return include_object(obj, name, type_, reflected, compare_to) and bool(
            app_filter(obj, name, type_, reflected, compare_to))

    return include


def upgrade(op: Operations | Any) -> list[str]:
    """Apply pgbus's missing migrations from an Alembic revision's ``upgrade()``; returns
    the versions applied (none when ``flask pgbus migrate`` already did).

    They run in the revision's transaction, under the lock ``flask pgbus migrate``
    takes, and are recorded in ``pgbus_schema_migrations`` as it records them. Needs a
    database connection: Alembic's offline mode (``--sql``) is refused, since what to
    apply depends on what the database already has.

    :param op: ``alembic.op`` (the revision's operations).
    """
    if op.get_context().as_sql:
        raise PgbusError("pgbus_flask.alembic.upgrade() needs a database connection: Alembic's offline "
                         "mode (--sql) cannot know which pgbus migrations the database already has")
    bind = op.get_bind()

    def execute(query: str, params: Sequence[Any] | None) -> Sequence[Sequence[Any]]:
        if params is None:
            # No parameters: the driver sends the text as it is (the migrations hold "%" of their own).
            result = bind.exec_driver_sql(query, execution_options={"no_parameters": True})
        else:
            result = bind.exec_driver_sql(query, tuple(params))
        return result.fetchall() if result.returns_rows else []

    applied = apply_with(execute)
    if applied:
        log.info("pgbus: applied migrations %s", ", ".join(applied))
    return applied
