"""The runner: the only module that changes a run's or a step's status.

Every transition is a guarded ``UPDATE ... WHERE status IN (...)`` made while
holding the run's row lock (``SELECT ... FOR UPDATE``), and writes its audit
event in the same transaction. A guarded update that moves no row did not
happen. No lock is held while user step code runs: an attempt is a claim
transaction, the step's code, then an outcome transaction.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import traceback
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import payload, states
from .db import Transaction
from .engine import Engine
from .errors import (
    ActionNotAllowed,
    ArgumentsNotSerializable,
    DatabaseError,
    DatabaseUnavailable,
    InvalidInput,
    PgbusError,
    SignalRefused,
    StepNotDefined,
    SubjectConflict,
    UnknownWorkflow,
    WorkflowNotFound,
)
from .workflow import FanOut, PauseRequested, ReattemptRequested, ReceivedSignal, StepSpec, Workflow, registered

log = logging.getLogger("pgbus_flask")

Row = dict[str, Any]

#: The times reschedule accepts (what Python, PostgreSQL and RQ can all hold).
RESCHEDULE_EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
RESCHEDULE_LATEST = datetime(9998, 12, 31, tzinfo=timezone.utc)


def cap(text: Any, limit: int) -> str | None:
    """``text`` as storable text (NUL and lone surrogates escaped, see payload), cut to ``limit``."""
    if text is None:
        return None
    text = payload.safe_str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_who(actor: Any, reason: Any) -> None:
    """Refuse (InvalidInput, before anything is written) an actor or reason that cannot be stored as given."""
    payload.check_text(actor, "actor", max_bytes=states.ACTOR_LIMIT, allow_newlines=False)
    if reason is not None:
        payload.check_text(reason, "reason", required=False)
        if len(reason) > states.REASON_LIMIT:
            raise InvalidInput("reason", f"is {len(reason):,} characters long; at most {states.REASON_LIMIT:,} "
                                         "are allowed")


def error_name(exc: BaseException) -> str:
    klass = type(exc)
    module = klass.__module__
    return klass.__qualname__ if module == "builtins" else f"{module}.{klass.__qualname__}"


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# -- rows ----------------------------------------------------------------


def _q(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> Any:
    return conn.cursor(row_factory=dict_row).execute(sql, params)  # type: ignore[arg-type]


def lock_run(tx: Transaction, workflow_id: Any, *, attempt: int | None = None) -> Row:
    """The run's row, locked until the transaction ends (WorkflowNotFound if there is none).

    The same round trip reads the transaction's now() and, given ``attempt``, that step
    row's status (as ``attempt_status``).
    """
    row = _q(
        tx.conn,
        "SELECT w.*, now() AS tx_now, (SELECT status FROM pgbus_workflow_steps WHERE id = %s) AS attempt_status"
        " FROM pgbus_workflows w WHERE w.workflow_id = %s FOR UPDATE",
        (attempt, workflow_id),
    ).fetchone()
    if row is None:
        raise WorkflowNotFound(workflow_id)
    _set_now(tx, row["tx_now"])
    return row  # type: ignore[no-any-return]


def latest_step(conn: psycopg.Connection[Any], workflow_id: Any) -> Row | None:
    return _q(  # type: ignore[no-any-return]
        conn, "SELECT * FROM pgbus_workflow_steps WHERE workflow_id = %s ORDER BY id DESC LIMIT 1", (workflow_id,)
    ).fetchone()


def completed_outputs(conn: psycopg.Connection[Any], workflow_id: Any) -> dict[str, Any]:
    """``{step_name: output}`` of each step's latest completed attempt."""
    rows = conn.execute(
        "SELECT step_name, output FROM pgbus_workflow_steps WHERE workflow_id = %s AND status = 'completed'"
        " ORDER BY attempt, id", (workflow_id,)).fetchall()
    return {name: payload.from_json(output) for name, output in rows}


def move_run(conn: psycopg.Connection[Any], workflow_id: Any, from_: Sequence[str], to: str, **cols: Any) -> Row | None:
    """Single-winner run status change: the new row, or None when the status was not in ``from_``."""
    sets = ", ".join(f"{name} = %({name})s" for name in cols)
    sql = (
        "UPDATE pgbus_workflows SET status = %(to)s, updated_at = now()" + (", " + sets if sets else "")
        + " WHERE workflow_id = %(wid)s AND status = ANY(%(from)s) RETURNING *"
    )
    return _q(conn, sql, {"to": to, "wid": workflow_id, "from": list(from_), **cols}).fetchone()  # type: ignore


def move_step(conn: psycopg.Connection[Any], step_id: int, from_: Sequence[str], to: str, **cols: Any) -> Row | None:
    """Single-winner step status change: the new row, or None when the status was not in ``from_``."""
    sets = ", ".join(f"{name} = %({name})s" for name in cols)
    sql = (
        "UPDATE pgbus_workflow_steps SET status = %(to)s" + (", " + sets if sets else "")
        + " WHERE id = %(id)s AND status = ANY(%(from)s) RETURNING *"
    )
    return _q(conn, sql, {"to": to, "id": step_id, "from": list(from_), **cols}).fetchone()  # type: ignore


