"""Signals: stored once per idempotency key, claimed by the step that waits for them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from .. import db, payload, states
from ..db import Transaction
from ..errors import ArgumentsNotSerializable, SignalRefused, StepNotDefined, TooManyPendingSignals
from .allowed import check_allowed
from .attempt import held_or_claim_signal
from .rows import Row, cap, check_who, latest_step, load_class, move_run, move_step, now_of, record_event
from .scheduling import next_send, send_after_commit

if TYPE_CHECKING:
    from ..engine import Engine


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
    the stored signal with ``duplicate_delivery`` set. Any other signal to a run
    that already holds ``PGBUS_MAX_PENDING_SIGNALS`` pending ones is refused with
    :class:`TooManyPendingSignals`, and nothing is stored.
    """
    if not isinstance(name, str) or not name.strip() or len(name) > states.SIGNAL_NAME_LIMIT:
        raise SignalRefused(f"signal name must be a non-empty string of at most {states.SIGNAL_NAME_LIMIT} "
                            f"characters, got "
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
        run, _latest, _klass = check_allowed(engine, tx, "signal", workflow_id)
        # Under the run's row lock (taken by check_allowed), which every signal to it takes first: no other
        # signal can be stored between this count and the insert. A redelivery is answered first.
        if idempotency_key is not None:
            existing = _stored(tx, workflow_id, idempotency_key)
            if existing is not None:
                return _signal_result(existing, True)
        limit = engine.settings.max_pending_signals
        # Counted up to the limit only (an index-only range of pgbus_workflow_signals_pending).
        pending = db.fetch_one(tx.conn, "pending_signals_up_to", (workflow_id, limit))["n"]  # type: ignore[index]
        if pending >= limit:
            raise TooManyPendingSignals(workflow_id, limit)
        row = db.fetch_one(tx.conn, "store_signal",
                           (workflow_id, name, Jsonb(data_json), idempotency_key, cap(actor, 200)))
        if row is None:  # stored meanwhile under this key (every signal takes the run's lock first: never)
            existing = _stored(tx, workflow_id, idempotency_key)
            assert existing is not None
            return _signal_result(existing, True)
        record_event(tx, workflow_id, "signal_received", actor, reason=reason,
                     details={"signal": name, "signal_id": row["id"]})
        if run["status"] == "waiting":
            row = deliver_to_waiting_step(engine, tx, run, name) or row
        return _signal_result(row, False)


def _stored(tx: Transaction, workflow_id: Any, idempotency_key: str | None) -> Row | None:
    """The signal stored for this run under ``idempotency_key``, if any."""
    return db.fetch_one(tx.conn, "signal_of_key", (workflow_id, idempotency_key))


def deliver_to_waiting_step(engine: Engine, tx: Transaction, run: Row, name: str) -> Row | None:
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
    signal, claimed = held_or_claim_signal(tx.conn, step, name)
    if signal is None:
        return None
    if claimed:
        record_event(tx, run["workflow_id"], "signal_claimed", "system", step=step,
                     details={"signal": name, "signal_id": signal["id"]})
    woken = move_step(tx.conn, step["id"], ["waiting"], "scheduled", scheduled_at=now_of(tx), enqueued_at=now_of(tx),
                      **next_send(step))
    move_run(tx.conn, run["workflow_id"], ["waiting"], "ready")
    if woken is not None:
        send_after_commit(engine, tx, klass, woken)
    return signal
