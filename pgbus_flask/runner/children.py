"""Child workflow runs: a step that starts runs of other workflows and waits until they end.

A step returns ``self.start_child(Other, ...)`` (or a list of them). Its outcome transaction
starts the children (or finds them: their idempotency key is the parent, the step, the
"generation" and the position, so a redelivered, reattempted or resumed step never starts a
second set; ``rerun`` and ``resume_at`` begin a new generation) and parks the step
(``waiting``, its ``child_ids`` listed).

Every transition that ends a run calls :func:`run_ended` in its own transaction. For a child
it locks the parent's row (always child first, then parent: no transaction locks a parent and
then its children) and settles the parent's waiting step once no child is ongoing. A cancelled
parent cancels its ongoing children after it commits, each in a transaction of its own; the
sweep does again whatever a process that died meanwhile left undone (:func:`sweep_children`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from .. import db, messages, payload, states
from ..db import Transaction
from ..definition import ChildStart, StepSpec
from ..errors import ChildRunsCancelled, WorkflowNotFound
from .policy import fail_attempt
from .rows import (
    Row,
    cancel_open_steps,
    error_columns,
    latest_step,
    load_class,
    lock_run,
    move_run,
    move_step,
    now_of,
    on_run_ended,
    record_event,
    run_ended,
)
from .scheduling import advance
from .start import start

if TYPE_CHECKING:
    from ..engine import Engine

log = logging.getLogger("pgbus_flask")


def child_key(parent_id: Any, step_name: str, generation: int, position: int) -> str:
    """The idempotency key of a step's ``position``-th child run."""
    return f"pgbus-child:{parent_id}:{step_name}:{generation}:{position}"


def start_children(engine: Engine, tx: Transaction, run: Row, spec: StepSpec, step: Row,
                   children: Sequence[ChildStart], *, next_not_before: datetime | None = None) -> None:
    """Start the step's child runs (or find the ones it started before) in this transaction and
    park the step on them. A child that cannot start (a subject with an ongoing run, arguments
    that cannot be stored) raises before anything of them is kept: the caller fails the attempt.
    ``next_not_before``: the step's ``self.sleep()``, for when the children have ended."""
    wid = run["workflow_id"]
    generation = db.fetch_one(tx.conn, "child_generation", (wid,))["generation"]  # type: ignore[index]
    keys = [(child.klass.workflow_name, child_key(wid, step["step_name"], generation, position))
            for position, child in enumerate(children)]
    # The children a retried step started before, read without waiting: an INSERT ... ON CONFLICT
    # on one of their keys would wait for a transaction ending that child, which waits for this
    # run's lock (child first, then parent), a deadlock.
    found = {(r["workflow_class"], r["idempotency_key"]): r["workflow_id"] for r in db.fetch_all(
        tx.conn, "runs_of_keys", (sorted({cls for cls, _ in keys}), [key for _, key in keys]))}
    ids: list[Any] = []
    with engine.db.transaction() as sub:  # a savepoint: all of them, or none
        for (cls, key), child in zip(keys, children, strict=True):
            if (cls, key) in found:
                ids.append(found[(cls, key)])
                continue
            started = start(engine, child.klass, child.args, child.kwargs, subject=child.subject,
                            idempotency_key=key, actor="system", conn=sub.conn, parent=(wid, step["step_name"]))
            ids.append(started.workflow_id)
    parked = move_step(tx.conn, step["id"], ["in_progress"], "waiting", child_ids=ids,
                       on_child_failure=spec.on_child_failure, waiting_since=now_of(tx),
                       next_not_before=next_not_before)
    moved = move_run(tx.conn, wid, ["running"], "waiting")
    record_event(tx, wid, "children_started", "system", step=parked,
                 details={"total": len(ids), "workflow_ids": [str(i) for i in ids],
                          "classes": sorted({c.klass.workflow_name for c in children})})
    settle(engine, tx, moved or run, parked)  # children found ended already (a retried step)


def _children(conn: Any, ids: Sequence[Any]) -> list[Row]:
    return db.fetch_all(conn, "child_runs", (list(ids),))


