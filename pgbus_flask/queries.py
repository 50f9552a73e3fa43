"""Reads for the dashboard, the CLI and operators: counts, stuck reasons, the
attention groups, run lists with keyset pagination, batch progress, and the
bulk verbs over an attention group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from . import runner, states
from .engine import Engine
from .errors import PgbusError

Row = dict[str, Any]

GROUP_LIMIT = 200
IDS_LIMIT = 500


def status_counts(engine: Engine) -> dict[tuple[str, str], int]:
    """``{(workflow_class, status): runs}`` over every run."""
    with engine.db.connection() as conn:
        rows = conn.execute("SELECT workflow_class, status, count(*) FROM pgbus_workflows GROUP BY 1, 2").fetchall()
    return {(r[0], r[1]): r[2] for r in rows}


def _stuck_sql(waiting: bool, one_class: bool) -> str:
    """Each paused or ready run (and each waiting run when ``waiting``) with its latest step and
    why it is stuck (NULL when it is not). Parameters: %(overdue)s, %(waiting_cutoff)s, %(cls)s."""
    waiting_case = (
        "WHEN w.status = 'waiting' AND s.status = 'waiting' AND s.timeout_at IS NULL AND s.batch_id IS NULL"
        " AND s.waiting_since < %(waiting_cutoff)s THEN 'waiting_overdue'" if waiting else ""
    )
    waiting_since = "WHEN r.reason = 'waiting_overdue' THEN s.waiting_since" if waiting else ""
    statuses = "('paused', 'ready', 'waiting')" if waiting else "('paused', 'ready')"
    return f"""
        SELECT w.id, w.workflow_id, w.workflow_class, COALESCE(s.step_name, w.current_step) AS step_name,
               s.error_class, s.error_message, r.reason,
               CASE WHEN r.reason IN ('stalled', 'paused_error', 'paused_manual') THEN w.paused_at
                    WHEN r.reason = 'overdue' THEN s.scheduled_at
                    {waiting_since}
               END AS since
        FROM pgbus_workflows w
        LEFT JOIN LATERAL (
            SELECT step_name, status, error_class, error_message, scheduled_at, timeout_at, waiting_since, batch_id
            FROM pgbus_workflow_steps WHERE workflow_id = w.workflow_id ORDER BY id DESC LIMIT 1
        ) s ON TRUE
        CROSS JOIN LATERAL (
            SELECT CASE
                WHEN w.status = 'paused' AND s.status = 'failed' AND s.error_class = '{states.STALLED_ERROR}'
                    THEN 'stalled'
                WHEN w.status = 'paused' AND s.status = 'failed' AND s.error_class IS NOT NULL THEN 'paused_error'
                WHEN w.status = 'paused' THEN 'paused_manual'
                WHEN w.status = 'ready' AND s.status = 'scheduled' AND s.scheduled_at < %(overdue)s THEN 'overdue'
                {waiting_case}
            END AS reason
        ) r
        WHERE w.status IN {statuses} {"AND w.workflow_class = %(cls)s" if one_class else ""}
    """


def _params(engine: Engine, now: datetime | None, workflow_class: str | None) -> tuple[Row, bool]:
    settings = engine.settings
    waiting = settings.waiting_threshold is not None
    params: Row = {"cls": workflow_class}
    with engine.db.connection() as conn:
        db_now = now or conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    params["overdue"] = db_now - settings.stall_threshold
    params["waiting_cutoff"] = db_now - (settings.waiting_threshold or timedelta(0))
    return params, waiting


def stuck_reason_counts(engine: Engine, workflow_class: str | None = None,
                        now: datetime | None = None) -> dict[tuple[str, str], int]:
    """``{(workflow_class, reason): runs}`` of ongoing runs that need a person."""
    params, waiting = _params(engine, now, workflow_class)
    query = (f"SELECT workflow_class, reason, count(*) FROM ({_stuck_sql(waiting, workflow_class is not None)}) x"
             " WHERE reason IS NOT NULL GROUP BY 1, 2")
    with engine.db.connection() as conn:
        return {(r[0], r[1]): r[2] for r in conn.execute(query.encode(), params).fetchall()}


@dataclass(frozen=True)
class AttentionGroup:
    workflow_class: str
    step_name: str
    reason: str
    error_class: str | None
    count: int
    first_seen_at: datetime | None
    last_seen_at: datetime | None
    error_message: str | None

    def key(self) -> dict[str, Any]:
        return {"workflow_class": self.workflow_class, "step_name": self.step_name, "reason": self.reason,
                "error_class": self.error_class}


def attention_groups(engine: Engine, workflow_class: str | None = None, *, limit: int = GROUP_LIMIT,
                     now: datetime | None = None) -> list[AttentionGroup]:
    """Stuck runs grouped by (class, step, reason, error class), the biggest group first."""
    params, waiting = _params(engine, now, workflow_class)
    params["limit"] = min(int(limit), GROUP_LIMIT)
    query = f"""
        SELECT workflow_class, step_name, reason, error_class, count(*) AS runs,
               min(since) AS first_seen_at, max(since) AS last_seen_at,
               (array_agg(error_message ORDER BY since DESC NULLS LAST, id DESC))[1] AS error_message
        FROM ({_stuck_sql(waiting, workflow_class is not None)}) x
        WHERE reason IS NOT NULL
        GROUP BY workflow_class, step_name, reason, error_class
        ORDER BY runs DESC, last_seen_at DESC NULLS LAST, workflow_class, step_name
        LIMIT %(limit)s
    """
    with engine.db.connection() as conn:
        rows = conn.execute(query.encode(), params).fetchall()
    return [AttentionGroup(*row) for row in rows]


def attention_ids(engine: Engine, workflow_class: str, step_name: str, reason: str, error_class: str | None, *,
                  limit: int = IDS_LIMIT, now: datetime | None = None) -> list[Any]:
    """The workflow ids of one attention group, oldest stuck first, at most ``limit`` (500)."""
    if reason not in states.STUCK_REASONS:
        raise PgbusError(f"unknown stuck reason {reason!r} (known: {', '.join(states.STUCK_REASONS)})")
    params, waiting = _params(engine, now, workflow_class)
    params.update(step=step_name, reason=reason, error=error_class, limit=min(int(limit), IDS_LIMIT))
    query = f"""
        SELECT workflow_id FROM ({_stuck_sql(waiting, True)}) x
        WHERE step_name = %(step)s AND reason = %(reason)s AND error_class IS NOT DISTINCT FROM %(error)s
        ORDER BY since NULLS LAST, id LIMIT %(limit)s
    """
    with engine.db.connection() as conn:
        return [r[0] for r in conn.execute(query.encode(), params).fetchall()]


@dataclass
class BulkResult:
    """What a bulk verb did: how many runs moved, and which were refused and why."""

    action: str
    moved: int = 0
    refused: int = 0
    errors: dict[str, str] = field(default_factory=dict)


def bulk_act(engine: Engine, action: str, group: dict[str, Any], *, actor: str, reason: str | None = None,
             limit: int = IDS_LIMIT) -> BulkResult:
    """Apply ``resume``, ``skip`` or ``cancel`` to the runs of one attention group (at most 500)."""
    if action not in states.BULK_ACTIONS:
        raise PgbusError(f"bulk action must be one of {', '.join(states.BULK_ACTIONS)}, got {action!r}")
    ids = attention_ids(engine, group["workflow_class"], group["step_name"], group["reason"],
                        group.get("error_class"), limit=limit)
    result = BulkResult(action)
    verb = getattr(runner, action)
    for workflow_id in ids:
        try:
            verb(engine, workflow_id, actor=actor, reason=reason)
            result.moved += 1
        except PgbusError as exc:
            result.refused += 1
            result.errors[str(workflow_id)] = str(exc)
    return result


# -- run lists ---------------------------------------------------------------


@dataclass(frozen=True)
class RunFilter:
    """The runs list's filters (all optional) and its keyset cursor."""

    workflow_class: str | None = None
    status: str | None = None
    step: str | None = None
    reason: str | None = None
    error_class: str | None = None  # with reason: the attention group's error class ("" for none)
    subject: str | None = None
    text: str | None = None
    before: int | None = None  # keyset: runs with id < before
    limit: int = 50


