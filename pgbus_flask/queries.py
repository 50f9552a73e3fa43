"""Reads for the dashboard, the CLI and operators: counts, stuck reasons, the
attention groups, run lists with keyset pagination, batch progress, the
bulk verbs over an attention group, and run ids given by a prefix.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from . import attention, payload, runner, states, verbs
from .engine import Engine
from .errors import InvalidInput, PgbusError, StepNotDefined, WorkflowNotFound
from .handle import PAGE_SIZE, bounded

Row = dict[str, Any]

GROUP_LIMIT = 200
IDS_LIMIT = 500
PAUSED_REASONS = attention.PAUSED_REASONS
#: A run list's page size is 1 to this many runs.
MAX_LIMIT = 200
#: A text search (a piece of a subject) reads at most this many runs a page, newest first; the page's
#: cursor then continues below them (a runs list without an index for its filter stays fast).
TEXT_WINDOW = 100_000
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
    """``{(workflow_class, status): runs}`` over every run, from ``pgbus_run_counts`` (not the runs)."""
    with engine.db.connection() as conn:
        rows = conn.execute("SELECT workflow_class, status, sum(runs) FROM pgbus_run_counts GROUP BY 1, 2"
                            " HAVING sum(runs) <> 0").fetchall()
    return {(r[0], r[1]): int(r[2]) for r in rows}


# The stuck reads start from the attention columns the runner keeps on each run (pgbus_flask/attention.py):
# paused runs from pgbus_workflows_attention_paused (their counts from pgbus_run_counts), overdue and
# waiting_overdue ones from a range of pgbus_workflows_attention_due. Parameters: %(now)s (None: the
# database's now()), %(stall)s and %(waiting)s (intervals).
_PAUSED = "w.attention_reason IN ('stalled', 'paused_error', 'paused_manual')"
_DUE = {
    "overdue": "w.attention_reason = 'overdue'"
               " AND w.attention_since < COALESCE(%(now)s::timestamptz, now()) - %(stall)s::interval",
    "waiting_overdue": "w.attention_reason = 'waiting_overdue'"
                       " AND w.attention_since < COALESCE(%(now)s::timestamptz, now()) - %(waiting)s::interval",
}


def _due_reasons(engine: Engine) -> tuple[str, ...]:
    """The reasons that come with time: waiting_overdue only when PGBUS_WAITING_THRESHOLD is set."""
    return ("overdue", "waiting_overdue") if engine.settings.waiting_threshold is not None else ("overdue",)


def _reason_sql(engine: Engine, reason: str) -> str:
    """The condition on ``pgbus_workflows w`` for the runs stuck for ``reason``."""
    if reason in attention.PAUSED_REASONS:
        return f"{_PAUSED} AND w.attention_reason = '{reason}'"  # a literal: the partial index applies
    return _DUE[reason] if reason in _due_reasons(engine) else "FALSE"


def _params(engine: Engine, now: datetime | None, workflow_class: str | None) -> tuple[Row, bool]:
    """The cutoffs of overdue and waiting_overdue as times on the database's clock (``overdue``,
    ``waiting_cutoff``), and whether waiting_overdue counts (a waiting threshold is set): for
    bench.sweep_cost's reference query, which checks the reads here against a plain computation."""
    settings = engine.settings
    waiting = settings.waiting_threshold is not None
    params: Row = {"cls": workflow_class}
    with engine.db.connection() as conn:
        db_now = now or conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
    params["overdue"] = db_now - settings.stall_threshold
    params["waiting_cutoff"] = db_now - (settings.waiting_threshold or timedelta(0))
    return params, waiting


def _read(engine: Engine, query: str, params: Row) -> list[tuple[Any, ...]]:
    """Rows of a stuck read, with JIT off for its transaction: on a big stuck set the planner's estimate
    crosses ``jit_above_cost``, and compiling costs more than the index-driven plan itself."""
    with engine.db.connection() as conn, conn.transaction():
        conn.execute("SET LOCAL jit = off")
        return list(conn.execute(query.encode(), params).fetchall())


