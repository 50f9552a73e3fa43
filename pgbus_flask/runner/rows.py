"""Rows, locks and audit events: the guarded UPDATEs every transition is made of.

The statement that writes a transaction's audit events also refreshes the
attention columns of the runs they name (:mod:`pgbus_flask.attention`): every
transition writes its event, so what a person must see on a run's row is
always that of its last transition, committed with it.
"""

from __future__ import annotations

import logging
import os
import socket
import traceback
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from .. import db, filters, messages, payload, states
from ..db import Transaction
from ..definition import StepSpec, registered
from ..errors import InvalidInput, StepNotDefined, UnknownWorkflow, WorkflowNotFound

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow

log = logging.getLogger("pgbus_flask")


Row = dict[str, Any]

#: The times reschedule accepts (what Python, PostgreSQL and RQ can all hold).
RESCHEDULE_EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
RESCHEDULE_LATEST = states.LATEST_DUE


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


def error_columns(exc: BaseException, *, trace: bool = True) -> dict[str, Any]:
    """A failed attempt's error columns: class, message, backtrace (``trace``), and for an engine
    message (:mod:`pgbus_flask.messages`) its code and parameters."""
    backtrace = None
    if trace:
        try:
            backtrace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        except Exception:  # an exception that cannot even be formatted keeps its class and message
            backtrace = None
    code, values = messages.code_of(exc)
    return {
        "error_class": cap(error_name(exc), 500),
        "error_message": cap(exc, states.MESSAGE_LIMIT),
        "backtrace": cap(backtrace, states.BACKTRACE_LIMIT),
        "error_code": code,
        "error_params": Jsonb(payload.to_json(values)) if code else None,
    }


def message_details(error: dict[str, Any]) -> dict[str, Any]:
    """What an event keeps of an engine message (its code and parameters), {} for the app's errors."""
    if not error.get("error_code"):
        return {}
    values = error["error_params"]
    return {"message_code": error["error_code"], "message_params": values.obj if isinstance(values, Jsonb) else values}


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def lock_run(tx: Transaction, workflow_id: Any, *, attempt: int | None = None) -> Row:
    """The run's row, locked until the transaction ends (WorkflowNotFound if there is none).

    The same round trip reads the transaction's now() and, given ``attempt``, that step
    row's status (as ``attempt_status``).
    """
    row = db.fetch_one(tx, "lock_run", (attempt, workflow_id))
    if row is None:
        raise WorkflowNotFound(workflow_id)
    remember_now(tx, row["tx_now"])
    return row  # type: ignore[no-any-return]


def latest_step(conn: psycopg.Connection[Any], workflow_id: Any) -> Row | None:
    return db.fetch_one(conn, "latest_step", (workflow_id,))


def completed_outputs(conn: psycopg.Connection[Any], workflow_id: Any) -> dict[str, Any]:
    """``{step_name: output}`` of each step's latest completed attempt."""
    rows = db.fetch_all(conn, "completed_outputs", (workflow_id,))
    return {row["step_name"]: payload.from_json(row["output"]) for row in rows}


def move_run(conn: psycopg.Connection[Any], workflow_id: Any, from_: Sequence[str], to: str, **cols: Any) -> Row | None:
    """Single-winner run status change: the new row, or None when the status was not in ``from_``."""
    return db.fetch_one(conn, filters.move_run(tuple(cols)), {"to": to, "wid": workflow_id, "from": list(from_),
                                                            **cols})


def move_step(conn: psycopg.Connection[Any], step_id: int, from_: Sequence[str], to: str, **cols: Any) -> Row | None:
    """Single-winner step status change: the new row, or None when the status was not in ``from_``."""
    return db.fetch_one(conn, filters.move_step(tuple(cols)), {"to": to, "id": step_id, "from": list(from_), **cols})


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
    transaction are written together just before it commits, with the attention columns
    of their runs."""
    assert event in states.EVENTS, event
    capped = {k: cap(v, states.DETAIL_LIMIT) if isinstance(v, str) else v for k, v in (details or {}).items()}
    tx.buffer("events", (
        workflow_id, event, cap(actor, 200) or "app", cap(reason, states.REASON_LIMIT),
        step["id"] if step else None, step["step_name"] if step else None, step["attempt"] if step else None,
        Jsonb(payload.to_json(capped)),
    ), _write_events)


def _write_events(conn: psycopg.Connection[Any], rows: list[tuple[Any, ...]]) -> None:
    runs = list(dict.fromkeys(row[0] for row in rows))
    one = len(runs) == 1
    # one placeholder group per row, values bound; the runs' attention columns in the same round trip
    db.run(conn, filters.write_events(len(rows), one), [*(value for row in rows for value in row),
                                                         runs[0] if one else runs])


#: What runs when a run ends (finished or cancelled), in the transaction that ended it: registered
#: by the modules above that care (runner.children: a child's parent, a cancelled run's children).
_ENDED_HOOKS: list[Callable[[Engine, Transaction, Row], None]] = []


def on_run_ended(hook: Callable[[Engine, Transaction, Row], None]) -> Callable[[Engine, Transaction, Row], None]:
    """Register ``hook(engine, tx, row)`` to run whenever a transition ends a run."""
    _ENDED_HOOKS.append(hook)
    return hook


def run_ended(engine: Engine, tx: Transaction, ended: Row | None) -> None:
    """Every transition that ends a run calls this with the run's row as moved (None when the
    move did not happen: nothing to do)."""
    if ended is None:
        return
    for hook in _ENDED_HOOKS:
        hook(engine, tx, ended)


def spec_of(klass: type[Workflow] | None, step_name: str) -> StepSpec | None:
    """The step's declaration, or None when the class is not importable here or no longer has it."""
    if klass is None:
        return None
    try:
        return klass.step_spec(step_name)
    except StepNotDefined:
        return None


def load_class(engine: Engine, name: str) -> type[Workflow] | None:
    try:
        return registered(name, engine.settings.imports)
    except UnknownWorkflow:
        return None
    except ImportError:
        log.exception("pgbus: importing PGBUS_IMPORT failed while looking for %s", name)
        return None


def _root(tx: Transaction) -> Transaction:
    while tx.parent is not None:
        tx = tx.parent
    return tx


def remember_now(tx: Transaction, now: datetime) -> None:
    _root(tx).now = now


def now_of(tx: Transaction) -> datetime:
    """PostgreSQL's now(): the transaction's start time, read once per transaction."""
    root = _root(tx)
    if root.now is None:
        root.now = db.fetch_one(tx.conn, "now")["now"]  # type: ignore[index]
    return root.now


def consume_signal_of(conn: psycopg.Connection[Any], step: Row) -> None:
    """The signal held by ``step``'s attempts (if any) is consumed: the step has ended."""
    db.run(conn, "consume_signal_of_step", (step["workflow_id"], step["step_name"]))


def cancel_open_steps(conn: psycopg.Connection[Any], workflow_id: Any) -> None:
    db.run(conn, "cancel_open_steps", (workflow_id, list(states.OPEN_STEP)))
    close_open_batches(conn, workflow_id)


def close_open_batches(conn: psycopg.Connection[Any], workflow_id: Any) -> None:
    """The open step's batch is closed with it (a run has at most one open step): its
    remaining children will not run, and the sweep stops looking at it."""
    db.run(conn, "close_open_batches", (workflow_id,))