def record_event(
    tx: Transaction,
    workflow_id: Any,
    event: str,
    actor: str,
    *,
    reason: str | None = None,
    step: Row | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Append to the audit trail (reason and string details capped). The rows of one
    transaction are written together just before it commits."""
    assert event in states.EVENTS, event
    capped = {k: cap(v, states.DETAIL_LIMIT) if isinstance(v, str) else v for k, v in (details or {}).items()}
    tx.buffer("events", (
        workflow_id, event, cap(actor, 200) or "app", cap(reason, states.REASON_LIMIT),
        step["id"] if step else None, step["step_name"] if step else None, step["attempt"] if step else None,
        Jsonb(payload.to_json(capped)),
    ), _write_events)


def _write_events(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
    conn.execute(
        "INSERT INTO pgbus_workflow_events (workflow_id, event, actor, reason, step_id, step_name, attempt, details)"
        " VALUES " + values,  # one placeholder group per row, values bound
        [value for row in rows for value in row],
    )


def load_class(engine: Engine, name: str) -> type[Workflow] | None:
    try:
        return registered(name, engine.settings.imports)
    except UnknownWorkflow:
        return None
    except ImportError:
        log.exception("pgbus: importing PGBUS_IMPORT failed while looking for %s", name)
        return None


# -- scheduling ------------------------------------------------------------


def _route(engine: Engine, klass: type[Workflow] | None, step_name: str) -> tuple[str, bool, timedelta]:
    """Queue, at-front and timeout of a step's job: the step's options, then the class's, then the settings'."""
    spec: StepSpec | None = None
    if klass is not None:
        try:
            spec = klass.step_spec(step_name)
        except StepNotDefined:
            spec = None
    queue = (spec.queue if spec else None) or (klass.queue if klass else None) or engine.settings.queue
    priority = (spec.priority if spec and spec.priority is not None else None)
    if priority is None and klass is not None:
        priority = klass.priority
    timeout = (spec.timeout if spec else None) or engine.settings.step_timeout
    return queue, bool(priority and priority > 0), timeout


def _send_after_commit(engine: Engine, tx: Transaction, klass: type[Workflow] | None, step: Row) -> None:
    queue, at_front, timeout = _route(engine, klass, step["step_name"])
    step_id, job_id, at = step["id"], step["job_id"], step["scheduled_at"]
    description = f"{step['workflow_class']}.{step['step_name']} #{step['attempt']} (run {step['workflow_id']})"
    tx.after_commit(lambda: engine.send_step(step_id, job_id, queue, at, at_front, timeout, description))


def schedule_step(
    engine: Engine,
    tx: Transaction,
    run: Row,
    klass: type[Workflow] | None,
    step_name: str,
    *,
    actor: str,
    delay: float = 0.0,
    reason: str | None = None,
    set_current: bool = True,
) -> Row:
    """A new scheduled attempt of ``step_name`` (due after ``delay`` seconds), sent after commit.
    ``set_current=False`` when the caller already set the run's current step."""
    step = _q(
        tx.conn,
        """
        INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status,
                                          scheduled_at, enqueued_at, job_id)
        SELECT %(wid)s, %(cls)s, %(step)s, COALESCE(MAX(attempt), 0) + 1, 'scheduled',
               now() + make_interval(secs => %(delay)s), now(), %(job)s
        FROM pgbus_workflow_steps WHERE workflow_id = %(wid)s AND step_name = %(step)s
        RETURNING *
        """,
        {"wid": run["workflow_id"], "cls": run["workflow_class"], "step": step_name, "delay": delay,
         "job": str(uuid.uuid4())},
    ).fetchone()
    if set_current:
        tx.conn.execute(
            "UPDATE pgbus_workflows SET current_step = %s, updated_at = now() WHERE workflow_id = %s",
            (step_name, run["workflow_id"]),
        )
    record_event(tx, run["workflow_id"], "step_scheduled", actor, reason=reason, step=step,
                 details={"scheduled_at": step["scheduled_at"]} if delay else None)
    _send_after_commit(engine, tx, klass, step)
    return step  # type: ignore[no-any-return]


def resend_step(engine: Engine, tx: Transaction, klass: type[Workflow] | None, step: Row,
                at: datetime | None = None) -> Row:
    """Send a scheduled step again (a fresh job id and enqueued_at; due at ``at`` if given)."""
    row = _q(
        tx.conn,
        "UPDATE pgbus_workflow_steps SET enqueued_at = now(), job_id = %s,"
        " scheduled_at = COALESCE(%s, scheduled_at) WHERE id = %s AND status = 'scheduled' RETURNING *",
        (str(uuid.uuid4()), at, step["id"]),
    ).fetchone()
    if row is not None:
        _send_after_commit(engine, tx, klass, row)
    return row  # type: ignore[no-any-return]


def advance(engine: Engine, tx: Transaction, run: Row, klass: type[Workflow] | None, after: str, *,
            actor: str) -> Row:
    """Schedule the step after ``after`` (run ready) or finish the run."""
    nxt = klass.next_step(after) if klass is not None else None
    wid = run["workflow_id"]
    if nxt is None and klass is None:
        raise UnknownWorkflow(run["workflow_class"])
    if nxt is None:
        moved = move_run(tx.conn, wid, states.ONGOING, "finished", finished_at=_now(tx), paused_at=None)
        record_event(tx, wid, "finished", actor)
        return moved or run
    moved = move_run(tx.conn, wid, states.ONGOING, "ready", paused_at=None, current_step=nxt.name)
    schedule_step(engine, tx, run, klass, nxt.name, actor=actor, set_current=False)
    return moved or run


def _root(tx: Transaction) -> Transaction:
    while tx.parent is not None:
        tx = tx.parent
    return tx


def _set_now(tx: Transaction, now: datetime) -> None:
    _root(tx).now = now


def _now(tx: Transaction) -> datetime:
    """PostgreSQL's now(): the transaction's start time, read once per transaction."""
    root = _root(tx)
    if root.now is None:
        root.now = tx.conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    return root.now


def _consume_signal_of(conn: psycopg.Connection[Any], step: Row) -> None:
    """The signal held by ``step``'s attempts (if any) is consumed: the step has ended."""
    conn.execute(
        "UPDATE pgbus_workflow_signals SET status = 'consumed', consumed_at = now()"
        " WHERE status = 'claimed' AND claimed_by_step_id IN"
        " (SELECT id FROM pgbus_workflow_steps WHERE workflow_id = %s AND step_name = %s)",
        (step["workflow_id"], step["step_name"]),
    )


def _cancel_open_steps(conn: psycopg.Connection[Any], workflow_id: Any) -> None:
    conn.execute(
        "UPDATE pgbus_workflow_steps SET status = 'cancelled', outcome = 'cancelled', finished_at = now()"
        " WHERE workflow_id = %s AND status = ANY(%s)",
        (workflow_id, list(states.OPEN_STEP)),
    )
    _close_open_batches(conn, workflow_id)


def _close_open_batches(conn: psycopg.Connection[Any], workflow_id: Any) -> None:
    """The open step's batch is closed with it (a run has at most one open step): its
    remaining children will not run, and the sweep stops looking at it."""
    conn.execute("UPDATE pgbus_batches SET status = 'finished', finished_at = now()"
                 " WHERE workflow_id = %s AND status = 'open'", (workflow_id,))


# -- start -----------------------------------------------------------------


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
) -> Any:
    """Insert a run, its first step and its events in one transaction; send the step after commit.

    The same ``idempotency_key`` returns the existing run and writes nothing.
    A second ongoing run of this class for the same subject raises
    :class:`SubjectConflict`. Arguments that cannot be stored raise
    :class:`ArgumentsNotSerializable` before anything is written.
    """
    from .handle import Run

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
            return Run(engine, found[0])
        record_event(tx, workflow_id, "started", actor,
                     details={"subject": f"{subject_type} {subject_id}" if subject_type else None})
        first = schedule_step(engine, tx, run, klass, klass.steps[0].name, actor=actor, set_current=False)
        return Run.from_rows(engine, {**run, "db_now": _now(tx)}, first, klass)