def _base(engine: Engine, now: datetime | None, workflow_class: str | None) -> Row:
    _checked(("class", workflow_class))
    settings = engine.settings
    return {"cls": workflow_class, "now": now, "stall": settings.stall_threshold,
            "waiting": settings.waiting_threshold or timedelta(0)}


def stuck_reason_counts(engine: Engine, workflow_class: str | None = None,
                        now: datetime | None = None) -> dict[tuple[str, str], int]:
    """``{(workflow_class, reason): runs}`` of ongoing runs that need a person: the paused ones from
    ``pgbus_run_counts``, the overdue and waiting_overdue ones from their index range."""
    params = _base(engine, now, workflow_class)
    cls = " AND workflow_class = %(cls)s" if workflow_class is not None else ""
    parts = [f"""SELECT workflow_class, attention_reason, sum(runs) FROM pgbus_run_counts
                 WHERE status = 'paused' AND attention_reason <> ''{cls} GROUP BY 1, 2 HAVING sum(runs) <> 0"""]
    parts += [f"SELECT w.workflow_class, '{reason}', count(*) FROM pgbus_workflows w WHERE {_DUE[reason]}{cls}"
              " GROUP BY 1" for reason in _due_reasons(engine)]
    return {(r[0], r[1]): int(r[2]) for r in _read(engine, "\nUNION ALL\n".join(parts), params)}


#: Per class, the seconds since the oldest overdue step was due: a range of pgbus_workflows_attention_due
#: (an overdue run's attention_since is its scheduled step's scheduled_at), on the database's clock.
OLDEST_OVERDUE = (f"SELECT w.workflow_class, extract(epoch FROM COALESCE(%(now)s::timestamptz, now())"
                  f" - min(w.attention_since)) FROM pgbus_workflows w WHERE {_DUE['overdue']} GROUP BY 1")


def oldest_overdue(engine: Engine, now: datetime | None = None) -> dict[str, float]:
    """``{workflow_class: seconds}``: how long ago the oldest overdue step of each class was due (classes
    with no overdue step are left out). It costs what the overdue runs cost, like their count."""
    params = _base(engine, now, None)
    return {r[0]: float(r[1]) for r in _read(engine, OLDEST_OVERDUE, params)}


@dataclass(frozen=True)
class Stats:
    """What a host app's layout shows of pgbus: ongoing runs, paused ones, and those needing a person."""

    ongoing: int
    paused: int
    attention: int


def stats(engine: Engine) -> Stats:
    """:class:`Stats` in one statement: the counts table, and the index ranges of the due reasons."""
    params = _base(engine, None, None)
    due = "".join(f" + (SELECT count(*) FROM pgbus_workflows w WHERE {_DUE[reason]})"
                  for reason in _due_reasons(engine))
    row = _read(engine, f"""
        SELECT COALESCE(sum(runs) FILTER (WHERE status IN ('ready', 'running', 'waiting', 'paused')), 0),
               COALESCE(sum(runs) FILTER (WHERE status = 'paused'), 0),
               COALESCE(sum(runs) FILTER (WHERE status = 'paused' AND attention_reason <> ''), 0){due}
        FROM pgbus_run_counts""", params)[0]
    return Stats(int(row[0]), int(row[1]), int(row[2]))


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
    error_code: str | None = None  # an engine message's code and parameters (pgbus_flask.messages)
    error_params: dict[str, Any] | None = None

    def key(self) -> dict[str, Any]:
        return {"workflow_class": self.workflow_class, "step_name": self.step_name, "reason": self.reason,
                "error_class": self.error_class}


