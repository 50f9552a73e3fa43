"""What a person must see, kept where a page can read it without scanning every run.

Each run's row carries its attention columns: the stuck reason it has or will
have (a paused run's stalled / paused_error / paused_manual; ``overdue`` for a
ready run and ``waiting_overdue`` for a run waiting on a signal with no
``wait_timeout``, which count once ``attention_since`` is older than their
threshold), since when, its latest step's id and error class. The runner
refreshes them with :data:`REFRESH`, in the statement that writes a
transaction's audit events: every transition writes its event, so every
transition refreshes the row it moved, in its own transaction.

``pgbus_run_counts`` holds the runs by class and status, and the paused ones
by attention group, as rows of +N/-N added by triggers on ``pgbus_workflows``
(migration 0004) and folded by the sweep (:func:`fold`), so that no writer
waits on another's counter row.
"""

from __future__ import annotations

from typing import Any

from psycopg import Connection

from . import states

#: The stuck reasons kept for paused runs (no threshold: a paused run needs a person at once).
PAUSED_REASONS = ("stalled", "paused_error", "paused_manual")
#: The stuck reasons a run gets once ``attention_since`` is older than a threshold.
DUE_REASONS = ("overdue", "waiting_overdue")

# Each run's attention columns as its row and latest step say now; {where} picks the runs.
_COMPUTED = f"""
    SELECT r.id, a.reason,
           CASE WHEN a.reason IS NULL THEN NULL
                WHEN r.status = 'paused' THEN r.paused_at
                WHEN r.status = 'ready' THEN s.scheduled_at
                ELSE s.waiting_since END AS since,
           CASE WHEN a.reason IS NOT NULL THEN s.id END AS step_id,
           CASE WHEN a.reason IS NOT NULL THEN s.error_class END AS error_class
    FROM pgbus_workflows r
    LEFT JOIN LATERAL (SELECT id, status, error_class, scheduled_at, waiting_since, timeout_at, batch_id
                       FROM pgbus_workflow_steps WHERE workflow_id = r.workflow_id ORDER BY id DESC LIMIT 1) s ON TRUE
    CROSS JOIN LATERAL (SELECT CASE
        WHEN r.status = 'paused' AND s.status = 'failed' AND s.error_class = '{states.STALLED_ERROR}'
            THEN 'stalled'
        WHEN r.status = 'paused' AND s.status = 'failed' AND s.error_class IS NOT NULL THEN 'paused_error'
        WHEN r.status = 'paused' THEN 'paused_manual'
        WHEN r.status = 'ready' AND s.status = 'scheduled' THEN 'overdue'
        WHEN r.status = 'waiting' AND s.status = 'waiting' AND s.timeout_at IS NULL AND s.batch_id IS NULL
            THEN 'waiting_overdue'
        END AS reason) a
    WHERE {{where}}
"""

# The guard: a row whose columns already say the same is not written again.
_SET = """
    UPDATE pgbus_workflows w
    SET attention_reason = f.reason, attention_since = f.since, attention_step_id = f.step_id,
        attention_error_class = f.error_class
    FROM ({computed}) f
    WHERE w.id = f.id
      AND (w.attention_reason, w.attention_since, w.attention_step_id, w.attention_error_class)
          IS DISTINCT FROM (f.reason, f.since, f.step_id, f.error_class)
"""

#: Refresh the attention columns of the runs whose workflow ids are the last parameter (a list).
REFRESH = _SET.format(computed=_COMPUTED.format(where="r.workflow_id = ANY(%s)"))

#: Refresh every run's (what migration 0004 did once; for rows written by hand, as the benchmarks do).
REFRESH_ALL = _SET.format(computed=_COMPUTED.format(where="TRUE"))

_KEY = """workflow_class, status,
       CASE WHEN status = 'paused' THEN current_step ELSE '' END,
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


def refresh(conn: Connection[Any], workflow_ids: list[Any]) -> None:
    """Refresh the attention columns of these runs (the runner does it in its events statement)."""
    conn.execute(REFRESH, (workflow_ids,))


def refresh_all(conn: Connection[Any]) -> int:
    """Refresh every run's attention columns from its row and latest step: for rows written without
    the runner (a seed, a hand-made fix, a test moving stored times into the past). The count
    triggers follow. The number of runs whose columns changed."""
    return conn.execute(REFRESH_ALL).rowcount


def rebuild(conn: Connection[Any]) -> None:
    """Refresh every run's attention columns and count every run again, in one transaction."""
    with conn.transaction():
        conn.execute(REFRESH_ALL)
        conn.execute("DELETE FROM pgbus_run_counts")
        conn.execute(RECOUNT)


def fold(conn: Connection[Any]) -> int:
    """Fold the count rows into one per key; the number of rows written."""
    return conn.execute(FOLD).rowcount