# -- a step attempt ----------------------------------------------------------


@dataclass
class Claim:
    run: Row
    step: Row
    klass: type[Workflow]
    spec: StepSpec
    outputs: dict[str, Any] | None  # None: read on the step's first output_of()
    signal: ReceivedSignal | None


def _held_or_claim_signal(conn: psycopg.Connection[Any], step: Row, name: str) -> tuple[Row | None, bool]:
    """The signal an earlier attempt of this step holds, else the oldest pending one claimed now."""
    held = _q(
        conn,
        "SELECT * FROM pgbus_workflow_signals WHERE workflow_id = %s AND status = 'claimed' AND claimed_by_step_id IN"
        " (SELECT id FROM pgbus_workflow_steps WHERE workflow_id = %s AND step_name = %s) ORDER BY id LIMIT 1",
        (step["workflow_id"], step["workflow_id"], step["step_name"]),
    ).fetchone()
    if held is not None:
        return held, False
    claimed = _q(
        conn,
        """
        UPDATE pgbus_workflow_signals SET status = 'claimed', claimed_by_step_id = %(step)s, claimed_at = now()
        WHERE id = (SELECT id FROM pgbus_workflow_signals WHERE workflow_id = %(wid)s AND name = %(name)s
                    AND status = 'pending' ORDER BY id LIMIT 1)
          AND status = 'pending'
        RETURNING *
        """,
        {"step": step["id"], "wid": step["workflow_id"], "name": name},
    ).fetchone()
    return claimed, claimed is not None


def _received(signal: Row | None) -> ReceivedSignal | None:
    if signal is None:
        return None
    return ReceivedSignal(signal["id"], signal["name"], payload.from_json(signal["payload"]), signal["created_at"])


def claim_attempt(engine: Engine, step_id: int, job_id: str | None) -> Claim | None:
    """scheduled -> in_progress for a due step of a ready run; None makes the job a no-op."""
    with engine.db.transaction() as tx:
        # The run's row lock, the step's name and now(), in one round trip.
        run = _q(
            tx.conn,
            "SELECT w.*, s.step_name AS claim_step, now() AS tx_now FROM pgbus_workflows w"
            " JOIN pgbus_workflow_steps s ON s.workflow_id = w.workflow_id AND s.id = %s FOR UPDATE OF w",
            (step_id,),
        ).fetchone()
        if run is None or run["status"] != "ready":
            return None
        _set_now(tx, run["tx_now"])
        step_name = run["claim_step"]
        klass = load_class(engine, run["workflow_class"])
        spec: StepSpec | None = None
        problem: Exception | None = None
        if klass is None:
            problem = UnknownWorkflow(run["workflow_class"])
        else:
            try:
                spec = klass.step_spec(step_name)
            except StepNotDefined as exc:
                problem = exc
        # Claim the attempt and mark the run running in one statement.
        step = _q(
            tx.conn,
            """
            WITH claimed AS (
                UPDATE pgbus_workflow_steps SET status = 'in_progress', started_at = now(),
                    stall_at = now() + make_interval(secs => %(timeout)s), job_id = COALESCE(%(job)s, job_id),
                    worker = %(worker)s, app_revision = %(rev)s
                WHERE id = %(id)s AND status = 'scheduled' AND scheduled_at <= now() + interval '1 second'
                RETURNING *
            ), running AS (
                UPDATE pgbus_workflows SET status = 'running', updated_at = now()
                WHERE workflow_id = %(wid)s AND status = 'ready' AND %(runnable)s AND EXISTS (SELECT 1 FROM claimed)
            )
            SELECT * FROM claimed
            """,
            {"id": step_id, "wid": run["workflow_id"], "job": job_id, "worker": worker_name(),
             "rev": engine.settings.app_revision, "runnable": problem is None,
             "timeout": _route(engine, klass, step_name)[2].total_seconds()},
        ).fetchone()
        if step is None:
            return None
        if problem is not None or klass is None or spec is None:
            # Nothing here can run this step: record why and pause for a person.
            assert problem is not None
            step = move_step(tx.conn, step_id, ["in_progress"], "failed", finished_at=_now(tx), outcome="failed",
                             error_class=error_name(problem), error_message=cap(problem, states.MESSAGE_LIMIT))
            move_run(tx.conn, run["workflow_id"], ["ready"], "paused", paused_at=_now(tx))
            record_event(tx, run["workflow_id"], "step_failed", "system", step=step,
                         details={"error_class": error_name(problem), "error_message": str(problem)})
            record_event(tx, run["workflow_id"], "paused", "system", reason=str(problem), step=step)
            return None
        run = {**run, "status": "running"}
        record_event(tx, run["workflow_id"], "step_started", "system", step=step,
                     details={"worker": step["worker"]})
        signal: Row | None = None
        if spec.wait_for and not step["wait_timed_out"]:
            signal, claimed_now = _held_or_claim_signal(tx.conn, step, spec.wait_for)
            if claimed_now:
                record_event(tx, run["workflow_id"], "signal_claimed", "system", step=step,
                             details={"signal": spec.wait_for, "signal_id": signal["id"]})  # type: ignore[index]
            if signal is None:
                park_on_signal(tx, run, step, spec)
                return None
        return Claim(run, step, klass, spec, None, _received(signal))