def settle(engine: Engine, tx: Transaction, run: Row, step: Row | None) -> bool:
    """Complete (or fail) ``step``, waiting on its child runs, when none of them is ongoing.
    Call it holding the run's lock. True when the step ended."""
    if step is None or step["status"] != "waiting" or not step["child_ids"]:
        return False
    ids = list(step["child_ids"])
    rows = {r["workflow_id"]: r for r in _children(tx.conn, ids)}
    if any(r["status"] in states.ONGOING for r in rows.values()):
        return False
    # A child deleted meanwhile (PGBUS_RETENTION) had ended: it counts as finished, without output.
    cancelled = [rows[i] for i in ids if i in rows and rows[i]["status"] == "cancelled"]
    wid, total = run["workflow_id"], len(ids)
    record_event(tx, wid, "children_finished", "system", step=step,
                 details={"finished": total - len(cancelled), "cancelled": len(cancelled), "total": total})
    klass = load_class(engine, run["workflow_class"])
    if cancelled and step["on_child_failure"] != "continue":
        exc = ChildRunsCancelled(len(cancelled), total, (cancelled[0]["workflow_class"], cancelled[0]["workflow_id"]))
        fail_attempt(engine, tx, run, klass, step, error_columns(exc, trace=False), actor="system",
                     open_from=("waiting",))
        return True
    last = {r["workflow_id"]: r["output"] for r in db.fetch_all(tx.conn, "child_outputs", (ids,))}
    output = {
        "outputs": [payload.from_json(last[i]) if i in last and rows.get(i, {}).get("status") == "finished" else None
                    for i in ids],
        "finished": total - len(cancelled), "cancelled": len(cancelled), "total": total,
        "workflow_ids": [str(i) for i in ids],
    }
    done = move_step(tx.conn, step["id"], ["waiting"], "completed", finished_at=now_of(tx), outcome="completed",
                     output=Jsonb(payload.to_json(output)))
    if done is None:
        return False
    record_event(tx, wid, "step_completed", "system", step=done)
    if run["status"] == "waiting":
        advance(engine, tx, run, klass, step["step_name"], actor="system", not_before=step["next_not_before"])
    return True


@on_run_ended
def _family(engine: Engine, tx: Transaction, ended: Row) -> None:
    """What a run that just finished or was cancelled (``ended``: its row as moved) means to its
    family, in the same transaction: its parent's step settles if it was the last ongoing
    child; its own ongoing children are cancelled after commit when it was cancelled."""
    parent_id = ended.get("parent_workflow_id")
    if parent_id is not None:
        try:
            parent = lock_run(tx, parent_id)
        except WorkflowNotFound:
            parent = None  # deleted by retention: nobody waits
        if parent is not None and parent["status"] in states.ONGOING:
            step = db.fetch_one(tx.conn, "step_waiting_on_child", (parent_id, ended["workflow_id"]))
            settle(engine, tx, parent, step)
    if ended["status"] == "cancelled":
        wid = ended["workflow_id"]
        tx.after_commit(lambda: cancel_children(engine, wid))


def cancel_run(engine: Engine, tx: Transaction, run: Row, *, actor: str, reason: str | None,
               details: dict[str, Any] | None = None) -> Row | None:
    """Cancel an ongoing run held locked in ``tx``: its open steps, the run, the audit event, and
    what its end means to its family (the ``cancel`` verb, and a cancelled parent's children)."""
    wid = run["workflow_id"]
    latest = latest_step(tx.conn, wid)
    cancel_open_steps(tx.conn, wid)
    ended = move_run(tx.conn, wid, states.ONGOING, "cancelled", finished_at=now_of(tx))
    record_event(tx, wid, "cancelled", actor, reason=reason, step=latest, details=details)
    run_ended(engine, tx, ended)
    return ended


def cancel_children(engine: Engine, parent_id: Any) -> int:
    """Cancel every ongoing child run of a cancelled parent, each in its own transaction (and so
    on down: a child's own children follow). Returns how many were cancelled."""
    with engine.db.connection() as conn:
        ids = [r["workflow_id"] for r in db.fetch_all(conn, "ongoing_children", (parent_id, list(states.ONGOING)))]
    cancelled = 0
    for child in ids:
        with engine.db.transaction() as tx:
            try:
                run = lock_run(tx, child)
            except WorkflowNotFound:
                continue
            said = messages.params(run=str(parent_id))
            if run["status"] in states.ONGOING and cancel_run(
                    engine, tx, run, actor="system", reason=messages.english("parent_cancelled", said),
                    details={"message_code": "parent_cancelled", "message_params": said}):
                cancelled += 1
    return cancelled


def sweep_children(engine: Engine, *, older_than: float, limit: int = 500) -> tuple[int, int]:
    """What a process that died between a run's end and what follows may have left: ongoing
    children of cancelled parents (cancelled now) and steps still waiting on children that all
    ended (settled now). Both reads walk partial indexes of what is pending, not the tables.
    Returns (children cancelled, steps settled)."""
    with engine.db.connection() as conn, conn.transaction():
        db.run(conn, "sweep_serially")  # as the sweep's other reads: no parallel workers, no JIT
        orphans = [r["parent_workflow_id"] for r in db.fetch_all(conn, "orphaned_parents", (older_than, limit))]
        waiting = [(r["workflow_id"], r["id"])
                   for r in db.fetch_all(conn, "unsettled_child_waits", (older_than, limit))]
    cancelled = sum(cancel_children(engine, parent) for parent in orphans)
    settled = 0
    for wid, step_id in waiting:
        with engine.db.transaction() as tx:
            try:
                run = lock_run(tx, wid)
            except WorkflowNotFound:
                continue
            step = db.fetch_one(tx.conn, "step_by_id", (step_id,))
            if run["status"] in states.ONGOING and settle(engine, tx, run, step):
                settled += 1
    if cancelled or settled:
        log.info("pgbus: sweep cancelled %d orphaned child runs and settled %d steps waiting on children",
                 cancelled, settled)
    return cancelled, settled
