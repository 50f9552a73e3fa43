"""Flow control in the runner: a claim takes the slots and the rate start its step needs, or the
step waits in line; what a given-back slot woke is sent after commit; a rate's wake-up.

docs/flow-control.md. The SQL functions of migration 0017 do the taking, the giving back (triggers
on the holders' rows, so no code path can skip it) and the line (highest priority, then oldest);
this module computes what a step needs from its class, calls them and sends the jobs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from .. import db
from ..db import Transaction
from ..definition import StepSpec
from .rows import Row, load_class, record_event
from .scheduling import priority_of, step_job

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow


@dataclass(frozen=True)
class Need:
    """One concurrency slot a step attempt needs: of limit ``name`` for ``key``, ``kind`` "run"
    (held by the run) or "step" (held by the attempt)."""

    name: str
    key: str
    capacity: int
    kind: str


def limited(klass: type[Workflow], spec: StepSpec) -> bool:
    """Whether a claim of ``spec`` has anything to take (its class's limit, its own limit or rate)."""
    return klass.concurrency is not None or spec.concurrency is not None or spec.rate is not None


def needs(klass: type[Workflow], spec: StepSpec, run: Row, instance: Callable[[], Workflow]) -> list[Need]:
    """The slots a claim of ``spec`` in ``run`` takes: the class's limit (its key as stored at start,
    or computed now for a run started before the class declared it), then the step's."""
    found = []
    if klass.concurrency is not None:
        name = klass.limit_name or klass.workflow_name
        key = run["limit_key"] if run["limit_name"] == name else klass.concurrency.key_of(instance())
        found.append(Need(name, key, klass.concurrency.capacity, "run"))
    if spec.concurrency is not None:
        assert spec.concurrency.name is not None  # named by Workflow.__init_subclass__
        found.append(Need(spec.concurrency.name, spec.concurrency.key_of(instance()), spec.concurrency.capacity,
                          "step"))
    return found


def take(engine: Engine, tx: Transaction, run: Row, step_id: int, klass: type[Workflow], spec: StepSpec,
         instance: Callable[[], Workflow]) -> tuple[bool, datetime | None]:
    """Take what a due step needs before its claim, under its run's lock: ``(True, started)`` when
    it may run (``started``: its rate's start, to be its started_at), ``(False, None)`` when it was
    put in line (its run now waits; nothing else to do for this job). A key callable that raises
    raises :class:`~pgbus_flask.errors.InvalidInput` before anything is written."""
    watch(engine, tx)
    priority = priority_of(klass, spec, run["priority"])
    wanted = needs(klass, spec, run, instance)
    if wanted:
        busy = db.fetch_one(tx.conn, "take_slots", (
            step_id, run["workflow_id"], [n.name for n in wanted], [n.key for n in wanted],
            [n.capacity for n in wanted], [n.kind for n in wanted], priority))
        assert busy is not None
        if busy["busy"] is not None:
            name, key = busy["busy"]
            record_event(tx, run["workflow_id"], "slot_waiting", "system", step=_step_of(run, step_id),
                         details={"limit": name, "key": key})
            return False, None
    if spec.rate is None:
        return True, None
    rate = spec.rate
    assert rate.name is not None
    woken = run["claim_blocked_since"] is not None and run["claim_blocked_on"] is None
    got = db.fetch_one(tx.conn, "take_rate", (step_id, run["workflow_id"], rate.name, rate.count,
                                              rate.per.total_seconds(), priority, woken))
    assert got is not None
    if got["started"] is not None:
        return True, got["started"]
    if got["wake_new"]:
        tx.after_commit(partial(engine.send_rate_wake, rate.name, engine.settings.queue, got["wake_at"]))
    record_event(tx, run["workflow_id"], "slot_waiting", "system", step=_step_of(run, step_id),
                 details={"rate": rate.name, "until": got["wake_at"]})
    return False, None


def _step_of(run: Row, step_id: int) -> Row:
    return {"id": step_id, "step_name": run["claim_step"], "attempt": run["claim_attempt"]}


def watch(engine: Engine, tx: Transaction) -> None:
    """Send, once ``tx`` commits, the steps that slots given back in it woke (see the module)."""
    tx.watch_woken(partial(send_woken, engine))


def send_woken(engine: Engine, step_ids: list[int]) -> None:
    """Send the jobs of woken steps (after the commit that woke them). A failure to send leaves them
    to the sweep's overdue part, like any step whose job was lost."""
    with engine.db.reading() as conn:
        rows = db.fetch_all(conn, "woken_steps", (step_ids,))
    engine.send_steps([step_job(engine, load_class(engine, row["workflow_class"]), row) for row in rows])


def wake_rate(engine: Engine, name: str) -> int:
    """A rate's wake-up (its RQ job, or the sweep's for one whose job was lost): send as many of its
    waiters as the window has room for, and the next wake-up while some wait. Returns how many."""
    with engine.db.transaction() as tx:
        row = db.fetch_one(tx.conn, "wake_rate", (name,))
        assert row is not None
        woken, next_at = list(row["woken"] or []), row["next_at"]
        if woken:
            tx.after_commit(partial(send_woken, engine, woken))
        if next_at is not None:
            tx.after_commit(partial(engine.send_rate_wake, name, engine.settings.queue, next_at))
    return len(woken)


def declared(classes: list[type[Workflow]]) -> dict[tuple[str, str], tuple[int, float | None]]:
    """Every limit and rate ``classes`` declare: (kind, name) to (capacity, window in seconds)."""
    found: dict[tuple[str, str], tuple[int, float | None]] = {}
    for klass in classes:
        if klass.concurrency is not None:
            found[("run", klass.limit_name or klass.workflow_name)] = (klass.concurrency.capacity, None)
        for spec in klass.steps:
            if spec.concurrency is not None and spec.concurrency.name:
                found[("step", spec.concurrency.name)] = (spec.concurrency.capacity, None)
            if spec.rate is not None and spec.rate.name:
                found[("rate", spec.rate.name)] = (spec.rate.count, spec.rate.per.total_seconds())
    return found


def declare(engine: Engine, classes: list[type[Workflow]]) -> None:
    """Store the limits and rates ``classes`` declare where they changed (the sweep, each time: a
    deploy that raised a capacity frees slots for the waiting runs without waiting for a claim)."""
    found = declared(classes)
    if not found or engine.sweep_cursors.get("declared_limits") == found:
        return  # stored already by this process (a person's change to the rows is the next claim's)
    keys = list(found)
    with engine.db.transaction() as tx:
        db.run(tx.conn, "declare_limits", ([name for _, name in keys], [kind for kind, _ in keys],
                                           [found[k][0] for k in keys], [found[k][1] for k in keys]))
    engine.sweep_cursors["declared_limits"] = found


def regrant(engine: Engine, lines: list[tuple[str, str]]) -> int:
    """Give the free slots of these (limit, key) lines to their waiters (the sweep: a capacity raised,
    a waiter a grant skipped while another transaction held it). Returns how many were woken."""
    woken = 0
    for name, key in lines:
        with engine.db.transaction() as tx:
            watch(engine, tx)
            row = db.fetch_one(tx.conn, "regrant_slots", {"name": name, "key": key})
            woken += int(row["woken"]) if row else 0
    return woken