def park_on_signal(tx: Transaction, run: Row, step: Row, spec: StepSpec) -> None:
    timeout = spec.wait_timeout.total_seconds() if spec.wait_timeout else None
    parked = _q(
        tx.conn,
        "UPDATE pgbus_workflow_steps SET status = 'waiting', waiting_since = COALESCE(waiting_since, now()),"
        " timeout_at = COALESCE(timeout_at, now() + make_interval(secs => %s)) WHERE id = %s"
        " AND status = 'in_progress' RETURNING *",
        (timeout, step["id"]),
    ).fetchone()
    move_run(tx.conn, run["workflow_id"], ["running"], "waiting")
    record_event(tx, run["workflow_id"], "step_waiting", "system", step=parked,
                 details={"signal": spec.wait_for, "timeout_at": parked["timeout_at"] if parked else None})


def run_attempt(engine: Engine, step_id: int, job_id: str | None = None) -> None:
    """One delivery of a step job: claim, run the step's code outside any lock, record the outcome."""
    claim = claim_attempt(engine, step_id, job_id)
    if claim is None:
        return
    run, step = claim.run, claim.step
    arguments = payload.from_json(run["arguments"]) or {}
    context = claim.klass(
        engine=engine, workflow_id=run["workflow_id"], args=arguments.get("args", ()),
        kwargs=arguments.get("kwargs", {}),
        subject=(run["subject_type"], run["subject_id"]) if run["subject_type"] else None,
        attempt=step["attempt"], step_name=step["step_name"], outputs=claim.outputs,
        received_signal=claim.signal,
    )
    try:
        result: Any = claim.spec.func(context)
    except (PauseRequested, ReattemptRequested) as request:
        _record_with_retry(engine, claim, request=request)
        return
    except Exception as exc:  # the step's own failure: its error policy decides
        _record_with_retry(engine, claim, error=exc)
        return
    _record_with_retry(engine, claim, result=result)


def _record_with_retry(engine: Engine, claim: Claim, **outcome: Any) -> None:
    """Record an outcome, waiting out a PostgreSQL outage (up to the attempt's stall deadline):
    the step's work is done and should not be lost to a dropped connection.

    Only an outage (or a serialization failure or deadlock) is retried. When PostgreSQL
    refuses the outcome itself (DatabaseError), the attempt is recorded as failed with
    that refusal as its error, so the run pauses on a reason an operator can read
    instead of stalling with the outcome lost.
    """
    delay = 0.5
    deadline = time.monotonic() + max(_route(engine, claim.klass, claim.step["step_name"])[2].total_seconds(), 5)
    refused = False
    while True:
        try:
            record_outcome(engine, claim, **outcome)
            return
        except DatabaseError as exc:
            retryable = (exc.sqlstate or "").startswith("40")
            if not retryable and not refused:
                log.warning("pgbus: PostgreSQL refused the outcome of step %s (%s); recording it as failed",
                            claim.step["id"], exc)
                refused, outcome = True, {"error": exc}
                continue
            if not retryable or time.monotonic() + delay > deadline:
                raise
        except DatabaseUnavailable:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("pgbus: PostgreSQL unreachable while recording step %s; retrying in %.1fs",
                        claim.step["id"], delay)
            engine.db.discard_broken()
        time.sleep(delay)
        delay = min(delay * 2, 10.0)


def _error_columns(exc: BaseException) -> dict[str, Any]:
    try:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception:  # an exception that cannot even be formatted keeps its class and message
        trace = None
    return {
        "error_class": cap(error_name(exc), 500),
        "error_message": cap(exc, states.MESSAGE_LIMIT),
        "backtrace": cap(trace, states.BACKTRACE_LIMIT),
    }


def record_outcome(engine: Engine, claim: Claim, *, result: Any = None, error: BaseException | None = None,
                   request: Exception | None = None) -> None:
    """Apply an attempt's outcome, only while the attempt is still in_progress."""
    step = claim.step
    output: Any = None
    if error is None and request is None and not isinstance(result, FanOut):
        try:
            output = payload.to_json(result, what=f"the output of step {step['step_name']}")
        except ArgumentsNotSerializable as exc:
            error = exc
    with engine.db.transaction() as tx:
        run = lock_run(tx, step["workflow_id"], attempt=step["id"])
        if run["attempt_status"] != "in_progress":
            record_event(tx, run["workflow_id"], "late_completion_ignored", "system", step=step,
                         details={"status": run["attempt_status"], "outcome": "failed" if error else "completed"})
            return
        if isinstance(request, PauseRequested):
            failed = move_step(tx.conn, step["id"], ["in_progress"], "failed", finished_at=_now(tx), outcome="paused",
                               error_message=cap(request.reason, states.MESSAGE_LIMIT))
            move_run(tx.conn, run["workflow_id"], ["running"], "paused", paused_at=_now(tx))
            record_event(tx, run["workflow_id"], "paused", "system", reason=request.reason, step=failed)
        elif isinstance(request, ReattemptRequested):
            failed = move_step(tx.conn, step["id"], ["in_progress"], "failed", finished_at=_now(tx),
                               outcome="reattempted", error_message="reattempt requested by the step")
            record_event(tx, run["workflow_id"], "step_reattempted", "system", step=failed,
                         details={"wait": request.wait})
            if run["status"] == "running":
                move_run(tx.conn, run["workflow_id"], ["running"], "ready")
                schedule_step(engine, tx, run, claim.klass, step["step_name"], actor="system", delay=request.wait)
        elif error is not None:
            fail_attempt(engine, tx, run, claim.klass, step, _error_columns(error), actor="system")
        elif isinstance(result, FanOut):
            open_batch(engine, tx, run, claim.spec, claim.klass, step, result)
        else:
            done = move_step(tx.conn, step["id"], ["in_progress"], "completed", finished_at=_now(tx),
                             outcome="completed", output=Jsonb(output))
            if claim.spec.wait_for:
                _consume_signal_of(tx.conn, step)
            record_event(tx, run["workflow_id"], "step_completed", "system", step=done)
            if run["status"] == "running":
                advance(engine, tx, run, claim.klass, step["step_name"], actor="system")


