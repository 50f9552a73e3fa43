"""Starting a run: the run, its first step and its events in one transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from .. import db, flow, payload, states, tracing
from ..db import Transaction, current_transaction
from ..errors import InvalidInput, KeyBusy, PgbusError, SubjectConflict
from . import limits
from .rows import Row, cap, record_event
from .scheduling import JOB_PREFIX, priority_of, send, send_after_commit

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
    parent: tuple[Any, str] | None = None,
    priority: int | None = None,
) -> Started:
    """Insert a run, its first step and its events in one transaction; send the step after commit.

    The same ``idempotency_key`` returns the existing run and writes nothing.
    A second ongoing run of this class for the same subject raises
    :class:`SubjectConflict`. Arguments that cannot be stored raise
    :class:`ArgumentsNotSerializable` before anything is written.

    When the app traces (:mod:`pgbus_flask.tracing`), all of it happens in a producer span whose
    traceparent the run keeps, for its steps' spans to link to.
    """
    tracer = tracing.tracer()
    if tracer is None:
        return _start(engine, klass, args, kwargs, subject, idempotency_key, actor, conn, parent, priority, None)
    with tracing.start_span(tracer, klass.workflow_name, klass.steps[0].name if klass.steps else "") as span:
        started = _start(engine, klass, args, kwargs, subject, idempotency_key, actor, conn, parent, priority,
                         tracing.traceparent(span))
        tracing.started(span, started.workflow_id)
        return started


def _start(engine: Engine, klass: type[Workflow], args: Sequence[Any], kwargs: dict[str, Any],
           subject: tuple[str, Any] | None, idempotency_key: str | None, actor: str, conn: Any,
           parent: tuple[Any, str] | None, priority: int | None, traceparent: str | None) -> Started:
    if not klass.steps:
        raise PgbusError(f"{klass.__name__} declares no steps")
    arguments = payload.to_json({"args": list(args), "kwargs": dict(kwargs)}, what="arguments")
    subject_type, subject_id = _checked_subject(subject)
    if idempotency_key is not None:
        payload.check_text(idempotency_key, "idempotency_key", max_bytes=states.KEY_LIMIT)
    payload.check_text(actor, "actor", max_bytes=states.ACTOR_LIMIT, allow_newlines=False)
    workflow_id = uuid.uuid4()
    values = _start_values(klass, workflow_id, arguments, subject_type, subject_id, idempotency_key, actor, parent)
    values["priority"] = flow.checked_priority(priority, "priority")
    values["limit"], values["limit_key"] = _limit_of(engine, klass, workflow_id, args, kwargs, subject_type, subject_id)
    values["traceparent"] = traceparent
    outer = current_transaction()
    busy_rule = klass.concurrency.on_busy if klass.concurrency is not None else "queue"
    if conn is None and (outer is None or outer.database is not engine.db) and busy_rule == "queue":
        return _start_alone(engine, klass, values)
    with engine.db.transaction(conn) as tx:
        if busy_rule != "queue":
            replaced = _when_busy(tx, klass, values, arguments, actor)
            if replaced is not None:
                return Started(replaced, None, None, None)
        try:
            with tx.conn.transaction():  # a savepoint: the application's transaction stays usable
                run = db.fetch_one(tx.conn, "start_run", values)
        except psycopg.errors.UniqueViolation:
            raise _conflict(tx.conn, klass, subject_type, subject_id) from None
        if run is None:
            return Started(_existing(tx.conn, klass, idempotency_key), None, None, None)
        line = _line_of(klass, values) if conn is None and tx.parent is None else None  # our own transaction
        lined = db.fetch_one(tx.conn, "line_up", line) if line is not None else None
        if lined is not None:
            tx.after_commit(partial(_send_others_woken, engine, lined, {"id": _first_id(tx, workflow_id)}))
        if lined is not None and lined["in_line"]:
            run = {**run, "status": "waiting"}
        else:
            first = db.fetch_one(tx.conn, "run_steps", (workflow_id,))
            assert first is not None  # written by the statement above
            send_after_commit(engine, tx, klass, first, priority=values["priority"])
            return Started(workflow_id, run, first, klass)
        first = db.fetch_one(tx.conn, "run_steps", (workflow_id,))
        return Started(workflow_id, run, first, klass)


def _checked_subject(subject: Any) -> tuple[str | None, str | None]:
    """(type, id) of a run's subject, checked as storable text; (None, None) without one."""
    if subject is None:
        return None, None
    if not (isinstance(subject, (tuple, list)) and len(subject) == 2 and isinstance(subject[0], str)
            and subject[0] and subject[1] is not None and str(subject[1])):
        raise InvalidInput("subject", f"must be a (type, id) pair such as ('Order', 1042), got "
                                      f"{payload.safe_str(repr(subject))[:200]}")
    subject_type = payload.check_text(subject[0], "subject type", max_bytes=states.NAME_LIMIT, allow_newlines=False)
    return subject_type, payload.check_text(str(subject[1]), "subject id", max_bytes=states.KEY_LIMIT)


