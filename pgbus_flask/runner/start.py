"""Starting a run: the run, its first step and its events in one transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from .. import payload, states
from ..errors import InvalidInput, PgbusError, SubjectConflict
from .rows import Row, _now, _q, cap, record_event
from .scheduling import schedule_step

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow


@dataclass(frozen=True)
class Started:
    """What :func:`start` did: the run's id, and (when it inserted the run) its rows as written.

    ``run`` is None when the idempotency key named an existing run: nothing was written.
    """

    workflow_id: Any
    run: Row | None
    first_step: Row | None
    klass: type[Workflow] | None


def start(
    engine: Engine,
    klass: type[Workflow],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    subject: tuple[str, Any] | None,
    idempotency_key: str | None,
    actor: str,
    conn: Any,
) -> Started:
    """Insert a run, its first step and its events in one transaction; send the step after commit.

    The same ``idempotency_key`` returns the existing run and writes nothing.
    A second ongoing run of this class for the same subject raises
    :class:`SubjectConflict`. Arguments that cannot be stored raise
    :class:`ArgumentsNotSerializable` before anything is written.
    """
    if not klass.steps:
        raise PgbusError(f"{klass.__name__} declares no steps")
    arguments = payload.to_json({"args": list(args), "kwargs": dict(kwargs)}, what="arguments")
    subject_type = subject_id = None
    if subject is not None:
        if not (isinstance(subject, (tuple, list)) and len(subject) == 2 and isinstance(subject[0], str)
                and subject[0] and subject[1] is not None and str(subject[1])):
            raise InvalidInput("subject", f"must be a (type, id) pair such as ('Order', 1042), got "
                                          f"{payload.safe_str(repr(subject))[:200]}")
        subject_type = payload.check_text(subject[0], "subject type", max_bytes=states.NAME_LIMIT,
                                          allow_newlines=False)
        subject_id = payload.check_text(str(subject[1]), "subject id", max_bytes=states.KEY_LIMIT)
    if idempotency_key is not None:
        payload.check_text(idempotency_key, "idempotency_key", max_bytes=states.KEY_LIMIT)
    payload.check_text(actor, "actor", max_bytes=states.ACTOR_LIMIT, allow_newlines=False)
    workflow_id = uuid.uuid4()
    with engine.db.transaction(conn) as tx:
        try:
            with tx.conn.transaction():
                run = _q(
                    tx.conn,
                    """
                    INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, subject_type,
                        subject_id, idempotency_key, definition_digest, arguments, started_by)
                    VALUES (%s, %s, 'ready', %s, %s, %s, %s, %s, %s, %s)
                    ON CONFLICT (workflow_class, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
                    RETURNING *
                    """,
                    (workflow_id, klass.workflow_name, klass.steps[0].name, subject_type, subject_id,
                     idempotency_key, klass.definition_digest, Jsonb(arguments), cap(actor, 200)),
                ).fetchone()
        except psycopg.errors.UniqueViolation:
            existing = tx.conn.execute(
                "SELECT workflow_id FROM pgbus_workflows WHERE workflow_class = %s AND subject_type = %s"
                " AND subject_id = %s AND status = ANY(%s)",
                (klass.workflow_name, subject_type, subject_id, list(states.ONGOING)),
            ).fetchone()
            raise SubjectConflict(klass.workflow_name, (subject_type or "", subject_id or ""),
                                  existing[0] if existing else None) from None
        if run is None:
            found = tx.conn.execute(
                "SELECT workflow_id FROM pgbus_workflows WHERE workflow_class = %s AND idempotency_key = %s",
                (klass.workflow_name, idempotency_key),
            ).fetchone()
            assert found is not None
            return Started(found[0], None, None, None)
        record_event(tx, workflow_id, "started", actor,
                     details={"subject": f"{subject_type} {subject_id}" if subject_type else None})
        first = schedule_step(engine, tx, run, klass, klass.steps[0].name, actor=actor, set_current=False)
        return Started(workflow_id, {**run, "db_now": _now(tx)}, first, klass)