def fail_attempt(engine: Engine, tx: Transaction, run: Row, klass: type[Workflow] | None, step: Row,
                 error: dict[str, Any], *, actor: str, open_from: Sequence[str] = ("in_progress",)) -> None:
    """An attempt failed: record the error, then apply the step's error policy.

    The policy acts only on a run that is still going (running or waiting);
    a paused run just keeps the failure, and resume retries the step.
    """
    spec: StepSpec | None = None
    if klass is not None:
        try:
            spec = klass.step_spec(step["step_name"])
        except StepNotDefined:
            spec = None
    policy = spec.on_error if spec else "pause"
    active = run["status"] in ("running", "waiting")
    outcome = "failed"
    consecutive = 0
    if active and policy == "reattempt" and spec is not None:
        outcomes = [r[0] for r in tx.conn.execute(
            "SELECT outcome FROM pgbus_workflow_steps WHERE workflow_id = %s AND step_name = %s AND id <> %s"
            " AND outcome IS NOT NULL ORDER BY attempt DESC",
            (step["workflow_id"], step["step_name"], step["id"]),
        )]
        for value in outcomes:
            if value != "reattempted":
                break
            consecutive += 1
        if consecutive < spec.max_reattempts:
            outcome = "reattempted"
        else:
            policy = "pause"
    to = "skipped" if active and policy == "skip" else "failed"
    failed = move_step(tx.conn, step["id"], list(open_from), to, finished_at=_now(tx), outcome=outcome, **error)
    if failed is None:
        return
    details = {"error_class": error.get("error_class"), "error_message": error.get("error_message")}
    record_event(tx, run["workflow_id"], "step_failed", actor, step=failed, details=details)
    wid = run["workflow_id"]
    if not active:
        return
    summary = f"{error.get('error_class')}: {error.get('error_message')}"
    if outcome == "reattempted" and spec is not None:
        delay = spec.backoff_seconds(consecutive + 1)
        record_event(tx, wid, "step_reattempted", actor, step=failed, details={"wait": delay})
        move_run(tx.conn, wid, ["running", "waiting"], "ready")
        schedule_step(engine, tx, run, klass, step["step_name"], actor=actor, delay=delay)
    elif policy == "cancel":
        _cancel_open_steps(tx.conn, wid)
        move_run(tx.conn, wid, states.ONGOING, "cancelled", finished_at=_now(tx))
        record_event(tx, wid, "cancelled", actor, reason=summary, step=failed)
    elif policy == "skip":
        _consume_signal_of(tx.conn, failed)
        record_event(tx, wid, "step_skipped", actor, reason=summary, step=failed)
        advance(engine, tx, run, klass, step["step_name"], actor=actor)
    else:
        move_run(tx.conn, wid, ["running", "waiting"], "paused", paused_at=_now(tx))
        record_event(tx, wid, "paused", actor, reason=summary, step=failed)


# -- fan-out -----------------------------------------------------------------


def open_batch(engine: Engine, tx: Transaction, run: Row, spec: StepSpec, klass: type[Workflow], step: Row,
               fan_out: FanOut) -> None:
    """Open a batch for a step's fan-out, park the step on it, send the children after commit."""
    queue = _route(engine, klass, step["step_name"])[0]
    args = [payload.to_json(list(a), what=f"fan_out argument tuple {i}") for i, a in enumerate(fan_out.args)]
    batch = _q(
        tx.conn,
        "INSERT INTO pgbus_batches (workflow_id, step_id, step_name, func, queue, on_child_failure, status, total)"
        " VALUES (%s, %s, %s, %s, %s, %s, 'open', %s) RETURNING *",
        (run["workflow_id"], step["id"], step["step_name"], fan_out.func, queue, fan_out.on_child_failure,
         len(args)),
    ).fetchone()
    children = [(position, f"pgbus-child-{batch['id']}-{position}-{uuid.uuid4().hex[:8]}")
                for position in range(len(args))]
    with tx.conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO pgbus_batch_children (batch_id, position, args, status, job_id, enqueued_at)"
            " VALUES (%s, %s, %s, 'pending', %s, now())",
            [(batch["id"], position, Jsonb(args[position]), job_id) for position, job_id in children],
        )
    parked = move_step(tx.conn, step["id"], ["in_progress"], "waiting", batch_id=batch["id"],
                       waiting_since=_now(tx))
    move_run(tx.conn, run["workflow_id"], ["running"], "waiting")
    record_event(tx, run["workflow_id"], "fan_out_opened", "system", step=parked,
                 details={"batch_id": batch["id"], "total": len(args), "func": fan_out.func})
    batch_id = batch["id"]
    tx.after_commit(lambda: engine.send_children(batch_id, queue, children))


