"""The sweep: what no job will do by itself.

The due ticks of schedules (:mod:`pgbus_flask.schedules`), stalled attempts,
overdue scheduled steps, expired waits, fan-out children
lost with their worker, old terminal runs, and the count rows of
``pgbus_run_counts`` folded into one per key. One sweeper at a time across
every machine (a PostgreSQL advisory lock, held by one transaction); each part reads through a
partial index, so its cost grows with what it finds, not with the tables.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import psycopg

from . import attention, db, insights, metrics, reporting, runner, schedules
from .definition import registry
from .engine import Engine
from .errors import ChildLost
from .rq_state import DIED, LIVE, job_statuses

log = logging.getLogger("pgbus_flask")

#: The advisory lock key of the sweep ("pgbus-sweep").
SWEEP_LOCK = 0x7067627573_02
#: Rows each part handles per sweep (the rest wait for the next one).
BATCH = 500
#: Where a paged part (overdue, expired waits) starts when it has no cursor: before every step.
PAGE_START = (datetime(1, 1, 1, tzinfo=timezone.utc), 0)
#: Pages of candidates a paged part reads at most a sweep while they hold none that is due.
PAGES = 8
#: Terminal runs deleted per statement, and statements per sweep.
DELETE_BATCH = 500
DELETE_ROUNDS = 20


#: The named statement (pgbus_flask/sql/sweep.sql) each part starts from, each driven by a partial
#: index (tests/db/test_sweep_plans.py checks the plans): its cost follows what it finds.
FIND = {
    "stalled": "sweep_stalled",
    "overdue": "sweep_overdue",
    "expired_waits": "sweep_expired_waits",
    "lost_children": "sweep_lost_children",
    "flow": "sweep_flow",
    "retention_finished": "sweep_retention_finished",
    "retention_cancelled": "sweep_retention_cancelled",
}


@dataclass
class SweepReport:
    """What one sweep did (``ran`` is False when another sweeper held the lock).
    ``overdue_live``: overdue steps left alone because RQ still holds their job."""

    ran: bool = True
    schedules_started: int = 0
    schedules_synced: int = 0
    stalled: int = 0
    resent: int = 0
    overdue_live: int = 0
    wait_timeouts: int = 0
    children_failed: int = 0
    children_resent: int = 0
    child_runs_cancelled: int = 0
    child_waits_settled: int = 0
    slots_granted: int = 0
    rates_woken: int = 0
    deleted_runs: int = 0
    counts_folded: int = 0
    insights_folded: int = 0
    #: Runs newly seen past their threshold (notices), and webhook messages made or sent again.
    announced: int = 0
    deliveries: int = 0
    errors: list[str] = field(default_factory=list)

    def total(self) -> int:
        return (self.schedules_started + self.stalled + self.resent + self.wait_timeouts + self.children_failed
                + self.children_resent + self.child_runs_cancelled + self.child_waits_settled + self.deleted_runs
                + self.slots_granted + self.rates_woken)


def sweep(engine: Engine) -> SweepReport:
    """Run every part of the sweep once, unless another sweeper holds the lock.

    The lock is a transaction-level advisory lock, taken in a transaction that stays open on
    its own connection while the parts run on others, and released by ending it. Nothing of
    it outlives that transaction, so it works behind a transaction-mode pooler (PgBouncer),
    where a session-level lock and its later unlock could reach two different server
    connections and the lock would stay held forever on the first.
    """
    with engine.db.connection() as lock_conn:
        lock_conn.execute("BEGIN")
        try:
            got = db.fetch_one(lock_conn, "sweep_lock", (SWEEP_LOCK,))["got"]  # type: ignore[index]
            if not got:
                return SweepReport(ran=False)
            began = time.perf_counter()
            report = SweepReport()
            for part in PARTS:
                try:
                    part(engine, report)
                except Exception as exc:  # one part failing must not stop the others
                    reporting.report(exc, "sweep", engine=engine)
                    log.exception("pgbus sweep: %s failed", part.__name__)
                    report.errors.append(f"{part.__name__}: {exc}")
                    metrics.sweep_error(part.__name__.lstrip("_"))
            metrics.sweep_done(time.perf_counter() - began,
                               {action: getattr(report, action) for action in metrics.SWEEP_ACTIONS})
            return report
        finally:
            # Nothing was written on this connection: ending its transaction releases the lock. If
            # the server already ended it (a restart, idle_in_transaction_session_timeout), the
            # lock went with it and the pool drops the broken connection.
            with contextlib.suppress(psycopg.Error):
                lock_conn.execute("ROLLBACK")


def _ids(engine: Engine, part: str, params: tuple[Any, ...] | dict[str, Any] = ()) -> list[tuple[Any, ...]]:
    """The rows a part starts from, as tuples, read serially (see sweep_serially in sweep.sql)."""
    with engine.db.connection() as conn, conn.transaction():
        db.run(conn, "sweep_serially")
        return [tuple(row.values()) for row in db.fetch_all(conn, FIND[part], params)]


def _due_pages(engine: Engine, part: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The due rows of a paged part: its statement reads one page of BATCH candidates after the part's
    cursor, each ending with (moment, due); a full page with none due is followed by the next, up to
    PAGES a sweep. The next sweep reads on from where this one stopped (from the start once a page comes
    back short), so candidates that are not due (a paused run's step) cost a sweep at most PAGES pages
    however many there are, and every candidate is looked at again in turn."""
    rows: list[tuple[Any, ...]] = []
    for _ in range(PAGES):
        after_at, after_id = engine.sweep_cursors.get(part, PAGE_START)
        page = _ids(engine, part, {**params, "after_at": after_at, "after_id": after_id, "limit": BATCH})
        engine.sweep_cursors[part] = (page[-1][-2], page[-1][0]) if len(page) == BATCH else PAGE_START
        rows = [row for row in page if row[-1]]
        if rows or len(page) < BATCH:
            break
    return rows