def attention_groups(engine: Engine, workflow_class: str | None = None, *, limit: int = GROUP_LIMIT,
                     now: datetime | None = None) -> list[AttentionGroup]:
    """Stuck runs grouped by (class, step, reason, error class), the biggest group first; each with its
    first and last seen (the oldest and newest ``attention_since``) and its newest run's error message.

    Paused groups are counted in ``pgbus_run_counts`` and their first and newest runs are two probes
    of ``pgbus_workflows_attention_paused``; the overdue ones are read from their index range.
    """
    params = _base(engine, now, workflow_class)
    params["limit"] = min(int(limit), GROUP_LIMIT)
    cls_counts = " AND workflow_class = %(cls)s" if workflow_class is not None else ""
    cls = " AND w.workflow_class = %(cls)s" if workflow_class is not None else ""
    same_group = (f"{_PAUSED} AND w.workflow_class = p.workflow_class AND w.current_step = p.step_name"
                  " AND w.attention_reason = p.reason"
                  " AND COALESCE(w.attention_error_class, '') = COALESCE(p.error_class, '')")
    due = " OR ".join(f"({_DUE[reason]})" for reason in _due_reasons(engine))
    query = f"""
        WITH paused AS (
            SELECT workflow_class, step AS step_name, attention_reason AS reason,
                   NULLIF(error_class, '') AS error_class, sum(runs) AS runs
            FROM pgbus_run_counts WHERE status = 'paused' AND attention_reason <> ''{cls_counts}
            GROUP BY 1, 2, 3, 4 HAVING sum(runs) > 0
        ), groups AS (
            SELECT p.workflow_class, p.step_name, p.reason, p.error_class, p.runs,
                   oldest.since AS first_seen_at, newest.since AS last_seen_at, newest.step_id
            FROM paused p
            LEFT JOIN LATERAL (SELECT w.attention_since AS since FROM pgbus_workflows w WHERE {same_group}
                               ORDER BY w.attention_since, w.id LIMIT 1) oldest ON TRUE
            LEFT JOIN LATERAL (SELECT w.attention_since AS since, w.attention_step_id AS step_id
                               FROM pgbus_workflows w WHERE {same_group}
                               ORDER BY w.attention_since DESC, w.id DESC LIMIT 1) newest ON TRUE
            UNION ALL
            SELECT d.*, newest.step_id FROM (
                SELECT w.workflow_class, w.current_step, w.attention_reason, w.attention_error_class, count(*),
                       min(w.attention_since), max(w.attention_since) AS last_seen
                FROM pgbus_workflows w WHERE ({due}){cls}
                GROUP BY 1, 2, 3, 4
            ) d
            LEFT JOIN LATERAL (SELECT w.attention_step_id AS step_id FROM pgbus_workflows w
                               WHERE w.attention_reason = d.attention_reason AND w.attention_since = d.last_seen
                                 AND w.workflow_class = d.workflow_class AND w.current_step = d.current_step
                                 AND w.attention_error_class IS NOT DISTINCT FROM d.attention_error_class
                               ORDER BY w.id DESC LIMIT 1) newest ON TRUE
        )
        SELECT g.workflow_class, g.step_name, g.reason, g.error_class, g.runs, g.first_seen_at, g.last_seen_at,
               s.error_message, s.error_code, s.error_params
        FROM groups g LEFT JOIN pgbus_workflow_steps s ON s.id = g.step_id
        ORDER BY g.runs DESC, g.last_seen_at DESC NULLS LAST, g.workflow_class, g.step_name
        LIMIT %(limit)s
    """
    return [AttentionGroup(r[0], r[1], r[2], r[3], int(r[4]), *r[5:]) for r in _read(engine, query, params)]


def attention_ids(engine: Engine, workflow_class: str, step_name: str, reason: str, error_class: str | None, *,
                  limit: int = IDS_LIMIT, now: datetime | None = None) -> list[Any]:
    """The workflow ids of one attention group, oldest stuck first, at most ``limit`` (500)."""
    if reason not in states.STUCK_REASONS:
        raise InvalidInput("stuck reason", f"{reason!r} is unknown (known: {', '.join(states.STUCK_REASONS)})")
    _checked(("step", step_name), ("error class", error_class))
    params = _base(engine, now, workflow_class)
    params.update(step=step_name, error=error_class or "", limit=min(int(limit), IDS_LIMIT))
    # A paused group's runs come in this order from pgbus_workflows_attention_paused, so the oldest 500
    # are read and no more (the extended statistics of migration 0004 tell the planner how big a group is).
    query = f"""
        SELECT w.workflow_id FROM pgbus_workflows w
        WHERE {_reason_sql(engine, reason)} AND w.workflow_class = %(cls)s AND w.current_step = %(step)s
          AND COALESCE(w.attention_error_class, '') = %(error)s
        ORDER BY w.attention_since, w.id LIMIT %(limit)s
    """
    return [r[0] for r in _read(engine, query, params)]