def record_child(engine: Engine, batch_id: int, position: int, *, result: Any = None,
                 error: BaseException | None = None) -> bool:
    """Record one child's result once (a redelivered child changes nothing); finish the batch
    when it was the last. Returns False when the child had already been recorded."""
    stored: Any = None
    if error is None:
        try:
            stored = payload.to_json(result, what=f"the result of child {position}")
        except ArgumentsNotSerializable as exc:
            error = exc
    with engine.db.transaction() as tx:
        found = tx.conn.execute("SELECT workflow_id FROM pgbus_batches WHERE id = %s", (batch_id,)).fetchone()
        if found is None:
            return False
        run = lock_run(tx, found[0])
        cols = (
            {"result": Jsonb(stored), "error_class": None, "error_message": None}
            if error is None
            else {"result": None, "error_class": cap(error_name(error), 500),
                  "error_message": cap(error, states.MESSAGE_LIMIT)}
        )
        child = tx.conn.execute(
            "UPDATE pgbus_batch_children SET status = %s, finished_at = now(), result = %s, error_class = %s,"
            " error_message = %s WHERE batch_id = %s AND position = %s AND status = 'pending' RETURNING position",
            ("done" if error is None else "failed", cols["result"], cols["error_class"], cols["error_message"],
             batch_id, position),
        ).fetchone()
        if child is None:
            return False
        batch = _q(
            tx.conn,
            "UPDATE pgbus_batches SET done = done + %s, failed = failed + %s WHERE id = %s RETURNING *",
            (int(error is None), int(error is not None), batch_id),
        ).fetchone()
        if batch["status"] == "open" and batch["done"] + batch["failed"] >= batch["total"]:
            finish_batch(engine, tx, run, batch)
        return True


def finish_batch(engine: Engine, tx: Transaction, run: Row, batch: Row) -> None:
    batch = _q(tx.conn, "UPDATE pgbus_batches SET status = 'finished', finished_at = now() WHERE id = %s"
               " AND status = 'open' RETURNING *", (batch["id"],)).fetchone()
    if batch is None:
        return
    wid = run["workflow_id"]
    step = _q(tx.conn, "SELECT * FROM pgbus_workflow_steps WHERE id = %s", (batch["step_id"],)).fetchone()
    record_event(tx, wid, "fan_out_finished", "system", step=step,
                 details={"batch_id": batch["id"], "done": batch["done"], "failed": batch["failed"],
                          "total": batch["total"]})
    if step is None or step["status"] != "waiting":
        return  # the step was skipped, cancelled or resumed elsewhere meanwhile
    klass = load_class(engine, run["workflow_class"])
    if batch["failed"] and batch["on_child_failure"] == "fail":
        from .errors import ChildJobFailed

        first = tx.conn.execute(
            "SELECT position, error_class, error_message FROM pgbus_batch_children WHERE batch_id = %s"
            " AND status = 'failed' ORDER BY position LIMIT 1", (batch["id"],)).fetchone()
        exc = ChildJobFailed(
            f"{batch['failed']} of {batch['total']} child jobs failed; first: #{first[0]} {first[1]}: {first[2]}"
            if first else f"{batch['failed']} of {batch['total']} child jobs failed")
        fail_attempt(engine, tx, run, klass, step, {"error_class": error_name(exc), "error_message": str(exc),
                                                      "backtrace": None}, actor="system", open_from=("waiting",))
        return
    results = [
        payload.from_json(r[0]) for r in tx.conn.execute(
            "SELECT result FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position", (batch["id"],))
    ]
    output = {"done": batch["done"], "failed": batch["failed"], "total": batch["total"], "results": results}
    done = move_step(tx.conn, step["id"], ["waiting"], "completed", finished_at=_now(tx), outcome="completed",
                     output=Jsonb(payload.to_json(output)))
    record_event(tx, wid, "step_completed", "system", step=done)
    if run["status"] == "waiting":
        advance(engine, tx, run, klass, step["step_name"], actor="system")


# -- signals -----------------------------------------------------------------


@dataclass
class SignalResult:
    """What ``run.signal(...)`` returns: the stored signal, and whether this was a redelivery."""

    id: int
    name: str
    payload: Any
    status: str
    idempotency_key: str | None
    created_at: datetime
    duplicate_delivery: bool


def _signal_result(row: Row, duplicate: bool) -> SignalResult:
    return SignalResult(row["id"], row["name"], payload.from_json(row["payload"]), row["status"],
                        row["idempotency_key"], row["created_at"], duplicate)


def send_signal(engine: Engine, workflow_id: Any, name: str, data: Any = None, *, idempotency_key: str | None = None,
                actor: str = "app", reason: str | None = None) -> SignalResult:
    """Store a signal for a run; a step waiting for it is claimed and sent at once.

    A redelivery with the same ``idempotency_key`` stores nothing and returns
    the stored signal with ``duplicate_delivery`` set.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise SignalRefused(f"signal name must be a non-empty string of at most 200 characters, got "
                            f"{payload.safe_str(repr(name))[:220]}", "signal name")
    payload.check_text(name, "signal name", allow_newlines=False)
    if idempotency_key is not None:
        payload.check_text(idempotency_key, "idempotency_key", max_bytes=states.KEY_LIMIT)
    check_who(actor, reason)
    try:
        data_json = payload.to_json(data, what="the signal payload")
    except ArgumentsNotSerializable as exc:
        raise SignalRefused(str(exc), "payload") from None
    with engine.db.transaction() as tx:
        run, _latest, _klass = _check(engine, tx, "signal", workflow_id)
        row = _q(
            tx.conn,
            "INSERT INTO pgbus_workflow_signals (workflow_id, name, payload, idempotency_key, status, sent_by)"
            " VALUES (%s, %s, %s, %s, 'pending', %s)"
            " ON CONFLICT (workflow_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING *",
            (workflow_id, name, Jsonb(data_json), idempotency_key, cap(actor, 200)),
        ).fetchone()
        if row is None:
            existing = _q(tx.conn, "SELECT * FROM pgbus_workflow_signals WHERE workflow_id = %s"
                          " AND idempotency_key = %s", (workflow_id, idempotency_key)).fetchone()
            return _signal_result(existing, True)
        record_event(tx, workflow_id, "signal_received", actor, reason=reason,
                     details={"signal": name, "signal_id": row["id"]})
        if run["status"] == "waiting":
            row = _deliver_to_waiting_step(engine, tx, run, name) or row
        return _signal_result(row, False)


def _deliver_to_waiting_step(engine: Engine, tx: Transaction, run: Row, name: str) -> Row | None:
    """If the run's step waits for ``name``, claim the oldest pending one and send the step."""
    step = latest_step(tx.conn, run["workflow_id"])
    if step is None or step["status"] != "waiting" or step["batch_id"] is not None:
        return None
    klass = load_class(engine, run["workflow_class"])
    if klass is None:
        return None
    try:
        spec = klass.step_spec(step["step_name"])
    except StepNotDefined:
        return None
    if spec.wait_for != name:
        return None
    signal, claimed = _held_or_claim_signal(tx.conn, step, name)
    if signal is None:
        return None
    if claimed:
        record_event(tx, run["workflow_id"], "signal_claimed", "system", step=step,
                     details={"signal": name, "signal_id": signal["id"]})
    woken = move_step(tx.conn, step["id"], ["waiting"], "scheduled", scheduled_at=_now(tx), enqueued_at=_now(tx),
                      job_id=str(uuid.uuid4()))
    move_run(tx.conn, run["workflow_id"], ["waiting"], "ready")
    if woken is not None:
        _send_after_commit(engine, tx, klass, woken)
    return signal


