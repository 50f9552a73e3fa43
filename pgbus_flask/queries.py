"""Reads for the dashboard, the CLI and operators: counts, stuck reasons, the
attention groups, run lists with keyset pagination, batch progress, the
bulk verbs over an attention group, and run ids given by a prefix.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from . import payload, runner, states
from .engine import Engine
from .errors import InvalidInput, PgbusError, WorkflowNotFound

Row = dict[str, Any]

GROUP_LIMIT = 200
IDS_LIMIT = 500
PAUSED_REASONS = ("stalled", "paused_error", "paused_manual")
#: A run list's page size is 1 to this many runs.
MAX_LIMIT = 200
#: The fewest hex digits a run id prefix may have (a verb must not land on a run by chance).
MIN_PREFIX = 4
#: How many candidates an ambiguous prefix lists.
PREFIX_CANDIDATES = 5
_ID_TEMPLATE = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
_HEX = frozenset("0123456789abcdef")
# The runs whose ids lie in [low, high]: a range scan of the unique index on workflow_id.
RUNS_BY_ID_RANGE = ("SELECT workflow_id, workflow_class, status FROM pgbus_workflows"
                    " WHERE workflow_id BETWEEN %s AND %s ORDER BY workflow_id LIMIT %s")


def _checked(*filters: tuple[str, str | None]) -> None:
    """Refuse a filter value PostgreSQL cannot compare (a NUL or a lone surrogate) with
    :class:`InvalidInput` naming the filter, instead of a driver error."""
    for name, value in filters:
        if value:
            payload.check_text(value, name, required=False)


def status_counts(engine: Engine) -> dict[tuple[str, str], int]:
    """``{(workflow_class, status): runs}`` over every run."""
    with engine.db.connection() as conn:
        rows = conn.execute("SELECT workflow_class, status, count(*) FROM pgbus_workflows GROUP BY 1, 2").fetchall()
    return {(r[0], r[1]): r[2] for r in rows}


def _stuck_sql(waiting: bool, one_class: bool, reason: str | None = None) -> str:
    """Each stuck ongoing run with its latest step and why it is stuck: one ``UNION ALL`` branch per
    kind of reason, each starting from an index, so the cost follows the stuck runs rather than every
    ongoing run. Only the branch of ``reason`` when given (the caller still filters on it). Columns: id,
    workflow_id, workflow_class, step_name, error_class, error_message, reason, since. Parameters:
    %(overdue)s, %(waiting_cutoff)s, %(cls)s.

    * paused runs (``pgbus_workflows_ongoing``), each with its latest step (``pgbus_workflow_steps_latest``):
      stalled, paused_error or paused_manual, since ``paused_at``;
    * overdue: scheduled steps due before the cutoff (``pgbus_workflow_steps_scheduled``) of ready
      runs, since ``scheduled_at``;
    * waiting_overdue (only when ``waiting``): waiting steps with no deadline and no batch, waiting
      since before the cutoff (``pgbus_workflow_steps_waiting_no_deadline``), of waiting runs, since
      ``waiting_since``.

    The last two rely on the engine's invariant that a run has at most one open step (scheduled,
    in_progress or waiting) and that it is the run's latest step: a new step row is only inserted
    once the latest one is closed. Checking "latest" there again would cost one more index probe per
    stuck run (2-3.5x on the waiting branch when every waiting run is overdue).
    """
    cls = " AND w.workflow_class = %(cls)s" if one_class else ""
    branches: list[str] = []
    if reason is None or reason in PAUSED_REASONS:
        branches.append(f"""
        SELECT w.id, w.workflow_id, w.workflow_class, COALESCE(s.step_name, w.current_step) AS step_name,
               s.error_class, s.error_message,
               CASE WHEN s.status = 'failed' AND s.error_class = '{states.STALLED_ERROR}' THEN 'stalled'
                    WHEN s.status = 'failed' AND s.error_class IS NOT NULL THEN 'paused_error'
                    ELSE 'paused_manual' END AS reason,
               w.paused_at AS since
        FROM pgbus_workflows w
        LEFT JOIN LATERAL (
            SELECT step_name, status, error_class, error_message
            FROM pgbus_workflow_steps WHERE workflow_id = w.workflow_id ORDER BY id DESC LIMIT 1
        ) s ON TRUE
        WHERE w.status = 'paused'{cls}""")
    # The run of each candidate step is looked up by its workflow_id, one probe per candidate: the
    # OFFSET 0 keeps the planner from hashing every ready (or waiting) run instead, which it would do
    # on a misestimate of the candidates (it cannot tell how many scheduled steps are past due).
    run_of = ("CROSS JOIN LATERAL (SELECT r.id, r.workflow_id, r.workflow_class FROM pgbus_workflows r"
              " WHERE r.workflow_id = s.workflow_id AND r.status = '{status}'"
              + (" AND r.workflow_class = %(cls)s" if one_class else "") + " OFFSET 0) w")
    if reason is None or reason == "overdue":
        branches.append(f"""
        SELECT w.id, w.workflow_id, w.workflow_class, s.step_name, s.error_class, s.error_message,
               'overdue'::text AS reason, s.scheduled_at AS since
        FROM pgbus_workflow_steps s
        {run_of.format(status="ready")}
        WHERE s.status = 'scheduled' AND s.scheduled_at < %(overdue)s""")
    if waiting and (reason is None or reason == "waiting_overdue"):
        branches.append(f"""
        SELECT w.id, w.workflow_id, w.workflow_class, s.step_name, s.error_class, s.error_message,
               'waiting_overdue'::text AS reason, s.waiting_since AS since
        FROM pgbus_workflow_steps s
        {run_of.format(status="waiting")}
        WHERE s.status = 'waiting' AND s.timeout_at IS NULL AND s.batch_id IS NULL
          AND s.waiting_since < %(waiting_cutoff)s""")
    if not branches:  # waiting_overdue asked for with no waiting threshold: no rows, same columns
        return ("SELECT NULL::bigint AS id, NULL::uuid AS workflow_id, NULL::text AS workflow_class,"
                " NULL::text AS step_name, NULL::text AS error_class, NULL::text AS error_message,"
                " NULL::text AS reason, NULL::timestamptz AS since WHERE FALSE")
    return "\n        UNION ALL".join(branches) + "\n"


def _params(engine: Engine, now: datetime | None, workflow_class: str | None) -> tuple[Row, bool]:
    settings = engine.settings
    waiting = settings.waiting_threshold is not None
    params: Row = {"cls": workflow_class}
    with engine.db.connection() as conn:
        db_now = now or conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    params["overdue"] = db_now - settings.stall_threshold
    params["waiting_cutoff"] = db_now - (settings.waiting_threshold or timedelta(0))
    return params, waiting


def _fetch_stuck(engine: Engine, query: str, params: Row) -> list[tuple[Any, ...]]:
    """Rows of a read over ``_stuck_sql``, with JIT off for its transaction: with many paused runs the
    planner's estimate crosses ``jit_above_cost`` and compiling costs more than the index-driven plan
    itself (about 20 ms of 110 at 20,000 paused runs)."""
    with engine.db.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL jit = off")
        return list(conn.execute(query.encode(), params).fetchall())


def stuck_reason_counts(engine: Engine, workflow_class: str | None = None,
                        now: datetime | None = None) -> dict[tuple[str, str], int]:
    """``{(workflow_class, reason): runs}`` of ongoing runs that need a person."""
    _checked(("class", workflow_class))
    params, waiting = _params(engine, now, workflow_class)
    query = (f"SELECT workflow_class, reason, count(*) FROM ({_stuck_sql(waiting, workflow_class is not None)}) x"
             " GROUP BY 1, 2")
    return {(r[0], r[1]): r[2] for r in _fetch_stuck(engine, query, params)}


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
    _checked(("class", workflow_class))
    params, waiting = _params(engine, now, workflow_class)
    params["limit"] = min(int(limit), GROUP_LIMIT)
    query = f"""
        SELECT workflow_class, step_name, reason, error_class, count(*) AS runs,
               min(since) AS first_seen_at, max(since) AS last_seen_at,
               (array_agg(error_message ORDER BY since DESC NULLS LAST, id DESC))[1] AS error_message
        FROM ({_stuck_sql(waiting, workflow_class is not None)}) x
        GROUP BY workflow_class, step_name, reason, error_class
        ORDER BY runs DESC, last_seen_at DESC NULLS LAST, workflow_class, step_name
        LIMIT %(limit)s
    """
    return [AttentionGroup(*row) for row in _fetch_stuck(engine, query, params)]


def attention_ids(engine: Engine, workflow_class: str, step_name: str, reason: str, error_class: str | None, *,
                  limit: int = IDS_LIMIT, now: datetime | None = None) -> list[Any]:
    """The workflow ids of one attention group, oldest stuck first, at most ``limit`` (500)."""
    if reason not in states.STUCK_REASONS:
        raise InvalidInput("stuck reason", f"{reason!r} is unknown (known: {', '.join(states.STUCK_REASONS)})")
    _checked(("class", workflow_class), ("step", step_name), ("error class", error_class))
    params, waiting = _params(engine, now, workflow_class)
    params.update(step=step_name, reason=reason, error=error_class, limit=min(int(limit), IDS_LIMIT))
    query = f"""
        SELECT workflow_id FROM ({_stuck_sql(waiting, True, reason)}) x
        WHERE step_name = %(step)s AND reason = %(reason)s AND error_class IS NOT DISTINCT FROM %(error)s
        ORDER BY since NULLS LAST, id LIMIT %(limit)s
    """
    return [r[0] for r in _fetch_stuck(engine, query, params)]


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
        raise InvalidInput("bulk action", f"must be one of {', '.join(states.BULK_ACTIONS)}, got {action!r}")
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


# -- run ids by prefix ------------------------------------------------------


def run_id_range(text: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The lowest and highest run id starting with ``text`` (hex digits, in either case, with
    the dashes of the canonical form where it has them, or none), or None when no id can.

    A range rather than ``workflow_id::text LIKE 'prefix%'`` so that PostgreSQL answers from the
    unique index on ``workflow_id`` (uuids compare byte by byte, in the order of their hex text).
    """
    t = text.strip().lower()
    if not t or len(t) > len(_ID_TEMPLATE):
        return None
    if "-" in t:
        if any((c == "-") != (_ID_TEMPLATE[i] == "-") for i, c in enumerate(t)):
            return None
        t = t.replace("-", "")
    if len(t) > 32 or not set(t) <= _HEX:
        return None
    return uuid.UUID(t.ljust(32, "0")), uuid.UUID(t.ljust(32, "f"))