@dataclass
class BulkResult:
    """What a bulk verb did: how many runs moved, and which were refused and why."""

    action: str
    moved: int = 0
    refused: int = 0
    errors: dict[str, str] = field(default_factory=dict)


def bulk_act(engine: Engine, action: str, group: dict[str, Any], *, actor: str, reason: str | None = None,
             limit: int = IDS_LIMIT) -> BulkResult:
    """Apply a bulk verb (``resume``, ``skip`` or ``cancel``) to the runs of one attention group (at most 500)."""
    _check_bulk(action)
    ids = attention_ids(engine, group["workflow_class"], group["step_name"], group["reason"],
                        group.get("error_class"), limit=limit)
    return act_on_each(engine, action, ids, actor=actor, reason=reason)


def _check_bulk(action: str) -> None:
    if action not in verbs.BULK_ACTIONS:
        raise InvalidInput("bulk action", f"must be one of {', '.join(verbs.BULK_ACTIONS)}, got {action!r}")


def act_on_each(engine: Engine, action: str, ids: Iterable[Any], *, actor: str, reason: str | None = None,
                stop_on_bad_input: bool = False) -> BulkResult:
    """The bulk loop: the bulk verb ``action`` on each run of ``ids`` in turn (an iterable: the CLI passes
    its progress bar), each in its own transaction. A run the verb is refused for is counted with why, and
    the others go on; with ``stop_on_bad_input``, input refused as bad (the same for every run) stops the
    loop at the first run instead, having changed nothing."""
    _check_bulk(action)
    result = BulkResult(action)
    verb = getattr(runner.verbs, action)
    for workflow_id in ids:
        try:
            verb(engine, workflow_id, actor=actor, reason=reason)
            result.moved += 1
        except PgbusError as exc:
            if stop_on_bad_input and isinstance(exc, (InvalidInput, StepNotDefined)):
                raise
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


def _whole_run_id(text: str) -> uuid.UUID | None:
    """``text`` as a whole run id (32 hex digits, with or without the dashes), else None."""
    bounds = run_id_range(text)
    return bounds[0] if bounds is not None and bounds[0] == bounds[1] else None