# -- what a run allows now -----------------------------------------------------


@dataclass(frozen=True)
class ResumePlan:
    """What resume will do: ``action`` (states.RESUME_ACTIONS) and the step it names."""

    action: str
    step: str | None


def resume_plan(run: Row, latest: Row | None, klass: type[Workflow] | None) -> ResumePlan | None:
    """What ``resume`` would do for this paused run (None when it is not paused)."""
    if run["status"] != "paused":
        return None
    if latest is None:
        return ResumePlan("run", run["current_step"])
    status, name = latest["status"], latest["step_name"]
    if status in ("failed", "cancelled"):
        return ResumePlan("retry", name)
    if status in ("completed", "skipped"):
        nxt = None
        if klass is not None:
            try:
                nxt = klass.next_step(name)
            except StepNotDefined:
                return ResumePlan("retry", name)
        return ResumePlan("continue", nxt.name) if nxt else ResumePlan("finish", None)
    if status == "waiting":
        return ResumePlan("keep_waiting", name)
    if status == "in_progress":
        return ResumePlan("let_finish", name)
    return ResumePlan("run", name)


def available_actions(run: Row, latest: Row | None, klass: type[Workflow] | None, now: datetime) -> list[str]:
    """Exactly the verbs allowed on this run now (``klass`` is None when it cannot be imported here)."""
    actions = [a for a in states.ACTIONS if run["status"] in states.ALLOWED_FROM[a]]
    if "skip" in actions and klass is not None and _nothing_left_to_skip(run, latest, klass):
        actions.remove("skip")
    if "run_now" in actions and not (latest and latest["status"] == "scheduled" and latest["scheduled_at"] > now):
        actions.remove("run_now")
    if "reschedule" in actions and not (latest and latest["status"] == "scheduled"):
        actions.remove("reschedule")
    if klass is None:
        actions = [a for a in actions if a not in states.CLASS_ACTIONS]
    return actions


def _nothing_left_to_skip(run: Row, latest: Row | None, klass: type[Workflow]) -> bool:
    """Paused after its last step completed (or was skipped): resume finishes it, skip has no step."""
    if run["status"] != "paused" or latest is None or latest["status"] not in ("completed", "skipped"):
        return False
    try:
        return klass.next_step(latest["step_name"]) is None
    except StepNotDefined:
        return False


def _check(engine: Engine, tx: Transaction, action: str, workflow_id: Any) -> tuple[Row, Row | None,
                                                                                    type[Workflow] | None]:
    run = lock_run(tx, workflow_id)
    latest = latest_step(tx.conn, workflow_id)
    klass = load_class(engine, run["workflow_class"])
    allowed = available_actions(run, latest, klass, _now(tx))
    if action not in allowed:
        detail = None
        if action in states.CLASS_ACTIONS and klass is None and run["status"] in states.ALLOWED_FROM[action]:
            detail = f"workflow class {run['workflow_class']} cannot be imported here"
        elif action == "run_now" and run["status"] == "ready":
            detail = "its step is already due"
        elif action == "signal":
            detail = "signals go only to ongoing runs"
        raise ActionNotAllowed(action, run["status"], allowed, detail)
    return run, latest, klass


# -- outside verbs -------------------------------------------------------------


