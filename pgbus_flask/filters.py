"""The statements whose text depends on the arguments, composed with :mod:`psycopg.sql` from the
named fragments below: the runs list's filters, the stuck reads (which reasons count depends on
``PGBUS_WAITING_THRESHOLD``), the attention groups, and the pages that read large values bounded.

Every other statement is written out in ``pgbus_flask/sql/*.sql`` and run by name
(:func:`pgbus_flask.db.run`); this module is the one place Python writes SQL. The fragments take
their parameters by name (``%(cls)s``, ``%(now)s`` ...); the functions below say which.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from psycopg import sql

from . import states
from .sql import statement


def _values(values: Sequence[str]) -> sql.Composable:
    """``('a', 'b')``: a list of states.py's words as SQL literals (a partial index's predicate
    written the same way, so that PostgreSQL uses it)."""
    return sql.SQL("({})").format(sql.SQL(", ").join(sql.Literal(v) for v in values))


# -- fragments on ``pgbus_workflows w`` ---------------------------------------------------------

#: The runs with a paused stuck reason: the predicate of pgbus_workflows_attention_paused.
PAUSED = sql.SQL("w.attention_reason IN {}").format(_values(states.PAUSED_REASONS))
#: The cutoff of each due reason: attention_since before it is due (``%(now)s``: None for the
#: database's now(); ``%(stall)s`` and ``%(waiting)s`` are intervals).
CUTOFF = {"overdue": "COALESCE(%(now)s::timestamptz, now()) - %(stall)s::interval",
          "waiting_overdue": "COALESCE(%(now)s::timestamptz, now()) - %(waiting)s::interval"}
#: The runs overdue and waiting_overdue: a range of pgbus_workflows_attention_due_groups.
DUE = {reason: sql.SQL(f"w.attention_reason = '{reason}' AND w.attention_since < {cutoff}")
       for reason, cutoff in CUTOFF.items()}
#: A count row's class is ``%(cls)s``.
COUNTS_OF_CLASS = sql.SQL(" AND workflow_class = %(cls)s")
#: A run's class is ``%(cls)s``.
RUN_OF_CLASS = sql.SQL(" AND w.workflow_class = %(cls)s")
NOTHING = sql.SQL("")


def stuck_for(reason: str, due_reasons: Sequence[str]) -> sql.Composable:
    """The condition on ``pgbus_workflows w`` for the runs stuck for ``reason`` (``due_reasons``:
    the reasons that come with time and count here)."""
    if reason in states.PAUSED_REASONS:
        # the reason as a literal: the partial index applies
        return sql.SQL("{} AND w.attention_reason = {}").format(PAUSED, sql.Literal(reason))
    return DUE[reason] if reason in due_reasons else sql.SQL("FALSE")


# -- the stuck reads ----------------------------------------------------------------------------
#
# The due runs (overdue, waiting_overdue) are read through pgbus_workflows_attention_due_groups (migration
# 0013): (reason, class, step, error class, attention_since, id). A recursive CTE finds each reason's groups
# with one probe a group (a skip scan: the next group is the first entry above the last one), and in each
# group the runs due are one range: counted up to ``%(cap)s`` + 1 (LIMIT), the oldest and newest at its ends.
# What a read costs then grows with the groups and the cap, never with the runs overdue.

_ERROR = "COALESCE(w.attention_error_class, '')"


def _due(reason: str) -> str:
    if reason not in CUTOFF:
        raise ValueError(f"not a due reason: {reason!r}")
    return reason


def due_scan(reason: str, by_class: bool) -> str:
    """The CTE ``due_<reason>`` (workflow_class, step_name, error: "" for none): the groups that have runs
    with this reason (due or not yet), one index probe each; of class ``%(cls)s`` when ``by_class`` (the
    class is then fixed in the index's range, so that the last probe stops at the class's end)."""
    reason = _due(reason)
    if by_class:
        cls, key, prev = " AND w.workflow_class = %(cls)s", f"w.current_step, {_ERROR}", "g.step_name, g.error"
    else:
        cls, key, prev = "", f"w.workflow_class, w.current_step, {_ERROR}", "g.workflow_class, g.step_name, g.error"
    return f"""due_{reason}(workflow_class, step_name, error) AS (
            (SELECT w.workflow_class, w.current_step, {_ERROR} FROM pgbus_workflows w
             WHERE w.attention_reason = '{reason}'{cls}
             ORDER BY w.workflow_class, w.current_step, {_ERROR} LIMIT 1)
            UNION ALL
            SELECT n.* FROM due_{reason} g CROSS JOIN LATERAL (
                SELECT w.workflow_class, w.current_step, {_ERROR} FROM pgbus_workflows w
                WHERE w.attention_reason = '{reason}'{cls} AND ({key}) > ({prev})
                ORDER BY w.workflow_class, w.current_step, {_ERROR} LIMIT 1) n
        )"""


def _in_group(reason: str) -> str:
    """The runs of group ``g`` (a row of ``due_<reason>``) due now: one range of the index."""
    return (f"w.attention_reason = '{_due(reason)}' AND w.workflow_class = g.workflow_class"
            f" AND w.current_step = g.step_name AND {_ERROR} = g.error AND w.attention_since < {CUTOFF[reason]}")


def _counted(reason: str) -> str:
    """``c.runs``: how many runs of group ``g`` are due, counted up to ``%(cap)s`` + 1."""
    return (f"CROSS JOIN LATERAL (SELECT count(*) AS runs FROM (SELECT 1 FROM pgbus_workflows w"
            f" WHERE {_in_group(reason)} ORDER BY w.attention_since LIMIT %(cap)s + 1) x) c")


def _with(ctes: Sequence[str]) -> str:
    return "WITH RECURSIVE " + ",\n        ".join(ctes)


def stuck_counts(due_reasons: Sequence[str], by_class: bool) -> sql.Composable:
    """(workflow_class, reason, runs, capped) of ongoing runs that need a person: the paused ones from
    ``pgbus_run_counts``, the due ones counted up to ``%(cap)s`` a group (``capped``: some group had more,
    ``runs`` is then a lower bound); of class ``%(cls)s`` when ``by_class``."""
    cls = COUNTS_OF_CLASS if by_class else NOTHING
    parts: list[sql.Composable] = [sql.SQL("""
                 SELECT workflow_class, attention_reason AS reason, sum(runs) AS runs, FALSE AS capped
                 FROM pgbus_run_counts
                 WHERE status = 'paused' AND attention_reason <> ''{cls} GROUP BY 1, 2 HAVING sum(runs) <> 0"""
                     ).format(cls=cls)]
    parts += [sql.SQL(f"SELECT g.workflow_class, '{reason}', sum(LEAST(c.runs, %(cap)s)), bool_or(c.runs > %(cap)s)"
                      f" FROM due_{reason} g {_counted(reason)} GROUP BY 1 HAVING sum(c.runs) > 0")
              for reason in due_reasons]
    return sql.SQL(_with([due_scan(r, by_class) for r in due_reasons]) + "\n") + sql.SQL("\nUNION ALL\n").join(parts)


def stats(due_reasons: Sequence[str]) -> sql.Composable:
    """(ongoing, paused, attention, capped): the counts table, and the due runs counted up to ``%(cap)s`` a
    group (``capped``: some group had more, ``attention`` is then a lower bound)."""
    due = " UNION ALL ".join(f"SELECT LEAST(c.runs, %(cap)s) AS runs, c.runs > %(cap)s AS capped"
                             f" FROM due_{reason} g {_counted(reason)}" for reason in due_reasons)
    return sql.SQL(_with([due_scan(r, False) for r in due_reasons]) + """,
        due(runs, capped) AS (""" + due + """)
        SELECT COALESCE(sum(runs) FILTER (WHERE status IN {ongoing}), 0) AS ongoing,
               COALESCE(sum(runs) FILTER (WHERE status = 'paused'), 0) AS paused,
               COALESCE(sum(runs) FILTER (WHERE status = 'paused' AND attention_reason <> ''), 0)
               + (SELECT COALESCE(sum(runs), 0) FROM due) AS attention,
               COALESCE((SELECT bool_or(capped) FROM due), FALSE) AS capped
        FROM pgbus_run_counts""").format(ongoing=_values(states.ONGOING))


def oldest_overdue(by_class: bool = False) -> sql.Composable:
    """(workflow_class, seconds): how long ago the oldest overdue step of each class was due, from the
    first due run of each overdue group (one probe a group)."""
    return sql.SQL(_with([due_scan("overdue", by_class)]) + f"""
        SELECT g.workflow_class, extract(epoch FROM COALESCE(%(now)s::timestamptz, now()) - min(o.since)) AS seconds
        FROM due_overdue g CROSS JOIN LATERAL (
            SELECT w.attention_since AS since FROM pgbus_workflows w WHERE {_in_group("overdue")}
            ORDER BY w.attention_since, w.id LIMIT 1) o
        GROUP BY 1""")


def due_ids(reason: str, by_class: bool, by_step: bool, by_error: bool) -> sql.Composable:
    """Ids of the runs due for ``reason``, at most ``%(cap)s`` + 1 of them (the runs list reads a page
    from them when they are at most the cap); of class ``%(cls)s`` when ``by_class``, of step ``%(step)s``
    when ``by_step``, of error class ``%(error_class)s`` ("" for none) when ``by_error``."""
    conditions = (["g.step_name = %(step)s"] if by_step else []) + (["g.error = %(error_class)s"] if by_error else [])
    where = " WHERE " + " AND ".join(conditions) if conditions else ""
    return sql.SQL(_with([due_scan(reason, by_class)]) + f"""
        SELECT x.id FROM due_{_due(reason)} g CROSS JOIN LATERAL (
            SELECT w.id FROM pgbus_workflows w WHERE {_in_group(reason)}
            ORDER BY w.attention_since LIMIT %(cap)s + 1) x{where}
        LIMIT %(cap)s + 1""")


def due_walk(reason: str) -> sql.Composable:
    """The runs list's condition for ``reason`` when more than the cap are due: the runs of that reason
    newest first from pgbus_workflows_attention (reason, id), the ones not due yet skipped (the reason is
    fixed by a range so that it leads the order, :func:`same`)."""
    return sql.SQL(f"w.attention_reason BETWEEN '{_due(reason)}' AND '{reason}'"
                   f" AND w.attention_since < {CUTOFF[reason]}")


def due_window(reason: str, before: bool) -> sql.Composable:
    """The id of the run of ``reason`` (due or not) ``%(offset)s`` places below the newest one (under
    ``%(before)s`` when ``before``), or no row: an index-only range of pgbus_workflows_attention."""
    below = " AND w.id < %(before)s" if before else ""
    return sql.SQL(f"SELECT w.id FROM pgbus_workflows w WHERE w.attention_reason = '{_due(reason)}'{below}"
                   " ORDER BY w.id DESC OFFSET %(offset)s LIMIT 1")


def attention_groups(due_reasons: Sequence[str], by_class: bool) -> sql.Composable:
    """The attention groups, the biggest first, at most ``%(limit)s``; of class ``%(cls)s`` when
    ``by_class``. Paused groups are counted in ``pgbus_run_counts`` and their first and newest runs are
    two probes of ``pgbus_workflows_attention_paused``; the due ones are found by a skip scan of
    ``pgbus_workflows_attention_due_groups`` and counted up to ``%(cap)s`` (``capped``: more are due),
    their first and newest due runs the two ends of their range."""
    same_group = sql.SQL("{} AND w.workflow_class = p.workflow_class AND w.current_step = p.step_name"
                         " AND w.attention_reason = p.reason"
                         " AND COALESCE(w.attention_error_class, '') = COALESCE(p.error_class, '')").format(PAUSED)
    due = "".join(f"""
            UNION ALL
            SELECT g.workflow_class, g.step_name, '{reason}', NULLIF(g.error, ''), LEAST(c.runs, %(cap)s),
                   c.runs > %(cap)s, oldest.since, newest.since, newest.step_id
            FROM due_{reason} g {_counted(reason)}
            CROSS JOIN LATERAL (SELECT w.attention_since AS since FROM pgbus_workflows w WHERE {_in_group(reason)}
                                ORDER BY w.attention_since, w.id LIMIT 1) oldest
            CROSS JOIN LATERAL (SELECT w.attention_since AS since, w.attention_step_id AS step_id
                                FROM pgbus_workflows w WHERE {_in_group(reason)}
                                ORDER BY w.attention_since DESC, w.id DESC LIMIT 1) newest""" for reason in due_reasons)
    ctes = [due_scan(r, by_class) for r in due_reasons]
    head = _with(ctes) + "," if ctes else "WITH"
    return sql.SQL(head + """
        paused AS (
            SELECT workflow_class, step AS step_name, attention_reason AS reason,
                   NULLIF(error_class, '') AS error_class, sum(runs) AS runs
            FROM pgbus_run_counts WHERE status = 'paused' AND attention_reason <> ''{cls_counts}
            GROUP BY 1, 2, 3, 4 HAVING sum(runs) > 0
        ), groups AS (
            SELECT p.workflow_class, p.step_name, p.reason, p.error_class, p.runs, FALSE AS capped,
                   oldest.since AS first_seen_at, newest.since AS last_seen_at, newest.step_id
            FROM paused p
            LEFT JOIN LATERAL (SELECT w.attention_since AS since FROM pgbus_workflows w WHERE {same_group}
                               ORDER BY w.attention_since, w.id LIMIT 1) oldest ON TRUE
            LEFT JOIN LATERAL (SELECT w.attention_since AS since, w.attention_step_id AS step_id
                               FROM pgbus_workflows w WHERE {same_group}
                               ORDER BY w.attention_since DESC, w.id DESC LIMIT 1) newest ON TRUE""" + due + """
        )
        SELECT g.workflow_class, g.step_name, g.reason, g.error_class, g.runs, g.capped, g.first_seen_at,
               g.last_seen_at, s.error_message, s.error_code, s.error_params
        FROM groups g LEFT JOIN pgbus_workflow_steps s ON s.id = g.step_id
        ORDER BY g.runs DESC, g.last_seen_at DESC NULLS LAST, g.workflow_class, g.step_name
        LIMIT %(limit)s
    """).format(cls_counts=COUNTS_OF_CLASS if by_class else NOTHING, same_group=same_group)


def attention_ids(reason: str, due_reasons: Sequence[str]) -> sql.Composable:
    """The workflow ids of one attention group (``%(cls)s``, ``%(step)s``, ``%(error)s``: "" for none),
    oldest stuck first, at most ``%(limit)s``. A paused group's runs come in this order from
    pgbus_workflows_attention_paused, so the oldest are read and no more (the extended statistics of
    migration 0004 tell the planner how big a group is)."""
    return sql.SQL("""
        SELECT w.workflow_id FROM pgbus_workflows w
        WHERE {reason} AND w.workflow_class = %(cls)s AND w.current_step = %(step)s
          AND COALESCE(w.attention_error_class, '') = %(error)s
        ORDER BY w.attention_since, w.id LIMIT %(limit)s
    """).format(reason=stuck_for(reason, due_reasons))


# -- the runs list ------------------------------------------------------------------------------


def index_order(workflow_class: str | None, status: str | None, step: str | None, reason: str | None,
                error_class: str | None) -> list[str]:
    """The columns the filters fix, as a prefix of ``ORDER BY ... id DESC``: the same order (they are
    equal on every row), which only the index made for those filters gives without a sort. The planner
    would otherwise walk the primary key backwards whenever it guesses the matches are spread evenly,
    and at 1,000,000 runs it guesses wrong (the 500,000 newest are all finished runs of one class).
    :func:`same` fixes these columns with ranges, so that the planner keeps them in the order."""
    if reason in states.PAUSED_REASONS and workflow_class and step and error_class is not None:
        return ["w.workflow_class", "w.attention_reason", "w.current_step", "COALESCE(w.attention_error_class, '')"]
    if reason in states.PAUSED_REASONS:
        return ["w.attention_reason"]
    if reason:
        return []  # overdue, waiting_overdue: see queries.list_runs
    if workflow_class and status:
        return ["w.workflow_class", "w.status"]
    if workflow_class:
        return ["w.workflow_class"]
    if status:
        return ["w.status"]
    if step:
        return ["w.current_step"]
    return []


def same(column: str, param: str, fixed: Sequence[str]) -> sql.Composable:
    """``column`` equals the parameter ``param``. A column the ORDER BY leads with (``fixed``) is
    fixed by a range of one value, not "=": PostgreSQL drops a column it knows equal to a constant
    from the order, and could then walk the primary key again instead of this filter's index."""
    if column in fixed:
        return sql.SQL(f"{column} BETWEEN %({param})s AND %({param})s")
    return sql.SQL(f"{column} = %({param})s")


