"""Fan-out: a step's batch of child jobs, each child's result, and the batch's end."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from .. import payload
from ..db import Transaction
from ..definition import FanOut, StepSpec
from ..errors import ArgumentsNotSerializable, ChildJobFailed
from .policy import fail_attempt
from .rows import Row, error_columns, load_class, lock_run, move_run, move_step, now_of, query, record_event
from .scheduling import advance, route

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow


def open_batch(engine: Engine, tx: Transaction, run: Row, spec: StepSpec, klass: type[Workflow], step: Row,
               fan_out: FanOut, *, next_not_before: datetime | None = None) -> None:
    """Open a batch for a step's fan-out, park the step on it, send the children after commit.
    ``next_not_before``: the step's ``self.sleep()``, for when the batch finishes."""
    queue = route(engine, klass, step["step_name"])[0]
    args = [payload.to_json(list(a), what=f"fan_out argument tuple {i}") for i, a in enumerate(fan_out.args)]
    batch = query(
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
                       waiting_since=now_of(tx), next_not_before=next_not_before)
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
            {"result": Jsonb(stored), "error_class": None, "error_message": None, "error_code": None,
             "error_params": None}
            if error is None
            else {"result": None, **error_columns(error, trace=False)}
        )
        child = tx.conn.execute(
            "UPDATE pgbus_batch_children SET status = %s, finished_at = now(), result = %s, error_class = %s,"
            " error_message = %s, error_code = %s, error_params = %s"
            " WHERE batch_id = %s AND position = %s AND status = 'pending' RETURNING position",
            ("done" if error is None else "failed", cols["result"], cols["error_class"], cols["error_message"],
             cols["error_code"], cols["error_params"], batch_id, position),
        ).fetchone()
        if child is None:
            return False
        batch = query(
            tx.conn,
            "UPDATE pgbus_batches SET done = done + %s, failed = failed + %s WHERE id = %s RETURNING *",
            (int(error is None), int(error is not None), batch_id),
        ).fetchone()
        if batch["status"] == "open" and batch["done"] + batch["failed"] >= batch["total"]:
            finish_batch(engine, tx, run, batch)
        return True


def resend_child(engine: Engine, batch_id: int, position: int) -> str | None:
    """Give a pending child whose job Redis lost a new job id (the caller sends it). Returns the
    new id, or None when the child is no longer pending (it was recorded meanwhile)."""
    new_id = f"pgbus-child-{batch_id}-{position}-{uuid.uuid4().hex[:8]}"
    with engine.db.connection() as conn:
        moved = conn.execute(
            "UPDATE pgbus_batch_children SET job_id = %s, enqueued_at = now() WHERE batch_id = %s"
            " AND position = %s AND status = 'pending' RETURNING position",
            (new_id, batch_id, position),
        ).fetchone()
    return new_id if moved else None


def finish_batch(engine: Engine, tx: Transaction, run: Row, batch: Row) -> None:
    batch = query(tx.conn, "UPDATE pgbus_batches SET status = 'finished', finished_at = now() WHERE id = %s"
                  " AND status = 'open' RETURNING *", (batch["id"],)).fetchone()
    if batch is None:
        return
    wid = run["workflow_id"]
    step = query(tx.conn, "SELECT * FROM pgbus_workflow_steps WHERE id = %s", (batch["step_id"],)).fetchone()
    record_event(tx, wid, "fan_out_finished", "system", step=step,
                 details={"batch_id": batch["id"], "done": batch["done"], "failed": batch["failed"],
                          "total": batch["total"]})
    if step is None or step["status"] != "waiting":
        return  # the step was skipped, cancelled or resumed elsewhere meanwhile
    klass = load_class(engine, run["workflow_class"])
    if batch["failed"] and batch["on_child_failure"] == "fail":
        first = tx.conn.execute(
            "SELECT position, error_class, error_message FROM pgbus_batch_children WHERE batch_id = %s"
            " AND status = 'failed' ORDER BY position LIMIT 1", (batch["id"],)).fetchone()
        exc = ChildJobFailed(batch["failed"], batch["total"], (first[0], first[1], first[2]) if first else None)
        fail_attempt(engine, tx, run, klass, step, error_columns(exc, trace=False), actor="system",
                     open_from=("waiting",))
        return
    results = [
        payload.from_json(r[0]) for r in tx.conn.execute(
            "SELECT result FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position", (batch["id"],))
    ]
    output = {"done": batch["done"], "failed": batch["failed"], "total": batch["total"], "results": results}
    done = move_step(tx.conn, step["id"], ["waiting"], "completed", finished_at=now_of(tx), outcome="completed",
                     output=Jsonb(payload.to_json(output)))
    record_event(tx, wid, "step_completed", "system", step=done)
    if run["status"] == "waiting":
        advance(engine, tx, run, klass, step["step_name"], actor="system", not_before=step["next_not_before"])