def _start_values(klass: type[Workflow], workflow_id: uuid.UUID, arguments: Any, subject_type: str | None,
                  subject_id: str | None, idempotency_key: str | None, actor: str,
                  parent: tuple[Any, str] | None) -> dict[str, Any]:
    """The parameters of the start_run statement (pgbus_flask/sql/runner.sql)."""
    first = klass.steps[0]
    started = {"subject": f"{subject_type} {subject_id}" if subject_type else None}
    if parent is not None:
        started.update(parent=str(parent[0]), parent_step=parent[1])
    return {
        "wid": workflow_id, "cls": klass.workflow_name, "step": first.name, "stype": subject_type,
        "sid": subject_id, "key": idempotency_key, "digest": klass.definition_digest, "args": Jsonb(arguments),
        "actor": cap(actor, 200), "prefix": JOB_PREFIX, "nothing": Jsonb({}),
        "wait": first.wait.total_seconds() if first.wait else 0.0, "pending": first.wait_until is not None,
        "started": Jsonb(payload.to_json(started)),
        "parent": parent[0] if parent else None, "parent_step": parent[1] if parent else None,
    }


#: The run, its first step (scheduled, due now or after its ``wait``; its ``wait_until`` left to
#: its job) and the ``started`` and ``step_scheduled`` audit events, in one statement. An
#: idempotency key already used writes nothing. The run's attention columns
#: (pgbus_flask.attention) are those of a ready run: overdue once its first step, whose id is
#: taken first, has been due longer than the stall threshold.



def _start_alone(engine: Engine, klass: type[Workflow], values: dict[str, Any]) -> Started:
    """start() in a transaction of its own: BEGIN, the insert, the read of the step and COMMIT
    travel in one round trip (psycopg's pipeline mode); the step is sent once it committed."""
    line = _line_of(klass, values)
    with engine.db.connection() as conn:  # pooled, in autocommit: BEGIN and COMMIT are ours to send
        try:
            with conn.pipeline():  # what follows start_run may be skipped (a conflict): never prepared
                conn.execute("BEGIN", prepare=db.AFTER_A_FAILURE)
                run_cursor = db.run(conn, "start_run", values)
                line_cursor = db.run(conn, "line_up", line, prepare=db.AFTER_A_FAILURE) if line else None
                first_cursor = db.run(conn, "run_steps", (values["wid"],), prepare=db.AFTER_A_FAILURE)
                conn.execute("COMMIT", prepare=db.AFTER_A_FAILURE)
        except BaseException as exc:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("ROLLBACK")
            if isinstance(exc, psycopg.errors.UniqueViolation):
                raise _conflict(conn, klass, values["stype"], values["sid"]) from None
            raise
        run, first = run_cursor.fetchone(), first_cursor.fetchone()
        if run is None:
            return Started(_existing(conn, klass, values["key"]), None, None, None)
        lined = line_cursor.fetchone() if line_cursor is not None else None
        in_line = bool(lined and lined["in_line"])
    assert first is not None
    if lined is not None:
        _send_others_woken(engine, lined, first)
    if in_line:  # its key is busy: a given-back slot sends it
        return Started(values["wid"], {**run, "status": "waiting"}, first, klass)
    send(engine, klass, first, values["priority"])
    return Started(values["wid"], run, first, klass)


