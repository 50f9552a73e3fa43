"""Reads for the dashboard, the CLI and operators: counts, stuck reasons, the
attention groups, run lists with keyset pagination, batch progress, the
bulk verbs over an attention group, and run ids given by a prefix.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from psycopg import sql

from . import attention, db, filters, payload, runner, states, verbs
from .engine import Engine
from .errors import InvalidInput, PgbusError, StepNotDefined, WorkflowNotFound
from .handle import PAGE_SIZE
from .sql import statement

Row = dict[str, Any]

GROUP_LIMIT = 200
IDS_LIMIT = 500
#: The most overdue or waiting_overdue runs a read counts in one attention group: past it the count says
#: "at least" (``capped``), so that a read costs the same with a thousand or ten million runs overdue: it
#: reads at most this many index entries a group (about 10 ms a read at 1,000 with three groups, 35 ms at
#: 10,000, bench.pages).
COUNT_CAP = 1_000
#: A runs list of a due reason with more than COUNT_CAP runs due reads at most this many runs of the reason
#: a page (newest first, below the cursor); when the page has not filled its cursor continues below them.
DUE_WINDOW = 10_000
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
#: The runs whose ids lie in [low, high]: a range scan of the unique index on workflow_id.
RUNS_BY_ID_RANGE = statement("runs_by_id_range")


def _checked(*filters: tuple[str, str | None]) -> None:
    """Refuse a filter value PostgreSQL cannot compare (a NUL or a lone surrogate) with
    :class:`InvalidInput` naming the filter, instead of a driver error."""
    for name, value in filters:
        if value:
            payload.check_text(value, name, required=False)


def status_counts(engine: Engine) -> dict[tuple[str, str], int]:
    """``{(workflow_class, status): runs}`` over every run, from ``pgbus_run_counts`` (not the runs)."""
    with engine.db.connection() as conn:
        rows = db.fetch_all(conn, "status_counts")
    return {(r["workflow_class"], r["status"]): int(r["runs"]) for r in rows}


# The stuck reads start from the attention columns the runner keeps on each run (pgbus_flask/attention.py):
# paused runs from pgbus_workflows_attention_paused (their counts from pgbus_run_counts), overdue and
# waiting_overdue ones from pgbus_workflows_attention_due_groups, a group at a time, each counted up to
# COUNT_CAP (pgbus_flask/filters.py composes them). Parameters: %(now)s (None: the database's now()),
# %(stall)s and %(waiting)s (intervals), %(cap)s.


def _due_reasons(engine: Engine) -> tuple[str, ...]:
    """The reasons that come with time: waiting_overdue only when PGBUS_WAITING_THRESHOLD is set."""
    return ("overdue", "waiting_overdue") if engine.settings.waiting_threshold is not None else ("overdue",)


def db_now(engine: Engine) -> datetime:
    """PostgreSQL's clock (the one every stored time comes from): "overdue" never depends on a host's clock."""
    with engine.db.connection() as conn:
        return db.fetch_one(conn, "now")["now"]  # type: ignore[index,no-any-return]


def _params(engine: Engine, now: datetime | None, workflow_class: str | None) -> tuple[Row, bool]:
    """The cutoffs of overdue and waiting_overdue as times on the database's clock (``overdue``,
    ``waiting_cutoff``), and whether waiting_overdue counts (a waiting threshold is set): for
    bench.sweep_cost's reference query, which checks the reads here against a plain computation."""
    settings = engine.settings
    waiting = settings.waiting_threshold is not None
    params: Row = {"cls": workflow_class}
    moment = now or db_now(engine)
    params["overdue"] = moment - settings.stall_threshold
    params["waiting_cutoff"] = moment - (settings.waiting_threshold or timedelta(0))
    return params, waiting


def _read(engine: Engine, query: str | sql.Composable, params: Row) -> list[Row]:
    """Rows of a stuck read, with JIT off for its transaction: on a big stuck set the planner's estimate
    crosses ``jit_above_cost``, and compiling costs more than the index-driven plan itself."""
    with engine.db.connection() as conn, conn.transaction():
        db.run(conn, "jit_off")
        return db.fetch_all(conn, query, params)


def _base(engine: Engine, now: datetime | None, workflow_class: str | None, cap: int | None = None) -> Row:
    _checked(("class", workflow_class))
    settings = engine.settings
    return {"cls": workflow_class, "now": now, "stall": settings.stall_threshold,
            "waiting": settings.waiting_threshold or timedelta(0), "cap": _cap(cap)}


