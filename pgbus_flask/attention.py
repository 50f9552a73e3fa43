"""What a person must see, kept where a page can read it without scanning every run.

Each run's row carries its attention columns: the stuck reason it has or will
have, since when, its latest step's id and error class. A paused run is
``stalled`` (its latest step failed with StepStalled), ``paused_error`` (its
latest step failed otherwise) or ``paused_manual`` (paused by a person, or by
its step's own ``self.pause()``); a ready run is ``overdue`` and a run waiting
with no ``wait_timeout`` (on a signal or on a fan-out batch) is
``waiting_overdue`` once ``attention_since`` is older than their threshold
(migration 0007 has these rules, as the reference does). The runner
refreshes them with the statement ``attention_refresh_one`` (the SQL function
``pgbus_workflow_attention``, see ``pgbus_flask/sql/attention.sql``), in the statement that writes a transaction's
audit events: every transition writes its event, so every transition
refreshes the row it moved, in its own transaction.

``pgbus_run_counts`` holds the runs by class and status, the ongoing ones by
current step too (the insights pipeline, migration 0008), and the paused ones
by attention group, as rows of +N/-N added by triggers on ``pgbus_workflows``
(migration 0004) and folded by the sweep (:func:`fold`), so that no writer
waits on another's counter row.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from . import db, states

#: The stuck reasons kept for paused runs (no threshold: a paused run needs a person at once).
PAUSED_REASONS = states.PAUSED_REASONS
#: The stuck reasons a run gets once ``attention_since`` is older than a threshold.
DUE_REASONS = ("overdue", "waiting_overdue")


def of_ready(step: dict[str, Any]) -> dict[str, Any]:
    """The attention columns of a run made ready with ``step`` scheduled (what a refresh would
    compute), for the runner to write with the status itself: its hot path then writes the run's row
    once, and the refresh finds nothing to change."""
    return {"attention_reason": "overdue", "attention_since": step["scheduled_at"], "attention_step_id": step["id"],
            "attention_error_class": step["error_class"]}


def refresh(conn: Connection[Any], workflow_ids: list[Any]) -> None:
    """Refresh the attention columns of these runs (the runner does it in its events statement)."""
    db.fetch_all(conn, "attention_refresh", (workflow_ids,))


def refresh_all(conn: Connection[Any]) -> int:
    """Refresh every run's attention columns from its row and latest step: for rows written without
    the runner (a seed, a hand-made fix, a test moving stored times into the past). The count
    triggers follow. The number of runs whose columns changed."""
    row = db.fetch_one(conn, "attention_refresh_all")
    return int(row["changed"]) if row else 0


def rebuild(conn: Connection[Any]) -> None:
    """Refresh every run's attention columns and count every run again, in one transaction."""
    with conn.transaction():
        db.run(conn, "attention_refresh_all")
        db.run(conn, "counts_clear")
        db.run(conn, "counts_recount")


def fold(conn: Connection[Any]) -> int:
    """Fold the count rows into one per key; the number of rows written."""
    return db.run(conn, "counts_fold").rowcount