def list_runs(engine: Engine, f: RunFilter) -> tuple[list[Row], int | None]:
    """Runs newest first, each with its latest step; and the cursor of the next page (or None)."""
    if f.status and f.status not in states.RUN_STATUSES:
        raise PgbusError(f"unknown status {f.status!r} (known: {', '.join(states.RUN_STATUSES)})")
    if f.reason and f.reason not in states.STUCK_REASONS:
        raise PgbusError(f"unknown stuck reason {f.reason!r} (known: {', '.join(states.STUCK_REASONS)})")
    limit = max(1, min(int(f.limit), 200))
    where = [sql.SQL("TRUE")]
    params: Row = {"limit": limit + 1}
    if f.workflow_class:
        where.append(sql.SQL("w.workflow_class = %(cls)s"))
        params["cls"] = f.workflow_class
    if f.status:
        where.append(sql.SQL("w.status = %(status)s"))
        params["status"] = f.status
    if f.step:
        where.append(sql.SQL("w.current_step = %(step)s"))
        params["step"] = f.step
    if f.subject:
        kind, _, ident = f.subject.partition(" ")
        where.append(sql.SQL("w.subject_type = %(stype)s"))
        params["stype"] = kind
        if ident:
            where.append(sql.SQL("w.subject_id = %(sid)s"))
            params["sid"] = ident
    if f.text:
        where.append(sql.SQL("(w.workflow_id::text LIKE %(text_prefix)s OR w.subject_id = %(text)s"
                             " OR (w.subject_type || ' ' || w.subject_id) ILIKE %(text_like)s)"))
        params.update(text=f.text.strip(), text_prefix=f.text.strip().lower() + "%",
                      text_like="%" + f.text.strip().replace("%", r"\%").replace("_", r"\_") + "%")
    if f.before:
        where.append(sql.SQL("w.id < %(before)s"))
        params["before"] = f.before
    if f.reason:
        p, waiting = _params(engine, None, f.workflow_class)
        params.update(overdue=p["overdue"], waiting_cutoff=p["waiting_cutoff"], reason=f.reason,
                      cls=f.workflow_class)
        error = ""
        if f.error_class is not None:
            error = " AND error_class IS NOT DISTINCT FROM %(error_class)s"
            params["error_class"] = f.error_class or None
        where.append(sql.SQL("w.id IN (SELECT id FROM (" + _stuck_sql(waiting, f.workflow_class is not None)
                             + ") x WHERE reason = %(reason)s" + error + ")"))
    query = sql.SQL("""
        SELECT w.*, s.id AS step_id, s.step_name AS step_step_name, s.attempt AS step_attempt,
               s.status AS step_status, s.scheduled_at AS step_scheduled_at, s.started_at AS step_started_at,
               s.stall_at AS step_stall_at, s.enqueued_at AS step_enqueued_at, s.error_class AS step_error_class,
               s.error_message AS step_error_message, s.waiting_since AS step_waiting_since,
               s.timeout_at AS step_timeout_at, s.batch_id AS step_batch_id, s.outcome AS step_outcome,
               s.finished_at AS step_finished_at,
               b.done AS batch_done, b.failed AS batch_failed, b.total AS batch_total
        FROM pgbus_workflows w
        LEFT JOIN LATERAL (SELECT * FROM pgbus_workflow_steps WHERE workflow_id = w.workflow_id
                           ORDER BY id DESC LIMIT 1) s ON TRUE
        LEFT JOIN pgbus_batches b ON b.id = s.batch_id
        WHERE {where}
        ORDER BY w.id DESC LIMIT %(limit)s
    """).format(where=sql.SQL(" AND ").join(where))
    with engine.db.connection() as conn:
        rows = list(runner._q(conn, query, params).fetchall())  # type: ignore[arg-type]
    cursor = rows[limit - 1]["id"] if len(rows) > limit else None
    return rows[:limit], cursor


def batch_progress(engine: Engine, batch_id: int) -> tuple[Row, list[Row]] | None:
    """A batch (done, failed, total, status ...) and its children, or None."""
    with engine.db.connection() as conn:
        batch = runner._q(conn, "SELECT * FROM pgbus_batches WHERE id = %s", (batch_id,)).fetchone()
        if batch is None:
            return None
        children = list(runner._q(conn, "SELECT * FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position",
                                  (batch_id,)).fetchall())
    return batch, children
