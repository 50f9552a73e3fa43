"""The run handle: ``bus.run(workflow_id)`` or what ``start()`` returns.

Its attributes (``status``, ``current_step``, ``available_actions`` ...) are
a snapshot taken when the handle was made or last refreshed; every verb
refreshes it. Lists that cost a query (``steps()``, ``events()`` ...) are
methods.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from . import db, filters, orm, payload, runner, verbs
from .engine import Engine
from .errors import WorkflowNotFound
from .filters import HEAD_BYTES, HEAD_CHARS, WHOLE_BYTES, bounded  # noqa: F401 (the names handle.py gave them)
from .runner import ResumePlan, Row, SignalResult


def _uuid(value: Any) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise WorkflowNotFound(value) from None


#: Attempts, audit events, signals, child runs and batches a page of a run shows at once (the newest;
#: "older" pages show the rest).
PAGE_SIZE = 25
# A signal's columns but its payload (read bounded, see WHOLE_BYTES).
_SIGNAL_COLUMNS = ("id, workflow_id, name, idempotency_key, status, sent_by, claimed_by_step_id, claimed_at,"
                   " consumed_at, created_at")
_CHILD_COLUMNS = ("id, workflow_id, workflow_class, status, current_step, parent_step_name, created_at, finished_at,"
                  " attention_reason")


@dataclass(frozen=True)
class Page:
    """Some rows of a long list, oldest first: the newest ``limit`` older than a cursor.

    ``older`` is the cursor of the page before (the ``before=`` value that shows it), or None when
    these are the oldest rows. ``total`` is how many rows the whole list has (None: not counted).
    """

    rows: list[Row]
    older: int | None
    total: int | None = None


@dataclass
class AttemptBucket:
    """How the attempts of one step that began in one stretch of time ended: ``statuses`` counts
    their step statuses; ``first`` and ``last`` are when the first began and the last ended."""

    step_name: str
    index: int
    statuses: dict[str, int]
    first: datetime
    last: datetime


class Run:
    """One workflow run."""

    def __init__(self, engine: Engine, workflow_id: Any) -> None:
        self.engine = engine
        self.workflow_id = _uuid(workflow_id)
        self.refresh()

    @classmethod
    def from_rows(cls, engine: Engine, row: Row, latest_step: Row | None, klass: Any) -> Run:
        """A handle on rows just read or written (``row`` with ``db_now``), without a query."""
        run = cls.__new__(cls)
        run.engine, run.workflow_id = engine, row["workflow_id"]
        run.row, run.latest_step, run.klass = row, latest_step, klass
        return run

    def __repr__(self) -> str:
        return f"<Run {self.workflow_class} {self.workflow_id} {self.status}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Run) and other.workflow_id == self.workflow_id

    def __hash__(self) -> int:
        return hash(self.workflow_id)

    def refresh(self) -> Run:
        """Read the run's row and latest step again."""
        with self.engine.db.reading() as conn:
            row = db.fetch_one(conn, "run_row", (self.workflow_id,))
            if row is None:
                raise WorkflowNotFound(self.workflow_id)
            self.row: Row = row
            self.latest_step: Row | None = runner.latest_step(conn, self.workflow_id)
        self.klass = runner.load_class(self.engine, row["workflow_class"])
        return self

    # -- the snapshot ---------------------------------------------------------

    @property
    def status(self) -> str:
        return str(self.row["status"])

    @property
    def workflow_class(self) -> str:
        return str(self.row["workflow_class"])

    @property
    def current_step(self) -> str:
        return str(self.row["current_step"])

    @property
    def subject(self) -> tuple[str, str] | None:
        return (self.row["subject_type"], self.row["subject_id"]) if self.row["subject_type"] else None

    @property
    def arguments(self) -> dict[str, Any]:
        return payload.from_json(self.row["arguments"])  # type: ignore[no-any-return]

    @property
    def parent_id(self) -> Any:
        """The id of the run whose step started this one (``start_child``), or None."""
        return self.row.get("parent_workflow_id")

    @property
    def parent_step(self) -> str | None:
        """The parent's step that started this run and waits for it, or None."""
        return self.row.get("parent_step_name")

    def parent(self) -> Run | None:
        """The parent run (None for a run no step started, or whose parent was deleted since)."""
        if self.parent_id is None:
            return None
        try:
            return Run(self.engine, self.parent_id)
        except WorkflowNotFound:
            return None

    @property
    def class_loaded(self) -> bool:
        return self.klass is not None

    @property
    def definition_outdated(self) -> bool:
        """True when the run started on a different step list or options than its class declares now."""
        return runner.outdated(self.row, self.klass)

    @property
    def available_actions(self) -> list[str]:
        return runner.available_actions(self.row, self.latest_step, self.klass, self.row["db_now"])

    def resume_plan(self) -> ResumePlan | None:
        """What ``resume()`` would do now (None unless paused)."""
        return runner.resume_plan(self.row, self.latest_step, self.klass)

    # -- reads that query -------------------------------------------------------

    def _rows(self, name: str) -> list[Row]:
        with self.engine.db.reading() as conn:
            return db.fetch_all(conn, name, (self.workflow_id,))

    def steps(self) -> list[Row]:
        """Every attempt, oldest first."""
        return self._rows("run_attempts")

    def events(self) -> list[Row]:
        """The audit trail, oldest first."""
        return self._rows("run_events")

    def _page(self, table: str, before: int | None, limit: int, *, columns: str = "*", owner: str = "workflow_id",
              count: bool = False) -> Page:
        """The newest ``limit`` rows of ``table`` whose ``owner`` column is this run, with an id below
        ``before``, oldest first: one range of an ``(owner, id)`` index, however long the list. With
        ``count``, ``total`` counts the whole list (a second range of the same index, skipped when the
        first page holds all of it)."""
        # table, columns and owner: literals of the methods below, never input
        params: list[Any] = [self.workflow_id]
        if before is not None:
            params.append(before)
        with self.engine.db.reading() as conn:
            rows = db.fetch_all(conn, filters.run_page(table, columns, owner, before is not None),
                                (*params, limit + 1))
            total = None
            if count and before is None and len(rows) <= limit:
                total = len(rows)
            elif count:
                total = int(db.fetch_one(conn, filters.run_page_count(table, owner),  # type: ignore[index]
                                         (self.workflow_id,))["n"])
        older = rows[limit - 1]["id"] if len(rows) > limit else None
        return Page(rows[:limit][::-1], older, total)

    def steps_page(self, before: int | None = None, limit: int = PAGE_SIZE) -> Page:
        """The newest ``limit`` attempts (with a step row id below ``before``), oldest first."""
        return self._page("pgbus_workflow_steps", before, limit)

    def events_page(self, before: int | None = None, limit: int = PAGE_SIZE) -> Page:
        """The newest ``limit`` audit events (with an id below ``before``), oldest first."""
        return self._page("pgbus_workflow_events", before, limit)

    def attempt_count(self) -> int:
        with self.engine.db.reading() as conn:
            row = db.fetch_one(conn, "run_attempt_count", (self.workflow_id,))
        return int(row["n"]) if row else 0

    def pause_events(self) -> list[Row]:
        """The events that start or end a paused stretch (what the timeline draws), oldest first."""
        with self.engine.db.reading() as conn:
            return db.fetch_all(conn, "run_pause_events", (self.workflow_id,))

    def attempt_buckets(self, start: datetime, end: datetime, buckets: int) -> list[AttemptBucket]:
        """The attempts counted by step, stretch of time (``buckets`` equal stretches from ``start`` to
        ``end``, by when each attempt's row was made) and step status: one aggregate however many
        attempts there are. In order of each step's first attempt, then of time."""
        width = max((end - start) / buckets, timedelta(microseconds=1))
        with self.engine.db.reading() as conn:
            rows = db.fetch_all(conn, "run_attempt_buckets", {"wid": self.workflow_id, "start": start, "end": end,
                                                              "width": width, "last": buckets - 1})
        out: dict[tuple[str, int], AttemptBucket] = {}
        first_id: dict[str, int] = {}
        for row in rows:
            name, index, status, count = row["step_name"], row["bucket"], row["status"], row["attempts"]
            first, last, lowest = row["first"], row["last"], row["lowest"]
            bucket = out.setdefault((name, index), AttemptBucket(name, index, {}, first, last))
            bucket.statuses[status] = count
            bucket.first, bucket.last = min(bucket.first, first), max(bucket.last, last)
            first_id[name] = min(first_id.get(name, lowest), lowest)
        return sorted(out.values(), key=lambda b: (first_id[b.step_name], b.index))

    def signals(self) -> list[Row]:
        """Every signal, oldest first (a page of them: :meth:`signals_page`)."""
        return self._rows("run_signals")

    def signals_page(self, before: int | None = None, limit: int = PAGE_SIZE, *, bounded_payloads: bool = False
                     ) -> Page:
        """The newest ``limit`` signals (with an id below ``before``), oldest first, and how many the run
        has. With ``bounded_payloads`` a large payload is left out (:func:`bounded`): what a page shows."""
        columns = f"{_SIGNAL_COLUMNS}, {bounded('payload')}" if bounded_payloads else "*"
        return self._page("pgbus_workflow_signals", before, limit, columns=columns, count=True)

    def signal_row(self, signal_id: int) -> Row | None:
        """One signal of this run, whole (None when the run has no signal with this id)."""
        with self.engine.db.reading() as conn:
            return db.fetch_one(conn, "run_signal", (self.workflow_id, signal_id))

    def batches(self) -> list[Row]:
        """Every fan-out batch, oldest first (a page of them: :meth:`batches_page`)."""
        return self._rows("run_batches")

    def batches_page(self, before: int | None = None, limit: int = PAGE_SIZE) -> Page:
        """The newest ``limit`` fan-out batches (with an id below ``before``), oldest first, and how many."""
        return self._page("pgbus_batches", before, limit, count=True)

    def batch(self, batch_id: int | None) -> Row | None:
        """One fan-out batch of this run (None for none): the latest step's, for its sentence."""
        if batch_id is None:
            return None
        with self.engine.db.reading() as conn:
            return db.fetch_one(conn, "run_batch", (self.workflow_id, batch_id))

    def children_page(self, before: int | None = None, limit: int = PAGE_SIZE) -> Page:
        """The newest ``limit`` child runs (with a run row id below ``before``), oldest first, with the
        columns of :meth:`children` and ``id``; and how many the run has."""
        return self._page("pgbus_workflows", before, limit, columns=_CHILD_COLUMNS, owner="parent_workflow_id",
                          count=True)

    def ongoing_children(self) -> int:
        """How many of its child runs are ongoing (what cancel would cancel too)."""
        with self.engine.db.reading() as conn:
            row = db.fetch_one(conn, "run_ongoing_children", (self.workflow_id,))
        return int(row["n"]) if row else 0

    def children(self) -> list[Row]:
        """Every child run its steps started (``start_child``), in the order they were started:
        ``workflow_id``, ``workflow_class``, ``status``, ``current_step``, ``parent_step_name``,
        ``created_at``, ``finished_at``, ``attention_reason`` (a page of them: :meth:`children_page`)."""
        ids = list(dict.fromkeys(i for row in self._rows("run_child_ids") for i in row["child_ids"]))
        if not ids:
            return []
        with self.engine.db.reading() as conn:
            rows = {r["workflow_id"]: r for r in db.fetch_all(conn, "runs_as_children", (ids,))}
        return [rows[i] for i in ids if i in rows]

    def outputs(self) -> dict[str, Any]:
        """``{step_name: output}`` of each step's latest completed attempt."""
        with self.engine.db.reading() as conn:
            return runner.completed_outputs(conn, self.workflow_id)

    # -- verbs --------------------------------------------------------------------

    def _done(self) -> Run:
        return self.refresh()

    @contextmanager
    def _joined(self, session: Any) -> Iterator[None]:
        """With a SQLAlchemy ``session``: the verb writes in its transaction and its jobs are
        sent after it commits (see pgbus_flask.orm)."""
        if session is None:
            yield
            return
        with orm.session_transaction(self.engine.db, session):
            yield

    def _verb(self, name: str, session: Any, *args: Any, actor: str, reason: str | None) -> Any:
        """Do the verb ``name`` of the table (:mod:`pgbus_flask.verbs`) through the runner's function of that
        name, then refresh: its result when the table says it returns one (resume's plan), else this handle."""
        declared = verbs.verb(name)
        with self._joined(session):
            result = getattr(runner.verbs, name)(self.engine, self.workflow_id, *args, actor=actor, reason=reason)
            self._done()
        return result if declared.returns == verbs.PLAN else self

    def pause(self, *, actor: str = "app", reason: str | None = None, session: Any = None) -> Run:
        return self._verb("pause", session, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def resume(self, *, actor: str = "app", reason: str | None = None, session: Any = None) -> ResumePlan:
        return self._verb("resume", session, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def resume_at(self, step: str, *, actor: str = "app", reason: str | None = None, session: Any = None) -> Run:
        return self._verb("resume_at", session, step, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def run_now(self, *, actor: str = "app", reason: str | None = None, session: Any = None) -> Run:
        return self._verb("run_now", session, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def reschedule(self, at: datetime, *, actor: str = "app", reason: str | None = None,
                   session: Any = None) -> Run:
        return self._verb("reschedule", session, at, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def skip(self, *, actor: str = "app", reason: str | None = None, session: Any = None) -> Run:
        return self._verb("skip", session, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def rerun(self, step: str | None = None, *, actor: str = "app", reason: str | None = None,
              session: Any = None) -> Run:
        return self._verb("rerun", session, step, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def cancel(self, *, actor: str = "app", reason: str | None = None, session: Any = None) -> Run:
        return self._verb("cancel", session, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def upgrade(self, *, actor: str = "app", reason: str | None = None, session: Any = None) -> Run:
        """Continue this run, started on an older definition of its class, on the current one
        (see :attr:`definition_outdated`); refused when its current step no longer exists."""
        return self._verb("upgrade", session, actor=actor, reason=reason)  # type: ignore[no-any-return]

    def signal(self, name: str, payload: Any = None, *, idempotency_key: str | None = None, actor: str = "app",
               reason: str | None = None, session: Any = None) -> SignalResult:
        with self._joined(session):
            result = runner.send_signal(self.engine, self.workflow_id, name, payload,
                                        idempotency_key=idempotency_key, actor=actor, reason=reason)
            self._done()
        return result

    def act(self, action: str, *, actor: str = "app", reason: str | None = None, **params: Any) -> Any:
        """Call the verb named ``action`` with ``params`` (its parameters as :mod:`pgbus_flask.verbs` names
        them): what the CLI, the dashboard, the JSON API and the MCP server use."""
        verbs.verb(action)  # an unknown name is refused with the known ones
        return getattr(self, action)(actor=actor, reason=reason, **params)