#: The fragments of the runs list's WHERE, each with the parameters it takes.
SUBJECT_TYPE = sql.SQL("w.subject_type = %(stype)s")
SUBJECT_ID = sql.SQL("w.subject_id = %(sid)s")
WHOLE_ID = sql.SQL("w.workflow_id = %(whole_id)s")
TEXT_IS_SUBJECT_ID = sql.SQL("w.subject_id = %(text)s")
TEXT_IN_SUBJECT = sql.SQL("(w.subject_type || ' ' || w.subject_id) ILIKE %(text_like)s")
TEXT_STARTS_ID = sql.SQL("w.workflow_id BETWEEN %(id_low)s AND %(id_high)s")
TEXT_WINDOW = sql.SQL("w.id >= %(text_window)s")
BEFORE = sql.SQL("w.id < %(before)s")
#: The runs list of a due reason when at most the cap are due: those runs (read by :func:`due_ids`).
DUE_IDS = sql.SQL("w.id = ANY(%(due_ids)s)")
#: ... and when more are due, the runs of the reason it walks: those at or above ``%(due_window)s``.
DUE_WINDOW = sql.SQL("w.id >= %(due_window)s")
ANY_OF = sql.SQL(" OR ")


def any_of(matches: Sequence[sql.Composable]) -> sql.Composable:
    """``(a OR b ...)``."""
    return sql.SQL("({})").format(ANY_OF.join(matches))