def like_escape(text: str) -> str:
    """``text`` with LIKE's wildcards (and its escape character) escaped, to match itself."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _index_order(f: RunFilter) -> list[str]:
    """The columns the filters fix, as a prefix of ``ORDER BY ... id DESC``: the same order (they are
    equal on every row), which only the index made for those filters gives without a sort. The planner
    would otherwise walk the primary key backwards whenever it guesses the matches are spread evenly,
    and at 1,000,000 runs it guesses wrong (the 500,000 newest are all finished runs of one class).
    :func:`list_runs` fixes these columns with ranges, so that the planner keeps them in the order."""
    if f.reason in PAUSED_REASONS and f.workflow_class and f.step and f.error_class is not None:
        return ["w.workflow_class", "w.attention_reason", "w.current_step", "COALESCE(w.attention_error_class, '')"]
    if f.reason in PAUSED_REASONS:
        return ["w.attention_reason"]
    if f.reason:
        return []  # overdue, waiting_overdue: a range of pgbus_workflows_attention_due, then sorted
    if f.workflow_class and f.status:
        return ["w.workflow_class", "w.status"]
    if f.workflow_class:
        return ["w.workflow_class"]
    if f.status:
        return ["w.status"]
    if f.step:
        return ["w.current_step"]
    return []


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
    fixed = _index_order(f)

    def same(column: str, param: str) -> sql.Composable:
        # A column the ORDER BY leads with is fixed by a range of one value, not "=": PostgreSQL
        # drops a column it knows equal to a constant from the order, and could then walk the
        # primary key again instead of this filter's index.
        if column in fixed:
            return sql.SQL(f"{column} BETWEEN %({param})s AND %({param})s")
        return sql.SQL(f"{column} = %({param})s")

    if f.workflow_class:
        where.append(same("w.workflow_class", "cls"))
        params["cls"] = f.workflow_class
    if f.status:
        where.append(same("w.status", "status"))
        params["status"] = f.status
    if f.step:
        where.append(same("w.current_step", "step"))
        params["step"] = f.step
    if f.subject:
        kind, _, ident = f.subject.partition(" ")
        where.append(sql.SQL("w.subject_type = %(stype)s"))
        params["stype"] = kind
        if ident:
            where.append(sql.SQL("w.subject_id = %(sid)s"))
            params["sid"] = ident
    older_than_window: int | None = None  # a text search's lowest run id read, when older runs are left
    text = f.text.strip() if f.text else ""
    whole_id = _whole_run_id(text)
    if whole_id is not None:  # one run, from the unique index, however old
        where.append(sql.SQL("w.workflow_id = %(whole_id)s"))
        params["whole_id"] = whole_id
    elif text:
        matches: list[sql.Composable] = [sql.SQL("w.subject_id = %(text)s"),
                   sql.SQL("(w.subject_type || ' ' || w.subject_id) ILIKE %(text_like)s")]
        params.update(text=text, text_like="%" + like_escape(text) + "%")
        bounds = run_id_range(text)
        if bounds is not None:  # the run ids starting with the text
            matches.insert(0, sql.SQL("w.workflow_id BETWEEN %(id_low)s AND %(id_high)s"))
            params.update(id_low=bounds[0], id_high=bounds[1])
        where.append(sql.SQL("({})").format(sql.SQL(" OR ").join(matches)))
        # A piece of a subject can only be found by reading runs: a page reads at most TEXT_WINDOW of
        # them (by id, below the cursor), and when older runs are left its cursor continues below them.
        with engine.db.connection() as conn:
            newest, oldest = conn.execute("SELECT max(id), min(id) FROM pgbus_workflows").fetchone()  # type: ignore[misc]
        low = (f.before or (newest or 0) + 1) - TEXT_WINDOW
        where.append(sql.SQL("w.id >= %(text_window)s"))
        params["text_window"] = low
        if oldest is not None and oldest < low:
            older_than_window = low
    if f.before:
        where.append(sql.SQL("w.id < %(before)s"))
        params["before"] = f.before
    if f.reason in attention.PAUSED_REASONS:
        where += [sql.SQL(_PAUSED), same("w.attention_reason", "reason")]
        params["reason"] = f.reason
    elif f.reason:
        params.update(now=None, stall=engine.settings.stall_threshold,
                      waiting=engine.settings.waiting_threshold or timedelta(0))
        where.append(sql.SQL(_reason_sql(engine, f.reason)))
    if f.reason and f.error_class is not None:
        where.append(same("COALESCE(w.attention_error_class, '')", "error_class"))
        params["error_class"] = f.error_class
    query = sql.SQL("""
        SELECT w.*, s.id AS step_id, s.step_name AS step_step_name, s.attempt AS step_attempt,
               s.status AS step_status, s.scheduled_at AS step_scheduled_at, s.started_at AS step_started_at,
               s.stall_at AS step_stall_at, s.enqueued_at AS step_enqueued_at, s.error_class AS step_error_class,
               s.error_message AS step_error_message, s.waiting_since AS step_waiting_since,
               s.timeout_at AS step_timeout_at, s.batch_id AS step_batch_id, s.outcome AS step_outcome,
               s.finished_at AS step_finished_at, cardinality(s.child_ids) AS step_children,
               b.done AS batch_done, b.failed AS batch_failed, b.total AS batch_total
        FROM pgbus_workflows w
        LEFT JOIN LATERAL (SELECT * FROM pgbus_workflow_steps WHERE workflow_id = w.workflow_id
                           ORDER BY id DESC LIMIT 1) s ON TRUE
        LEFT JOIN pgbus_batches b ON b.id = s.batch_id
        WHERE {where}
        ORDER BY {order} w.id DESC LIMIT %(limit)s
    """).format(where=sql.SQL(" AND ").join(where), order=sql.SQL("".join(f"{c} DESC, " for c in _index_order(f))))
    with engine.db.connection() as conn, conn.transaction() if f.reason else contextlib.nullcontext():
        if f.reason:
            conn.execute("SET LOCAL jit = off")  # as in _read
        rows = list(runner.query(conn, query, params).fetchall())  # type: ignore[arg-type]
    cursor = rows[limit - 1]["id"] if len(rows) > limit else older_than_window
    return rows[:limit], cursor


_BATCH = ("SELECT b.*, w.workflow_class, w.subject_type, w.subject_id FROM pgbus_batches b"
          " JOIN pgbus_workflows w ON w.workflow_id = b.workflow_id WHERE b.id = %s")
# A child's columns but its arguments and result (read bounded on a page, see handle.WHOLE_BYTES).
_BATCH_CHILD_COLUMNS = ("batch_id, position, status, job_id, enqueued_at, finished_at, error_class, error_message,"
                        " error_code, error_params")


def batch_progress(engine: Engine, batch_id: int) -> tuple[Row, list[Row]] | None:
    """A batch (done, failed, total, status ...) with its run's ``workflow_class``, ``subject_type`` and
    ``subject_id``, and all its children (``position`` from 0), or None. A page of them: :func:`batch_page`."""
    with engine.db.connection() as conn:
        batch = runner.query(conn, _BATCH, (batch_id,)).fetchone()
        if batch is None:
            return None
        children = list(runner.query(conn, "SELECT * FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position",
                                     (batch_id,)).fetchall())
    return batch, children


@dataclass(frozen=True)
class ChildrenPage:
    """Some children of a batch in position order: those after a cursor, and the cursor of the next page
    (the ``after=`` value that shows it, None after the last child)."""

    rows: list[Row]
    after: int | None
    next_after: int | None


def batch_page(engine: Engine, batch_id: int, after: int | None = None, limit: int = PAGE_SIZE, *,
               bounded_values: bool = False) -> tuple[Row, ChildrenPage] | None:
    """A batch as :func:`batch_progress` reads it, with ``limit`` of its children from the position after
    ``after`` on (one range of its primary key; the batch's ``total`` says how many there are), or None.
    With ``bounded_values`` a large ``args`` or ``result`` is left out (:func:`pgbus_flask.handle.bounded`)."""
    columns = (f"{_BATCH_CHILD_COLUMNS}, {bounded('args')}, {bounded('result')}" if bounded_values else "*")
    with engine.db.connection() as conn:
        batch = runner.query(conn, _BATCH, (batch_id,)).fetchone()
        if batch is None:
            return None
        rows = list(runner.query(conn, f"SELECT {columns} FROM pgbus_batch_children WHERE batch_id = %s"
                                    " AND position > %s ORDER BY position LIMIT %s",
                              (batch_id, -1 if after is None else after, limit + 1)).fetchall())
    next_after = rows[limit - 1]["position"] if len(rows) > limit else None
    return batch, ChildrenPage(rows[:limit], after, next_after)


def batch_child(engine: Engine, batch_id: int, position: int) -> Row | None:
    """One child of a batch, whole (None when the batch has no child at ``position``, counted from 0)."""
    with engine.db.connection() as conn:
        return runner.query(conn, "SELECT * FROM pgbus_batch_children WHERE batch_id = %s AND position = %s",
                            (batch_id, position)).fetchone()