def _cap(cap: int | None) -> int:
    """``cap``, or :data:`COUNT_CAP` (read at each call: a test may lower it); at least 1."""
    value = COUNT_CAP if cap is None else int(cap)
    if value < 1:
        raise InvalidInput("count cap", f"must be at least 1, got {value}")
    return value


class StuckCounts(dict[tuple[str, str], int]):
    """``{(workflow_class, reason): runs}``, and ``capped``: the keys whose count is a lower bound (some
    attention group of theirs had more than the cap of runs due, and the rest were not counted)."""

    def __init__(self, counts: Iterable[tuple[tuple[str, str], int]] = (),
                 capped: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(counts)
        self.capped: frozenset[tuple[str, str]] = frozenset(capped)

    @property
    def any_capped(self) -> bool:
        """Whether some count is a lower bound (so is their sum)."""
        return bool(self.capped)


def stuck_reason_counts(engine: Engine, workflow_class: str | None = None,
                        now: datetime | None = None, *, cap: int | None = None) -> StuckCounts:
    """``{(workflow_class, reason): runs}`` of ongoing runs that need a person: the paused ones from
    ``pgbus_run_counts`` (exact), the overdue and waiting_overdue ones counted up to ``cap``
    (:data:`COUNT_CAP`) runs an attention group: a count that reached it is in ``.capped`` and means
    "at least"."""
    params = _base(engine, now, workflow_class, cap)
    query = filters.stuck_counts(_due_reasons(engine), by_class=workflow_class is not None)
    rows = _read(engine, query, params)
    return StuckCounts((((r["workflow_class"], r["reason"]), int(r["runs"])) for r in rows),
                       ((r["workflow_class"], r["reason"]) for r in rows if r["capped"]))


def oldest_overdue(engine: Engine, now: datetime | None = None) -> dict[str, float]:
    """``{workflow_class: seconds}``: how long ago the oldest overdue step of each class was due (classes
    with no overdue step are left out): the first due run of each overdue attention group, one probe each."""
    params = _base(engine, now, None)
    return {r["workflow_class"]: float(r["seconds"]) for r in _read(engine, filters.oldest_overdue(), params)}


@dataclass(frozen=True)
class Stats:
    """What a host app's layout shows of pgbus: ongoing runs, paused ones, and those needing a person
    (``attention_capped``: ``attention`` is a lower bound, see :func:`stuck_reason_counts`)."""

    ongoing: int
    paused: int
    attention: int
    attention_capped: bool = False


def stats(engine: Engine, *, cap: int | None = None) -> Stats:
    """:class:`Stats` in one statement: the counts table, and the due runs counted up to ``cap`` a group."""
    params = _base(engine, None, None, cap)
    row = _read(engine, filters.stats(_due_reasons(engine)), params)[0]
    return Stats(int(row["ongoing"]), int(row["paused"]), int(row["attention"]), bool(row["capped"]))


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
    #: ``count`` is a lower bound: more runs of this overdue group are due than the cap counts.
    capped: bool = False

    def key(self) -> dict[str, Any]:
        return {"workflow_class": self.workflow_class, "step_name": self.step_name, "reason": self.reason,
                "error_class": self.error_class}


def attention_groups(engine: Engine, workflow_class: str | None = None, *, limit: int = GROUP_LIMIT,
                     now: datetime | None = None, cap: int | None = None) -> list[AttentionGroup]:
    """Stuck runs grouped by (class, step, reason, error class), the biggest group first; each with its
    first and last seen (the oldest and newest ``attention_since``) and its newest run's error message.

    Paused groups are counted in ``pgbus_run_counts`` and their first and newest runs are two probes
    of ``pgbus_workflows_attention_paused``; the overdue ones are found by a skip scan of
    ``pgbus_workflows_attention_due_groups`` and counted up to ``cap`` (:data:`COUNT_CAP`) runs a group
    (``capped`` when more are due), their first and last seen the two ends of their range.
    """
    params = _base(engine, now, workflow_class, cap)
    params["limit"] = min(int(limit), GROUP_LIMIT)
    query = filters.attention_groups(_due_reasons(engine), by_class=workflow_class is not None)
    return [AttentionGroup(r["workflow_class"], r["step_name"], r["reason"], r["error_class"], int(r["runs"]),
                           r["first_seen_at"], r["last_seen_at"], r["error_message"], r["error_code"],
                           r["error_params"], bool(r["capped"])) for r in _read(engine, query, params)]


def attention_ids(engine: Engine, workflow_class: str, step_name: str, reason: str, error_class: str | None, *,
                  limit: int = IDS_LIMIT, now: datetime | None = None) -> list[Any]:
    """The workflow ids of one attention group, oldest stuck first, at most ``limit`` (500)."""
    if reason not in states.STUCK_REASONS:
        raise InvalidInput("stuck reason", f"{reason!r} is unknown (known: {', '.join(states.STUCK_REASONS)})")
    _checked(("step", step_name), ("error class", error_class))
    params = _base(engine, now, workflow_class)
    params.update(step=step_name, error=error_class or "", limit=min(int(limit), IDS_LIMIT))
    query = filters.attention_ids(reason, _due_reasons(engine))
    return [r["workflow_id"] for r in _read(engine, query, params)]


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
        rows = db.fetch_all(conn, "runs_by_id_range", (low, high, PREFIX_CANDIDATES + 1))
    if not rows:
        raise WorkflowNotFound(f"{digits}...")
    if len(rows) > 1:
        many = f"more than {PREFIX_CANDIDATES}" if len(rows) > PREFIX_CANDIDATES else str(len(rows))
        listed = ", ".join(f"{r['workflow_id']} ({_shown(r['workflow_class'])}, {r['status']})"
                           for r in rows[:PREFIX_CANDIDATES])
        raise InvalidInput("run id", f"{digits} matches {many} runs: {listed}; give more of the id")
    return rows[0]["workflow_id"]  # type: ignore[no-any-return]


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
    """The columns the filters fix, leading the runs list's order (:func:`pgbus_flask.filters.index_order`)."""
    return filters.index_order(f.workflow_class, f.status, f.step, f.reason, f.error_class)


def list_runs(engine: Engine, f: RunFilter) -> tuple[list[Row], int | None]:
    """Runs newest first, each with its latest step; and the cursor of the next page (or None)."""
    _check_run_filter(f)
    limit = max(1, min(int(f.limit), MAX_LIMIT))
    fixed = _index_order(f)
    due = _due_ids(engine, f, limit) if f.reason in _due_reasons(engine) else None
    walk = f.reason in _due_reasons(engine) and due is None
    if walk:
        fixed = ["w.attention_reason"]  # many are due: the runs of the reason, newest first, the others skipped
    where, params = _field_filters(f, fixed)
    params["limit"] = limit + 1
    older_than_window = _text_filter(engine, f, where, params)
    if walk:
        older_than_window = _due_window(engine, f, where, params, older_than_window)
    if f.before:
        where.append(filters.BEFORE)
        params["before"] = f.before
    _reason_filter(engine, f, fixed, where, params, due)
    query = filters.runs_page(where, fixed)
    with engine.db.connection() as conn, conn.transaction() if f.reason else contextlib.nullcontext():
        if f.reason:
            db.run(conn, "jit_off")  # as in _read
        rows = db.fetch_all(conn, query, params)
    cursor = rows[limit - 1]["id"] if len(rows) > limit else older_than_window
    return rows[:limit], cursor


def _check_run_filter(f: RunFilter) -> None:
    if f.status and f.status not in states.RUN_STATUSES:
        raise InvalidInput("status", f"{f.status!r} is unknown (known: {', '.join(states.RUN_STATUSES)})")
    if f.reason and f.reason not in states.STUCK_REASONS:
        raise InvalidInput("stuck reason", f"{f.reason!r} is unknown (known: {', '.join(states.STUCK_REASONS)})")
    _checked(("class", f.workflow_class), ("step", f.step), ("error class", f.error_class),
             ("subject", f.subject), ("text", f.text))


def _field_filters(f: RunFilter, fixed: Sequence[str]) -> tuple[list[sql.Composable], Row]:
    """The conditions on the run's own columns (class, status, step, subject) and their parameters."""
    where: list[sql.Composable] = []
    params: Row = {}
    for value, column, param in ((f.workflow_class, "w.workflow_class", "cls"), (f.status, "w.status", "status"),
                                 (f.step, "w.current_step", "step")):
        if value:
            where.append(filters.same(column, param, fixed))
            params[param] = value
    if f.subject:
        kind, _, ident = f.subject.partition(" ")
        where.append(filters.SUBJECT_TYPE)
        params["stype"] = kind
        if ident:
            where.append(filters.SUBJECT_ID)
            params["sid"] = ident
    return where, params


def _text_filter(engine: Engine, f: RunFilter, where: list[sql.Composable], params: Row) -> int | None:
    """The search box's condition: a whole run id, or the start of one or a piece of a subject.
    Returns the lowest run id a text search read when older runs are left (the next page's cursor)."""
    text = f.text.strip() if f.text else ""
    whole_id = _whole_run_id(text)
    if whole_id is not None:  # one run, from the unique index, however old
        where.append(filters.WHOLE_ID)
        params["whole_id"] = whole_id
        return None
    if not text:
        return None
    matches: list[sql.Composable] = [filters.TEXT_IS_SUBJECT_ID, filters.TEXT_IN_SUBJECT]
    params.update(text=text, text_like="%" + like_escape(text) + "%")
    bounds = run_id_range(text)
    if bounds is not None:  # the run ids starting with the text
        matches.insert(0, filters.TEXT_STARTS_ID)
        params.update(id_low=bounds[0], id_high=bounds[1])
    where.append(filters.any_of(matches))
    # A piece of a subject can only be found by reading runs: a page reads at most TEXT_WINDOW of
    # them (by id, below the cursor), and when older runs are left its cursor continues below them.
    with engine.db.connection() as conn:
        span = db.fetch_one(conn, "run_id_span")
    newest, oldest = span["newest"], span["oldest"]  # type: ignore[index]
    low = (f.before or (newest or 0) + 1) - TEXT_WINDOW
    where.append(filters.TEXT_WINDOW)
    params["text_window"] = low
    return low if oldest is not None and oldest < low else None


def _due_ids(engine: Engine, f: RunFilter, limit: int) -> list[int] | None:
    """The ids a runs list of a due reason picks its page from, newest first, when at most
    :data:`COUNT_CAP` runs are due (one probe of each attention group, then its due range up to the cap);
    None when more are due (the list then walks the reason's runs newest first, skipping those not due)."""
    assert f.reason is not None
    cap = _cap(None)
    params = _base(engine, None, f.workflow_class, cap)
    params.update(step=f.step, error_class=f.error_class)
    query = filters.due_ids(f.reason, by_class=bool(f.workflow_class), by_step=bool(f.step),
                            by_error=f.error_class is not None)
    ids = [r["id"] for r in _read(engine, query, params)]
    if len(ids) > cap:
        return None
    ids = sorted((i for i in ids if not f.before or i < f.before), reverse=True)
    # Only the newest page's worth, unless a filter the groups do not know may drop some of them.
    return ids if f.status or f.subject or f.text else ids[:limit + 1]


def _due_window(engine: Engine, f: RunFilter, where: list[sql.Composable], params: Row,
                older: int | None) -> int | None:
    """Bound the walk over a due reason's runs to the :data:`DUE_WINDOW` newest below the cursor (one range of
    ``pgbus_workflows_attention``): its page skips the runs not due yet among them, and when older runs of the
    reason are left, the lowest id read is the next page's cursor (as a text search's window). Returns the
    cursor the page falls back on (the higher of this one and ``older``, the text search's)."""
    assert f.reason is not None
    with engine.db.connection() as conn:
        row = db.fetch_one(conn, filters.due_window(f.reason, bool(f.before)),
                           {"before": f.before, "offset": DUE_WINDOW})
    if row is None:
        return older
    low = int(row["id"]) + 1
    where.append(filters.DUE_WINDOW)
    params["due_window"] = max(low, older or 0)
    return max(low, older or 0)


def _reason_filter(engine: Engine, f: RunFilter, fixed: Sequence[str], where: list[sql.Composable],
                   params: Row, due: list[int] | None = None) -> None:
    """The condition of a stuck reason (and of its error class, for one attention group); ``due``: the
    ids of the runs due for a due reason, when :func:`_due_ids` read them all."""
    if f.reason in attention.PAUSED_REASONS:
        where += [filters.PAUSED, filters.same("w.attention_reason", "reason", fixed)]
        params["reason"] = f.reason
    elif f.reason:
        params.update(now=None, stall=engine.settings.stall_threshold,
                      waiting=engine.settings.waiting_threshold or timedelta(0))
        if f.reason not in _due_reasons(engine):
            where.append(filters.stuck_for(f.reason, _due_reasons(engine)))  # FALSE
        elif due is not None:
            where += [filters.stuck_for(f.reason, _due_reasons(engine)), filters.DUE_IDS]
            params["due_ids"] = due
        else:
            where.append(filters.due_walk(f.reason))
    if f.reason and f.error_class is not None:
        where.append(filters.same("COALESCE(w.attention_error_class, '')", "error_class", fixed))
        params["error_class"] = f.error_class


def batch_progress(engine: Engine, batch_id: int) -> tuple[Row, list[Row]] | None:
    """A batch (done, failed, total, status ...) with its run's ``workflow_class``, ``subject_type`` and
    ``subject_id``, and all its children (``position`` from 0), or None. A page of them: :func:`batch_page`."""
    with engine.db.connection() as conn:
        batch = db.fetch_one(conn, "batch", (batch_id,))
        if batch is None:
            return None
        children = db.fetch_all(conn, "batch_children", (batch_id,))
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
    with engine.db.connection() as conn:
        batch = db.fetch_one(conn, "batch", (batch_id,))
        if batch is None:
            return None
        rows = db.fetch_all(conn, filters.batch_children_page(bounded_values),
                            (batch_id, -1 if after is None else after, limit + 1))
    next_after = rows[limit - 1]["position"] if len(rows) > limit else None
    return batch, ChildrenPage(rows[:limit], after, next_after)


def batch_child(engine: Engine, batch_id: int, position: int) -> Row | None:
    """One child of a batch, whole (None when the batch has no child at ``position``, counted from 0)."""
    with engine.db.connection() as conn:
        return db.fetch_one(conn, "batch_child", (batch_id, position))


# -- flow control: the limits and rates, and the lines runs wait in ----------------------------------

#: The kinds of limit (``pgbus_limits.kind``): a class's concurrency limit, a step's, a step's rate.
LIMIT_KINDS = ("run", "step", "rate")
#: The busiest keys the Limits page shows of each limit (most slots in use and steps in line first).
BUSIEST_KEYS = 5
#: The most limits and rates a read lists (each is declared in code: a handful, not thousands).
LIMITS_LIMIT = 500


@dataclass(frozen=True)
class KeyUse:
    """One key of a concurrency limit: its slots in use and its steps in line."""

    key: str
    in_use: int
    waiting: int


@dataclass(frozen=True)
class LimitUse:
    """A limit or a rate as last declared (``kind``: ``run`` for a class's limit, ``step`` for a step's,
    ``rate``), and how it is used now: ``keys`` seen (None for a rate), slots ``in_use`` (a rate: the
    starts of its current window), steps ``waiting`` in line, and its ``busiest`` keys (a rate has none);
    ``per_seconds`` and ``wake_at``: a rate's window and the moment its wake-up job is due."""

    name: str
    kind: str
    capacity: int
    per_seconds: float | None
    keys: int | None
    in_use: int
    waiting: int
    busiest: tuple[KeyUse, ...] = ()
    wake_at: datetime | None = None
    updated_at: datetime | None = None


def limits(engine: Engine, *, top: int = BUSIEST_KEYS) -> list[LimitUse]:
    """Every limit and rate (by name), with its use and its ``top`` busiest keys; one statement that
    reads each name's range of ``pgbus_limit_slots`` and of ``pgbus_workflow_steps_blocked``, so its cost
    follows the slots and the steps in line of the limits, never the runs (``top=0``: no busiest keys)."""
    with engine.db.connection() as conn:
        rows = db.fetch_all(conn, "limits", {"top": max(int(top), 0), "limit": LIMITS_LIMIT})
    return [LimitUse(r["name"], r["kind"], int(r["capacity"]), r["per_seconds"],
                     None if r["keys"] is None else int(r["keys"]), int(r["in_use"] or 0), int(r["waiting"] or 0),
                     tuple(KeyUse(str(k["key"]), int(k["in_use"]), int(k["waiting"])) for k in r["busiest"] or ()),
                     r["wake_at"], r["updated_at"]) for r in rows]


@dataclass(frozen=True)
class LimitsCard:
    """The overview's card: how many limits and rates are declared, and how many steps wait in line."""

    limits: int
    waiting: int


def limits_card(engine: Engine) -> LimitsCard:
    with engine.db.connection() as conn:
        row = db.fetch_one(conn, "limits_card")
    assert row is not None
    return LimitsCard(int(row["limits"]), int(row["waiting"]))


#: A line a step waits in: (limit or rate name, the limit's key; None for a rate).
Line = tuple[str, str | None]


def limit_lines(engine: Engine, lines: Iterable[Line]) -> dict[Line, Row]:
    """What waiting steps' next-step sentences say of the lines they are in, in one statement:
    ``{(name, key): row}`` with the limit's ``kind``, ``capacity``, ``per_seconds`` and ``wake_at`` (None
    when nothing declares it), and for a limit's key its slots held (``running``) and its steps in line
    (``waiting``). A key of None names a rate."""
    wanted = list(dict.fromkeys(lines))
    if not wanted:
        return {}
    with engine.db.reading() as conn:
        rows = db.fetch_all(conn, "limit_lines", {"names": [n for n, _ in wanted], "keys": [k for _, k in wanted]})
    return {(r["name"], r["key"]): r for r in rows}