def runs_page(where: Sequence[sql.Composable], order: Sequence[str]) -> sql.Composable:
    """Runs newest first, each with its latest step (and its batch's progress), at most ``%(limit)s``:
    the runs where every one of ``where`` holds, ordered by ``order`` (:func:`index_order`) then id."""
    return sql.SQL("""
        SELECT w.*, s.id AS step_id, s.step_name AS step_step_name, s.attempt AS step_attempt,
               s.status AS step_status, s.scheduled_at AS step_scheduled_at, s.started_at AS step_started_at,
               s.stall_at AS step_stall_at, s.enqueued_at AS step_enqueued_at, s.error_class AS step_error_class,
               s.error_message AS step_error_message, s.waiting_since AS step_waiting_since,
               s.timeout_at AS step_timeout_at, s.batch_id AS step_batch_id, s.outcome AS step_outcome,
               s.finished_at AS step_finished_at, cardinality(s.child_ids) AS step_children,
               s.blocked_on AS step_blocked_on, s.blocked_key AS step_blocked_key,
               s.blocked_since AS step_blocked_since,
               b.done AS batch_done, b.failed AS batch_failed, b.total AS batch_total
        FROM pgbus_workflows w
        LEFT JOIN LATERAL (SELECT * FROM pgbus_workflow_steps WHERE workflow_id = w.workflow_id
                           ORDER BY id DESC LIMIT 1) s ON TRUE
        LEFT JOIN pgbus_batches b ON b.id = s.batch_id
        WHERE {where}
        ORDER BY {order} w.id DESC LIMIT %(limit)s
    """).format(where=sql.SQL(" AND ").join([sql.SQL("TRUE"), *where]),
                order=sql.SQL("".join(f"{c} DESC, " for c in order)))