def pause(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        _run, latest, _ = _check(engine, tx, "pause", workflow_id)
        move_run(tx.conn, workflow_id, states.ALLOWED_FROM["pause"], "paused", paused_at=_now(tx))
        record_event(tx, workflow_id, "paused", actor, reason=reason, step=latest)


def resume(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> ResumePlan:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, latest, klass = _check(engine, tx, "resume", workflow_id)
        plan = resume_plan(run, latest, klass)
        assert plan is not None and klass is not None
        record_event(tx, workflow_id, "resumed", actor, reason=reason, step=latest,
                     details={"plan": plan.action, "step": plan.step})
        if plan.action == "retry" and latest is not None:
            klass.step_spec(latest["step_name"])
            move_run(tx.conn, workflow_id, ["paused"], "ready", paused_at=None)
            schedule_step(engine, tx, run, klass, latest["step_name"], actor=actor)
        elif plan.action in ("continue", "finish") and latest is not None:
            advance(engine, tx, run, klass, latest["step_name"], actor=actor)
        elif plan.action == "keep_waiting" and latest is not None:
            _keep_waiting(engine, tx, run, klass, latest)
        elif plan.action == "let_finish":
            move_run(tx.conn, workflow_id, ["paused"], "running", paused_at=None)
        else:
            move_run(tx.conn, workflow_id, ["paused"], "ready", paused_at=None)
            if latest is not None and latest["status"] == "scheduled":
                resend_step(engine, tx, klass, latest)
            else:
                schedule_step(engine, tx, run, klass, plan.step or klass.steps[0].name, actor=actor)
        return plan


def _keep_waiting(engine: Engine, tx: Transaction, run: Row, klass: type[Workflow], step: Row) -> None:
    """Back to waiting; the wait's deadline moves by the time spent paused (it did not run while paused)."""
    wid = run["workflow_id"]
    tx.conn.execute(
        "UPDATE pgbus_workflow_steps SET timeout_at = timeout_at + (now() - %s) WHERE id = %s"
        " AND status = 'waiting' AND timeout_at IS NOT NULL",
        (run["paused_at"], step["id"]),
    )
    moved = move_run(tx.conn, wid, ["paused"], "waiting", paused_at=None)
    # A batch that finished while paused already completed or failed the step,
    # so only a signal wait gets here with something to deliver.
    if moved is not None and step["batch_id"] is None:
        spec = klass.step_spec(step["step_name"])
        if spec.wait_for:
            _deliver_to_waiting_step(engine, tx, moved, spec.wait_for)


def resume_at(engine: Engine, workflow_id: Any, step_name: str, *, actor: str = "app",
              reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, latest, klass = _check(engine, tx, "resume_at", workflow_id)
        assert klass is not None
        klass.step_spec(step_name)
        _cancel_open_steps(tx.conn, workflow_id)
        move_run(tx.conn, workflow_id, states.ONGOING, "ready", paused_at=None)
        record_event(tx, workflow_id, "resumed", actor, reason=reason, step=latest,
                     details={"plan": "resume_at", "step": step_name})
        schedule_step(engine, tx, run, klass, step_name, actor=actor)


def run_now(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        _run, latest, klass = _check(engine, tx, "run_now", workflow_id)
        assert latest is not None
        sent = resend_step(engine, tx, klass, latest, at=_now(tx))
        record_event(tx, workflow_id, "run_now", actor, reason=reason, step=sent)


def reschedule(engine: Engine, workflow_id: Any, at: datetime, *, actor: str = "app",
               reason: str | None = None) -> None:
    check_who(actor, reason)
    if not isinstance(at, datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise InvalidInput("at", "must be a datetime with a timezone (such as 2030-01-01T09:00+00:00), got "
                                 f"{payload.safe_str(repr(at))[:80]}")
    try:
        utc = at.astimezone(timezone.utc)
    except OverflowError:
        utc = None
    if utc is None or not (RESCHEDULE_EARLIEST <= utc <= RESCHEDULE_LATEST):
        raise InvalidInput("at", f"must be between {RESCHEDULE_EARLIEST:%Y-%m-%d} and {RESCHEDULE_LATEST:%Y-%m-%d} "
                                 f"(UTC), got {at.isoformat()}")
    with engine.db.transaction() as tx:
        _run, latest, klass = _check(engine, tx, "reschedule", workflow_id)
        assert latest is not None
        sent = resend_step(engine, tx, klass, latest, at=at)
        record_event(tx, workflow_id, "rescheduled", actor, reason=reason, step=sent,
                     details={"scheduled_at": at})


def skip(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, latest, klass = _check(engine, tx, "skip", workflow_id)
        assert klass is not None
        if latest is None:
            raise ActionNotAllowed("skip", run["status"], [], "it has no step")
        if latest["status"] in states.OPEN_STEP or latest["status"] in ("failed", "cancelled"):
            skipped = move_step(tx.conn, latest["id"], [latest["status"]], "skipped", finished_at=_now(tx),
                                outcome=latest["outcome"] or "skipped")
            _close_open_batches(tx.conn, workflow_id)
            name = latest["step_name"]
        else:
            # Paused after its step completed: skip the step resume would run next.
            nxt = klass.next_step(latest["step_name"])
            assert nxt is not None  # available_actions refused skip when the last step already ended
            move_run(tx.conn, workflow_id, ["paused"], "paused", current_step=nxt.name)
            skipped = _q(tx.conn, """
                INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status,
                    scheduled_at, finished_at, outcome)
                SELECT %(wid)s, %(cls)s, %(step)s, COALESCE(MAX(attempt), 0) + 1, 'skipped', now(), now(), 'skipped'
                FROM pgbus_workflow_steps WHERE workflow_id = %(wid)s AND step_name = %(step)s RETURNING *
                """, {"wid": workflow_id, "cls": run["workflow_class"], "step": nxt.name}).fetchone()
            name = nxt.name
        assert skipped is not None
        klass.step_spec(name)
        _consume_signal_of(tx.conn, skipped)
        record_event(tx, workflow_id, "step_skipped", actor, reason=reason, step=skipped)
        advance(engine, tx, run, klass, name, actor=actor)


def rerun(engine: Engine, workflow_id: Any, step_name: str | None = None, *, actor: str = "app",
          reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        run, _latest, klass = _check(engine, tx, "rerun", workflow_id)
        assert klass is not None
        name = klass.step_spec(step_name).name if step_name else klass.steps[0].name
        try:
            with tx.conn.transaction():
                moved = move_run(tx.conn, workflow_id, states.TERMINAL, "ready", finished_at=None, paused_at=None)
        except psycopg.errors.UniqueViolation:
            raise SubjectConflict(run["workflow_class"], (run["subject_type"], run["subject_id"])) from None
        record_event(tx, workflow_id, "rerun", actor, reason=reason, details={"step": name})
        schedule_step(engine, tx, moved or run, klass, name, actor=actor)


def cancel(engine: Engine, workflow_id: Any, *, actor: str = "app", reason: str | None = None) -> None:
    check_who(actor, reason)
    with engine.db.transaction() as tx:
        _run, latest, _klass = _check(engine, tx, "cancel", workflow_id)
        _cancel_open_steps(tx.conn, workflow_id)
        move_run(tx.conn, workflow_id, states.ONGOING, "cancelled", finished_at=_now(tx))
        record_event(tx, workflow_id, "cancelled", actor, reason=reason, step=latest)