def _shown(text: str, limit: int = 40) -> str:
    """``text`` for an error message: printable, one line, not too long."""
    shown = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return shown if len(shown) <= limit else shown[:limit] + "..."


def resolve_run_id(engine: Engine, text: str) -> uuid.UUID:
    """The id of the one run whose id is ``text``, or starts with it (at least 4 hex digits, as
    ``5f0c1a2b`` or ``5f0c1a2b-3c``). :class:`WorkflowNotFound` when no run matches,
    :class:`InvalidInput` when ``text`` cannot begin a run id, is too short, or matches several
    runs (a few are named)."""
    if not isinstance(text, str):
        raise InvalidInput("run id", f"must be a string, got {type(text).__name__}")
    bounds = run_id_range(text)
    if bounds is None:
        with contextlib.suppress(ValueError):
            return uuid.UUID(text.strip())  # the {...} and urn:uuid: spellings of a whole id
        raise InvalidInput("run id", f"'{_shown(text)}' is not a run id or the start of one"
                                     " (hex digits such as 5f0c1a2b)")
    low, high = bounds
    if low == high:
        return low
    digits = text.strip().lower()
    if len(digits.replace("-", "")) < MIN_PREFIX:
        raise InvalidInput("run id", f"{digits!r} is too short: give at least {MIN_PREFIX} characters of the id")
    with engine.db.reading() as conn:
        rows = conn.execute(RUNS_BY_ID_RANGE, (low, high, PREFIX_CANDIDATES + 1)).fetchall()
    if not rows:
        raise WorkflowNotFound(f"{digits}...")
    if len(rows) > 1:
        many = f"more than {PREFIX_CANDIDATES}" if len(rows) > PREFIX_CANDIDATES else str(len(rows))
        listed = ", ".join(f"{r[0]} ({_shown(r[1])}, {r[2]})" for r in rows[:PREFIX_CANDIDATES])
        raise InvalidInput("run id", f"{digits} matches {many} runs: {listed}; give more of the id")
    return rows[0][0]  # type: ignore[no-any-return]


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