# -- large values read bounded ------------------------------------------------------------------

#: A JSON value a page shows (a signal's payload, a fan-out child's arguments and result) is read
#: whole only when PostgreSQL stores it in at most this many bytes; of a larger one a page reads the
#: first :data:`HEAD_CHARS` characters of its JSON text (``<column>_head``), and the whole value is
#: read on its own (:meth:`pgbus_flask.handle.Run.signal_row`, :func:`pgbus_flask.queries.batch_child`).
WHOLE_BYTES = 16_384
HEAD_CHARS = 1_000
#: Of a value stored larger than this not even the start is read (it would be read whole to write it as
#: text: some 6 ms a MB): its head is empty.
HEAD_BYTES = 262_144


def bounded(column: str) -> str:
    """Select-list items for the jsonb ``column``: the value when it is stored in at most
    :data:`WHOLE_BYTES` (else NULL), and ``<column>_head``, the start of a larger one's JSON text
    (empty past :data:`HEAD_BYTES`; ``pg_column_size`` reads the stored size without reading the value)."""
    size = f"pg_column_size({column})"
    return (f"CASE WHEN {size} <= {WHOLE_BYTES} THEN {column} END AS {column},"
            f" CASE WHEN {size} <= {WHOLE_BYTES} THEN NULL WHEN {size} <= {HEAD_BYTES}"
            f" THEN left({column}::text, {HEAD_CHARS}) ELSE '' END AS {column}_head")


