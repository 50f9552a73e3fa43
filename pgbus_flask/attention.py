"""What a person must see, kept where a page can read it without scanning every run.

Each run's row carries its attention columns: the stuck reason it has or will
have, since when, its latest step's id and error class. A paused run is
``stalled`` (its latest step failed with StepStalled), ``paused_error`` (its
latest step failed otherwise) or ``paused_manual`` (paused by a person, or by
its step's own ``self.pause()``); a ready run is ``overdue`` and a run waiting
with no ``wait_timeout`` (on a signal or on a fan-out batch) is
``waiting_overdue`` once ``attention_since`` is older than their threshold
(migration 0007 has these rules, as the reference does). The runner
refreshes them with :data:`REFRESH_ONE` (the SQL function
``pgbus_workflow_attention``), in the statement that writes a transaction's
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

from . import states

#: The stuck reasons kept for paused runs (no threshold: a paused run needs a person at once).
PAUSED_REASONS = states.PAUSED_REASONS
#: The stuck reasons a run gets once ``attention_since`` is older than a threshold.
DUE_REASONS = ("overdue", "waiting_overdue")

#: Refresh the attention columns of the runs whose workflow ids are the last parameter (a list):
#: ``pgbus_workflow_attention(uuid)`` (migrations 0004, 0007) computes them from the run's row and latest
#: step and writes them only when they change.
REFRESH = "SELECT pgbus_workflow_attention(run_id) FROM unnest(%s::uuid[]) AS run_id"

#: The same for one run (the last parameter, a workflow id): a transaction's events nearly always
#: name one run.
REFRESH_ONE = "SELECT pgbus_workflow_attention(%s::uuid)"

#: Refresh every run that is ongoing or has attention columns (a terminal run's are empty): the
#: number of runs whose columns changed.
REFRESH_ALL = ("SELECT count(*) FROM pgbus_workflows"
               " WHERE (status IN ('ready', 'waiting', 'paused', 'running') OR attention_reason IS NOT NULL)"
               " AND pgbus_workflow_attention(workflow_id)")

_KEY = """workflow_class, status,
       CASE WHEN status IN ('ready', 'running', 'waiting', 'paused') THEN current_step ELSE '' END,
       CASE WHEN status = 'paused' THEN COALESCE(attention_reason, '') ELSE '' END,
       CASE WHEN status = 'paused' THEN COALESCE(attention_error_class, '') ELSE '' END"""

#: Count every run again from scratch (after the count triggers were off, or rows were copied in).
RECOUNT = f"""
    INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
    SELECT {_KEY}, count(*) FROM pgbus_workflows GROUP BY 1, 2, 3, 4, 5
"""

#: One row per key for every key with several: the sum of their runs (none when it is 0). Rows added
#: while it runs are not in its snapshot, so it neither deletes nor counts them.
FOLD = """
    WITH many AS (
        SELECT workflow_class, status, step, attention_reason, error_class FROM pgbus_run_counts
        GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1
    ), folded AS (
        DELETE FROM pgbus_run_counts c USING many m
        WHERE (c.workflow_class, c.status, c.step, c.attention_reason, c.error_class)
            = (m.workflow_class, m.status, m.step, m.attention_reason, m.error_class)
        RETURNING c.workflow_class, c.status, c.step, c.attention_reason, c.error_class, c.runs
    )
    INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
    SELECT workflow_class, status, step, attention_reason, error_class, sum(runs) FROM folded
    GROUP BY 1, 2, 3, 4, 5 HAVING sum(runs) <> 0
"""


def of_ready(step: dict[str, Any]) -> dict[str, Any]:
    """The attention columns of a run made ready with ``step`` scheduled (what :data:`REFRESH` would
    compute), for the runner to write with the status itself: its hot path then writes the run's row
    once, and the refresh finds nothing to change."""
    return {"attention_reason": "overdue", "attention_since": step["scheduled_at"], "attention_step_id": step["id"],
            "attention_error_class": step["error_class"]}


def refresh(conn: Connection[Any], workflow_ids: list[Any]) -> None:
    """Refresh the attention columns of these runs (the runner does it in its events statement)."""
    conn.execute(REFRESH, (workflow_ids,)).fetchall()


def refresh_all(conn: Connection[Any]) -> int:
    """Refresh every run's attention columns from its row and latest step: for rows written without
    the runner (a seed, a hand-made fix, a test moving stored times into the past). The count
    triggers follow. The number of runs whose columns changed."""
    row = conn.execute(REFRESH_ALL).fetchone()
    return int(row[0]) if row else 0


def rebuild(conn: Connection[Any]) -> None:
    """Refresh every run's attention columns and count every run again, in one transaction."""
    with conn.transaction():
        conn.execute(REFRESH_ALL)
        conn.execute("DELETE FROM pgbus_run_counts")
        conn.execute(RECOUNT)


def fold(conn: Connection[Any]) -> int:
    """Fold the count rows into one per key; the number of rows written."""
    return conn.execute(FOLD).rowcount