def like_escape(text: str) -> str:
    """``text`` with LIKE's wildcards (and its escape character) escaped, to match itself."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def list_runs(engine: Engine, f: RunFilter) -> tuple[list[Row], int | None]:
    """Runs newest first, each with its latest step; and the cursor of the next page (or None)."""
    if f.status and f.status not in states.RUN_STATUSES:
        raise InvalidInput("status", f"{f.status!r} is unknown (known: {', '.join(states.RUN_STATUSES)})")
    if f.reason and f.reason not in states.STUCK_REASONS:
        raise InvalidInput("stuck reason", f"{f.reason!r} is unknown (known: {', '.join(states.STUCK_REASONS)})")
    _checked(("class", f.workflow_class), ("step", f.step), ("error class", f.error_class),
             ("subject", f.subject), ("text", f.text))
    limit = max(1, min(int(f.limit), MAX_LIMIT))
    where: list[sql.Composable] = [sql.SQL("TRUE")]
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
    if f.text and f.text.strip():
        text = f.text.strip()
        matches: list[sql.Composable] = [sql.SQL("w.subject_id = %(text)s"),
                   sql.SQL("(w.subject_type || ' ' || w.subject_id) ILIKE %(text_like)s")]
        params.update(text=text, text_like="%" + like_escape(text) + "%")
        bounds = run_id_range(text)
        if bounds is not None:  # the run ids starting with the text, from the unique index
            matches.insert(0, sql.SQL("w.workflow_id BETWEEN %(id_low)s AND %(id_high)s"))
            params.update(id_low=bounds[0], id_high=bounds[1])
        where.append(sql.SQL("({})").format(sql.SQL(" OR ").join(matches)))
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
        stuck = _stuck_sql(waiting, f.workflow_class is not None, f.reason)
        where.append(sql.SQL("w.id IN (SELECT id FROM (" + stuck
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
    with engine.db.connection() as conn, conn.transaction() if f.reason else contextlib.nullcontext():
        if f.reason:
            conn.execute("SET LOCAL jit = off")  # as in _fetch_stuck
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