#: A fan-out child's columns but its arguments and result.
_BATCH_CHILD_COLUMNS = ("batch_id, position, status, job_id, enqueued_at, finished_at, error_class, error_message,"
                        " error_code, error_params")


def batch_children_page(bounded_values: bool) -> sql.Composable:
    """Children of batch ``%s`` after position ``%s`` in position order, at most ``%s`` (one range of the
    primary key); with ``bounded_values`` a large ``args`` or ``result`` is left out (:func:`bounded`)."""
    columns = f"{_BATCH_CHILD_COLUMNS}, {bounded('args')}, {bounded('result')}" if bounded_values else "*"
    return sql.SQL(f"SELECT {columns} FROM pgbus_batch_children WHERE batch_id = %s"
                   " AND position > %s ORDER BY position LIMIT %s")


# -- the runner's writes ------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def write_events(rows: int, one_run: bool) -> sql.Composable:
    """Insert ``rows`` audit events (8 values each: workflow_id, event, actor, reason, step_id,
    step_name, attempt, details) and refresh the attention columns of their runs, in one statement:
    the last parameter is the one run's id (``one_run``) or the list of their ids. The same text for
    the same shape, so that psycopg prepares the ones a process writes often."""
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s)"] * rows)
    refresh = statement("attention_refresh_one" if one_run else "attention_refresh")
    return sql.SQL("WITH events AS (INSERT INTO pgbus_workflow_events"
                   " (workflow_id, event, actor, reason, step_id, step_name, attempt, details)"
                   " VALUES " + values + ") " + refresh)