def _first_id(tx: Transaction, workflow_id: Any) -> int:
    first = db.fetch_one(tx.conn, "run_steps", (workflow_id,))
    assert first is not None
    return int(first["id"])


def _send_others_woken(engine: Engine, lined: Row, first: Row) -> None:
    """The runs ahead in line that line_up's grant woke (its own step is sent by start itself)."""
    others = [int(part) for part in (lined["woken"] or "").split(",") if part and int(part) != first["id"]]
    if others:
        limits.send_woken(engine, others)


def _line_of(klass: type[Workflow], values: dict[str, Any]) -> tuple[Any, ...] | None:
    """The line_up parameters of a run of a class with a concurrency limit (None without one): a run
    whose key is busy goes in line at start instead of its job finding it so (docs/flow-control.md)."""
    if klass.concurrency is None or values["limit"] is None:
        return None
    priority = priority_of(klass, klass.steps[0], values["priority"])
    return (values["wid"], values["limit"], values["limit_key"], klass.concurrency.capacity, priority)


def _limit_of(engine: Engine, klass: type[Workflow], workflow_id: uuid.UUID, args: Sequence[Any],
              kwargs: dict[str, Any], subject_type: str | None,
              subject_id: str | None) -> tuple[str | None, str | None]:
    """The class limit's name and this run's key (None, None without a limit): the key callable sees
    the run as its steps will (``wf.args``, ``wf.kwargs``, ``wf.subject``)."""
    if klass.concurrency is None:
        return None, None
    instance = klass(engine=engine, workflow_id=workflow_id, args=args, kwargs=dict(kwargs),
                     subject=(subject_type, subject_id or "") if subject_type else None, attempt=0,
                     step_name=klass.steps[0].name)
    return klass.limit_name, klass.concurrency.key_of(instance)


def _when_busy(tx: Transaction, klass: type[Workflow], values: dict[str, Any], arguments: Any,
               actor: str) -> Any:
    """A class limit with ``on_busy`` refuse or replace, under its key's lock: KeyBusy when the key
    is busy and the rule refuses; the id of the key's run that has not started yet when the rule
    replaces (it took these arguments); None: start a run."""
    limit = klass.concurrency
    assert limit is not None
    found = db.fetch_one(tx.conn, "key_activity", {"name": values["limit"], "key": values["limit_key"],
                                                   "cls": klass.workflow_name})
    assert found is not None
    if limit.on_busy == "replace" and found["unstarted"] is not None:
        db.run(tx.conn, "replace_arguments", (Jsonb(arguments), found["unstarted"]))
        record_event(tx, found["unstarted"], "arguments_replaced", actor,
                     details={"limit": values["limit"], "key": values["limit_key"]})
        return found["unstarted"]
    if limit.on_busy == "refuse" and (found["active"] >= limit.capacity or found["in_line"] > 0):
        raise KeyBusy(klass.workflow_name, values["limit"], values["limit_key"], limit.capacity,
                      found["active"] + found["in_line"])
    return None


def _conflict(conn: psycopg.Connection[Any], klass: type[Workflow], subject_type: str | None,
              subject_id: str | None) -> SubjectConflict:
    existing = db.fetch_one(conn, "ongoing_run_of_subject",
                            (klass.workflow_name, subject_type, subject_id, list(states.ONGOING)))
    return SubjectConflict(klass.workflow_name, (subject_type or "", subject_id or ""),
                           existing["workflow_id"] if existing else None)


def _existing(conn: psycopg.Connection[Any], klass: type[Workflow], key: str | None) -> Any:
    found = db.fetch_one(conn, "run_of_idempotency_key", (klass.workflow_name, key))
    assert found is not None
    return found["workflow_id"]