def _schedules(engine: Engine, report: SweepReport) -> None:
    """Store the registered classes' schedules, then start their due ticks, one run a tick
    (:mod:`pgbus_flask.schedules`); a schedule that fails does not stop the others."""
    done = schedules.sweep_part(engine)
    report.schedules_synced += done.synced
    report.schedules_started += done.started
    report.errors.extend(done.errors)


def _stalled(engine: Engine, report: SweepReport) -> None:
    """Attempts in progress past their stall deadline: failed (:func:`runner.fail_stalled`)."""
    for step_id, workflow_id in _ids(engine, "stalled", (BATCH,)):
        if runner.fail_stalled(engine, step_id, workflow_id):
            report.stalled += 1


def _overdue(engine: Engine, report: SweepReport) -> None:
    """Steps of ready runs due and sent longer than the threshold ago whose job RQ no longer
    holds (not queued, scheduled or running), or holds for a worker that is gone (its key
    expired, or the job started longer than the threshold ago without claiming its step):
    sent again. A step that merely waits its turn in a long queue is left alone, so a backlog
    never feeds itself. Read in pages (:func:`_due_pages`: a paused run's step, or one sent again
    lately, takes its place in a page and is skipped), so thousands of paused runs delay a lost step
    by a sweep or two, not thousands / BATCH sweeps, and every overdue step is asked about in turn,
    even behind a queue nobody serves. One query a page, two Redis round trips (a third for jobs
    left in RQ's intermediate list) and, if some were lost, one UPDATE and one more round trip."""
    threshold = engine.settings.stall_threshold.total_seconds()
    rows = [(step_id, sends, job_id) for step_id, sends, job_id, _, _ in
            _due_pages(engine, "overdue", {"threshold": threshold})]
    statuses = job_statuses(engine.redis, [job_id for _, _, job_id in rows], stale_after=threshold,
                            claims_at_start=True)
    lost = [(step_id, sends, job_id) for step_id, sends, job_id in rows if statuses.get(job_id) not in LIVE]
    report.overdue_live += len(rows) - len(lost)
    report.resent += runner.resend_lost(engine, lost)


def _expired_waits(engine: Engine, report: SweepReport) -> None:
    """Waits for a signal past their deadline: ended as each step's ``on_timeout`` says
    (:func:`runner.expire_wait`). Read in pages (:func:`_due_pages`): a run paused while it waited
    keeps its waiting step past the deadline, and thousands of them cost a sweep at most PAGES pages."""
    for step_id, workflow_id, _, _ in _due_pages(engine, "expired_waits", {}):
        if runner.expire_wait(engine, step_id, workflow_id):
            report.wait_timeouts += 1


def _lost_children(engine: Engine, report: SweepReport) -> None:
    """Pending children of open batches whose step still waits on them, sent longer than the
    stall threshold ago, whose RQ job failed or started on a worker whose key is gone (its
    worker died) or no longer exists (Redis lost it): fail or resend them. A cancelled or
    skipped step's children are left alone."""
    threshold = engine.settings.stall_threshold.total_seconds()
    rows = _ids(engine, "lost_children", {"threshold": threshold, "limit": BATCH})
    statuses = job_statuses(engine.redis, [job_id for _, _, job_id, _ in rows], stale_after=threshold)
    resend: dict[tuple[int, str], list[tuple[int, str]]] = {}
    for batch_id, position, job_id, queue in rows:
        status = statuses.get(job_id)
        if status in DIED:
            lost = ChildLost(job_id, status.value)
            if runner.record_child(engine, batch_id, position, error=lost):
                report.children_failed += 1
        elif status not in LIVE:  # gone from Redis, or finished without recording (never, but resend)
            new_id = runner.resend_child(engine, batch_id, position)
            if new_id is not None:
                resend.setdefault((batch_id, queue), []).append((position, new_id))
                report.children_resent += 1
    for (batch_id, queue), children in resend.items():
        engine.send_children(batch_id, queue, children)