# -- databases, tables and savepoints by name ---------------------------------------------------


def create_database(name: str) -> sql.Composable:
    """Create database ``name`` (the test helpers' own databases)."""
    return sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))


def drop_database(name: str) -> sql.Composable:
    """Drop database ``name``, closing whatever is still connected to it."""
    return sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))


def truncate(tables: Sequence[str]) -> sql.Composable:
    """Empty ``tables`` and restart their ids."""
    return sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(sql.SQL(", ").join(map(sql.Identifier, tables)))


def delete_all(table: str) -> sql.Composable:
    """Delete every row of ``table``."""
    return sql.SQL("DELETE FROM {}").format(sql.Identifier(table))


def savepoint(name: str) -> sql.Composable:
    """Open savepoint ``name``."""
    return sql.SQL("SAVEPOINT {}").format(sql.Identifier(name))


def rollback_to(name: str) -> sql.Composable:
    """Roll back to savepoint ``name``."""
    return sql.SQL("ROLLBACK TO SAVEPOINT {}").format(sql.Identifier(name))


# -- the runner's row moves ---------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def move_run(columns: tuple[str, ...]) -> sql.Composable:
    """Single-winner run status change: the run ``%(wid)s`` moves to ``%(to)s`` if its status is in
    ``%(from)s`` (a list), with ``columns`` set to the parameters of their names; returns the new row.
    One text per set of columns, kept (the runner's few sets are prepared by psycopg)."""
    sets = sql.SQL("").join(sql.SQL(", {} = {}").format(sql.Identifier(name), sql.Placeholder(name))
                            for name in columns)
    return _rendered(sql.SQL("UPDATE pgbus_workflows SET status = %(to)s, updated_at = now(){sets}"
                             " WHERE workflow_id = %(wid)s AND status = ANY(%(from)s) RETURNING *").format(sets=sets))


@functools.lru_cache(maxsize=256)
def move_step(columns: tuple[str, ...]) -> sql.Composable:
    """Single-winner step status change: the attempt ``%(id)s`` moves to ``%(to)s`` if its status is in
    ``%(from)s``, with ``columns`` set to the parameters of their names; returns the new row."""
    sets = sql.SQL("").join(sql.SQL(", {} = {}").format(sql.Identifier(name), sql.Placeholder(name))
                            for name in columns)
    return _rendered(sql.SQL("UPDATE pgbus_workflow_steps SET status = %(to)s{sets}"
                             " WHERE id = %(id)s AND status = ANY(%(from)s) RETURNING *").format(sets=sets))


def _rendered(statement: sql.Composable) -> sql.Composable:
    """``statement`` rendered once (its identifiers quoted) and kept as plain text: what a hot path
    runs again and again costs no composing."""
    return sql.SQL(statement.as_string())


# -- a run's long lists, a page at a time -------------------------------------------------------


def run_page(table: str, columns: str, owner: str, before: bool) -> sql.Composable:
    """``columns`` of the newest rows of ``table`` whose ``owner`` column is ``%s``, with an id below
    ``%s`` when ``before``, at most ``%s``: one range of an ``(owner, id)`` index (``table``, ``columns``
    and ``owner`` are the run handle's literals, never input)."""
    return sql.SQL(f"SELECT {columns} FROM {table} WHERE {owner} = %s" + (" AND id < %s" if before else "")
                   + " ORDER BY id DESC LIMIT %s")


def run_page_count(table: str, owner: str) -> sql.Composable:
    """How many rows of ``table`` have ``%s`` in their ``owner`` column (``n``)."""
    return sql.SQL(f"SELECT count(*) AS n FROM {table} WHERE {owner} = %s")