def _child_runs(engine: Engine, report: SweepReport) -> None:
    """Child workflow runs a dead process left behind: ongoing children of a cancelled parent,
    and steps still waiting on children that all ended (see runner.children)."""
    cancelled, settled = runner.sweep_children(engine, older_than=engine.settings.stall_threshold.total_seconds(),
                                               limit=BATCH)
    report.child_runs_cancelled += cancelled
    report.child_waits_settled += settled


#: Seconds past its moment after which the sweep wakes a rate whose wake-up did not come.
RATE_WAKE_LATE = 10.0


def _flow(engine: Engine, report: SweepReport) -> None:
    """Flow control's safety net (docs/flow-control.md): the declared capacities are stored, lines of a
    concurrency limit with a free slot and a waiting run get the slot (a capacity raised since, a waiter
    skipped by a grant because another transaction held it), rates with waiting runs whose wake-up job
    is missing or late are woken, and the slot rows of keys nobody holds or waits for are deleted."""
    runner.declare(engine, list(registry().values()))
    found = _ids(engine, "flow", {"limit": BATCH, "late": RATE_WAKE_LATE})
    report.slots_granted += runner.regrant(engine, [(name, key) for kind, name, key in found if kind == "line"])
    for kind, name, _ in found:
        if kind == "rate":
            report.rates_woken += runner.wake_rate(engine, name)


def _notify(engine: Engine, report: SweepReport) -> None:
    """Telling a person (docs/notifications.md): runs past their threshold announced (each a
    run_needs_attention notice: the "absence" alert), webhook targets declared, the outbox pumped, lost
    deliveries sent again, old ones forgotten."""
    from . import notify  # above the sweep: its messages are said in words (present)

    swept = notify.sweep_part(engine)
    report.announced += swept.announced
    report.deliveries += swept.deliveries + swept.resent


def _retention(engine: Engine, report: SweepReport) -> None:
    """Finished runs older than PGBUS_RETENTION_FINISHED and cancelled ones older than
    PGBUS_RETENTION_CANCELLED (each PGBUS_RETENTION unless set; None keeps them): deleted, the oldest
    first, DELETE_BATCH runs a statement (each its own transaction, so workers wait on no long one)
    and at most DELETE_ROUNDS statements a status a sweep; their steps, events, signals and batches
    go with them (ON DELETE CASCADE)."""
    settings = engine.settings
    for part, retention in (("retention_finished", settings.retention_finished),
                            ("retention_cancelled", settings.retention_cancelled)):
        if retention is None:
            continue
        for _ in range(DELETE_ROUNDS):
            with engine.db.connection() as conn:
                deleted = db.run(conn, FIND[part], (retention.total_seconds(), DELETE_BATCH)).rowcount
            report.deleted_runs += deleted
            if deleted < DELETE_BATCH:
                break


def _fold_counts(engine: Engine, report: SweepReport) -> None:
    """Fold the +N/-N rows the runs' triggers added to ``pgbus_run_counts`` since the last sweep
    (after the retention part, so that its deletions are folded in the same sweep). Not a part of
    ``total()``: it changes no run."""
    with engine.db.connection() as conn:
        report.counts_folded += attention.fold(conn)


def _fold_insights(engine: Engine, report: SweepReport) -> None:
    """Fold the insight deltas the audit trail's trigger added since the last sweep into
    ``pgbus_insights``, compact rows older than two days into hourly ones, and drop expired
    ones (:mod:`pgbus_flask.insights`). Changes no run."""
    with engine.db.connection() as conn:
        folded, cursor = insights.fold(conn, engine.sweep_cursors.get("insights"))
    engine.sweep_cursors["insights"] = cursor
    report.insights_folded += folded


#: The parts, in the order one sweep runs them.
PARTS = (_schedules, _stalled, _overdue, _expired_waits, _lost_children, _child_runs, _flow, _notify, _retention,
         _fold_counts, _fold_insights)


class SweepThread(threading.Thread):
    """Runs the sweep every ``PGBUS_SWEEP_INTERVAL`` in the background (inside each worker)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(name="pgbus-sweep", daemon=True)
        self.engine = engine
        self.stopping = threading.Event()

    def run(self) -> None:
        interval = self.engine.settings.sweep_interval.total_seconds()
        while not self.stopping.wait(interval):
            try:
                report = sweep(self.engine)
                if report.total():
                    log.info("pgbus sweep: %s", report)
            except Exception as exc:  # PostgreSQL down: try again next interval
                reporting.report(exc, "sweep", engine=self.engine)
                log.exception("pgbus sweep failed; retrying in %ss", interval)

    def stop(self) -> None:
        self.stopping.set()

