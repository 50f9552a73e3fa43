"""The stored schedules: what the sweep starts, and the reads and verbs on them.

The sweep's part (:func:`sweep_part`) first brings ``pgbus_schedules`` in line with
the classes it registers (:func:`sync`): a class seen for the first time gets a row
whose next tick is the first after now, so nothing is started for the past; a
changed cron, interval or timezone resets the next tick from now; a class no longer
declared keeps its row, marked, and is never started. Then it starts each due tick
(:func:`start_due`) in a transaction of its own, under the schedule's row lock: the
run through the runner's ``start`` on that transaction's connection, with the
idempotency key ``schedule:<class>:<tick ISO UTC>``, and the row's last and next tick
moved. Two sweepers, or a sweep after a crash, never start a tick twice: the row lock
orders them and the key would return the same run anyway. Its cost follows what is
due: one read of the schedules table (a row per class) and one transaction a tick.

The verbs :func:`pause` and :func:`resume` (``(engine, name, actor, reason)``, audited
in ``pgbus_schedule_events``) are what the Python API, the CLI, the dashboard and the
JSON API call. Reads never write: a class registered here that no sweep has stored
yet is listed with ``stored`` False.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg.types.json import Jsonb

from . import db, payload, reporting, runner, states
from .db import Transaction
from .definition import registry
from .errors import KeyBusy, ScheduleConflict, UnknownSchedule
from .schedule import TICK_KWARG, ScheduleSpec, tick_key

if TYPE_CHECKING:
    from .engine import Engine
    from .workflow import Workflow

log = logging.getLogger("pgbus_flask")

#: Ticks of one schedule a sweep starts at most ("all" after a long downtime: the rest on the next sweeps).
TICKS_PER_SCHEDULE = 50
#: Due schedules a sweep handles at most.
DUE_LIMIT = 500
#: The actor of the runs a schedule starts, and of the sweep's own schedule events.
ACTOR = "schedule"
SYSTEM = "system"
#: Audit events a page shows at most.
EVENTS_LIMIT = 100

#: The parts of a declaration whose change resets the next tick (the missed policy and the
#: arguments apply from the next tick on).
TIMING = ("kind", "schedule", "timezone")


@dataclass(frozen=True)
class Schedule:
    """One schedule as stored (``stored`` False: registered here, not yet written by a sweep)."""

    workflow_class: str
    kind: str
    schedule: str
    timezone: str
    missed: str
    arguments: dict[str, Any]
    next_tick: datetime | None
    last_tick: datetime | None = None
    last_run_id: Any = None
    last_run_status: str | None = None
    paused_at: datetime | None = None
    paused_by: str | None = None
    paused_reason: str | None = None
    undeclared_at: datetime | None = None
    stored: bool = True
    #: PostgreSQL's now() when this was read (for "in 5 minutes").
    read_at: datetime | None = field(default=None, compare=False)

    @property
    def paused(self) -> bool:
        return self.paused_at is not None

    @property
    def declared(self) -> bool:
        """False once the sweeper's classes no longer declare it: shown, never started."""
        return self.undeclared_at is None

    @property
    def interval(self) -> timedelta | None:
        return timedelta(seconds=int(self.schedule)) if self.kind == "interval" else None

    @property
    def available_actions(self) -> list[str]:
        return ["resume"] if self.paused else ["pause"]

    def to_json(self) -> dict[str, Any]:
        """The JSON API's form (times as ISO strings by the caller's encoder)."""
        return {
            "workflow_class": self.workflow_class, "kind": self.kind, "schedule": self.schedule,
            "interval_seconds": int(self.schedule) if self.kind == "interval" else None,
            "timezone": self.timezone, "missed": self.missed, "arguments": self.arguments,
            "next_tick": self.next_tick, "last_tick": self.last_tick, "last_run_id": self.last_run_id,
            "last_run_status": self.last_run_status, "paused": self.paused, "paused_at": self.paused_at,
            "paused_by": self.paused_by, "paused_reason": self.paused_reason, "declared": self.declared,
            "undeclared_at": self.undeclared_at, "stored": self.stored, "available_actions": self.available_actions,
        }


def spec_of_row(row: dict[str, Any]) -> ScheduleSpec:
    """The timing a stored row declares (enough to compute its ticks without the class)."""
    interval = timedelta(seconds=int(row["schedule"])) if row["kind"] == "interval" else None
    return ScheduleSpec(row["kind"], row["schedule"], row["timezone"], row["missed"], {}, interval)


def declared_here() -> dict[str, ScheduleSpec]:
    """The schedules of the classes this process registers, by class name."""
    return {name: klass.schedule_spec for name, klass in sorted(registry().items())
            if klass.schedule_spec is not None}


def _from_row(row: dict[str, Any]) -> Schedule:
    return Schedule(
        workflow_class=row["workflow_class"], kind=row["kind"], schedule=row["schedule"], timezone=row["timezone"],
        missed=row["missed"], arguments=payload.from_json(row["arguments"]), next_tick=row["next_tick"],
        last_tick=row["last_tick"], last_run_id=row["last_run_id"], last_run_status=row.get("last_run_status"),
        paused_at=row["paused_at"], paused_by=row["paused_by"], paused_reason=row["paused_reason"],
        undeclared_at=row["undeclared_at"], read_at=row.get("db_now") or row.get("tx_now"))


def _from_spec(name: str, spec: ScheduleSpec, now: datetime) -> Schedule:
    return Schedule(workflow_class=name, kind=spec.kind, schedule=spec.text, timezone=spec.timezone,
                    missed=spec.missed, arguments=dict(spec.kwargs), next_tick=spec.next_after(now), stored=False,
                    read_at=now)


# -- reads ----------------------------------------------------------------------------------------


def list_schedules(engine: Engine) -> list[Schedule]:
    """Every stored schedule by class name, with the classes registered here that no sweep stored yet."""
    with engine.db.reading() as conn:
        rows = db.fetch_all(conn, "schedules_list")
    now = rows[0]["db_now"]
    found = {row["workflow_class"]: _from_row(row) for row in rows if row["workflow_class"] is not None}
    for name, spec in declared_here().items():
        if name not in found:
            found[name] = _from_spec(name, spec, now)
    return [found[name] for name in sorted(found)]


def get_schedule(engine: Engine, name: str) -> Schedule:
    """One schedule (UnknownSchedule when neither stored nor registered here)."""
    _check_name(name)
    for item in list_schedules(engine):
        if item.workflow_class == name:
            return item
    raise UnknownSchedule(name, [s.workflow_class for s in list_schedules(engine)])


def schedule_events(engine: Engine, name: str, limit: int = EVENTS_LIMIT) -> list[dict[str, Any]]:
    """A schedule's audit trail, newest first."""
    _check_name(name)
    with engine.db.reading() as conn:
        rows = db.fetch_all(conn, "schedule_events", (name, limit))
    return [dict(row) for row in rows]


# -- verbs ----------------------------------------------------------------------------------------


def pause(engine: Engine, name: str, actor: str = "app", reason: str | None = None) -> Schedule:
    """Pause a schedule: the sweep starts nothing for it until it is resumed. ScheduleConflict
    (nothing changed) when it is paused already; UnknownSchedule for a class with no schedule."""
    runner.check_who(actor, reason)
    _check_name(name)
    with engine.db.transaction() as tx:
        row = _lock_or_store(engine, tx, name)
        if row["paused_at"] is not None:
            raise ScheduleConflict(name, "pause", paused=True)
        paused = db.fetch_one(tx, "schedule_pause", (runner.cap(actor, states.ACTOR_LIMIT), reason, name))
        assert paused is not None  # locked above, and not paused
        _event(tx, name, "paused", actor, reason)
    return _from_row(paused)


def resume(engine: Engine, name: str, actor: str = "app", reason: str | None = None) -> Schedule:
    """Resume a paused schedule. What was missed while paused follows its missed policy: "skip"
    starts none of it (the next tick is the first after now), "all" starts every tick missed
    (from the sweep's next pass, at most TICKS_PER_SCHEDULE a sweep). ScheduleConflict (nothing
    changed) when it is not paused."""
    runner.check_who(actor, reason)
    _check_name(name)
    with engine.db.transaction() as tx:
        row = _lock_or_store(engine, tx, name)
        if row["paused_at"] is None:
            raise ScheduleConflict(name, "resume", paused=False)
        next_tick = row["next_tick"]
        if row["missed"] == "skip":
            next_tick = spec_of_row(row).next_after(row["tx_now"])
        resumed = db.fetch_one(tx, "schedule_resume", (next_tick, name))
        assert resumed is not None  # locked above, and paused
        _event(tx, name, "resumed", actor, reason, {"missed": row["missed"], "next_tick": next_tick})
    return _from_row(resumed)


def _check_name(name: Any) -> None:
    payload.check_text(name, "workflow class", max_bytes=states.NAME_LIMIT, allow_newlines=False)


def _lock_or_store(engine: Engine, tx: Transaction, name: str) -> dict[str, Any]:
    """The schedule's row, locked; a class registered here that no sweep stored yet is stored
    first (in this transaction: a verb refused later leaves nothing behind)."""
    row = db.fetch_one(tx, "schedule_lock", (name,))
    if row is None:
        spec = declared_here().get(name)
        if spec is None:
            with engine.db.reading() as conn:
                stored = [r["workflow_class"] for r in db.fetch_all(conn, "schedule_names")]
            raise UnknownSchedule(name, set(stored) | set(declared_here()))
        _store(tx, name, spec, _tx_now(tx))
        row = db.fetch_one(tx, "schedule_lock", (name,))
        assert row is not None
    return row  # type: ignore[no-any-return]


def _tx_now(tx: Transaction) -> datetime:
    row = db.fetch_one(tx, "now")
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]


def _event(tx: Transaction, name: str, event: str, actor: str, reason: str | None = None,
           details: dict[str, Any] | None = None) -> None:
    db.run(tx, "schedule_event", (name, event, runner.cap(actor, states.ACTOR_LIMIT), reason,
                                  Jsonb(payload.to_json(details or {}))))


def _store(tx: Transaction, name: str, spec: ScheduleSpec, now: datetime) -> bool:
    """A row for a class seen for the first time, its next tick the first after ``now``."""
    values = {"name": name, **spec.describe(), "next_tick": spec.next_after(now)}
    values["arguments"] = Jsonb(values["arguments"])
    inserted = db.fetch_one(tx, "schedule_insert", values)
    if inserted is not None:
        _event(tx, name, "declared", SYSTEM, details=_declaration(spec.describe()))
    return inserted is not None


def _declaration(values: dict[str, Any]) -> dict[str, Any]:
    return {key: values[key] for key in (*TIMING, "missed")}


# -- the sweep's part -----------------------------------------------------------------------------


@dataclass
class SchedulePass:
    """What one sweep did with schedules: rows written by :func:`sync`, runs started, errors."""

    synced: int = 0
    started: int = 0
    errors: list[str] = field(default_factory=list)


def sweep_part(engine: Engine) -> SchedulePass:
    """Sync the stored schedules with the registered classes, then start the due ticks."""
    result = SchedulePass()
    result.synced = sync(engine)
    result.started = start_due(engine, errors=result.errors)
    return result


def sync(engine: Engine) -> int:
    """Bring ``pgbus_schedules`` in line with the classes this process registers; returns the
    rows written (0 in the steady state: one read, no write)."""
    declared = declared_here()
    with engine.db.connection() as conn:
        rows = db.fetch_all(conn, "schedules_stored")
    stored = {row["workflow_class"]: row for row in rows if row["workflow_class"] is not None}
    todo = sorted({name for name, spec in declared.items() if _differs(stored.get(name), spec)}
                  | {name for name, row in stored.items() if name not in declared and row["undeclared_at"] is None})
    if not todo:
        return 0
    written = 0
    with engine.db.transaction() as tx:
        for name in todo:  # in name order: two sweepers lock the rows in the same order
            row = db.fetch_one(tx, "schedule_lock", (name,))
            spec = declared.get(name)
            now = _tx_now(tx) if row is None else row["tx_now"]
            if spec is None:
                if row is not None and row["undeclared_at"] is None:
                    db.run(tx, "schedule_undeclare", (name,))
                    _event(tx, name, "undeclared", SYSTEM)
                    written += 1
            elif row is None:
                written += _store(tx, name, spec, now)
            elif _differs(row, spec):
                _redeclare(tx, row, spec, now)
                written += 1
    return written


def _differs(row: dict[str, Any] | None, spec: ScheduleSpec) -> bool:
    if row is None or row["undeclared_at"] is not None:
        return True
    wanted = spec.describe()
    return any(row[key] != wanted[key] for key in (*TIMING, "missed", "arguments"))


def _redeclare(tx: Transaction, row: dict[str, Any], spec: ScheduleSpec, now: datetime) -> None:
    """A stored schedule whose class declares it otherwise now, or declares it again: a new
    timing (or a class back after being undeclared) starts from now; a new missed policy or
    new arguments apply from the next tick."""
    wanted = spec.describe()
    name = row["workflow_class"]
    restart = row["undeclared_at"] is not None or any(row[key] != wanted[key] for key in TIMING)
    next_tick = spec.next_after(now) if restart else row["next_tick"]
    db.run(tx, "schedule_redeclare",
           (wanted["kind"], wanted["schedule"], wanted["timezone"], wanted["missed"], Jsonb(wanted["arguments"]),
            next_tick, name))
    details = {"before": _declaration(row), "after": _declaration(wanted), "next_tick": next_tick}
    if row["arguments"] != wanted["arguments"]:
        details["arguments_changed"] = True
    _event(tx, name, "declared" if row["undeclared_at"] is not None else "changed", SYSTEM, details=details)


def start_due(engine: Engine, *, errors: list[str] | None = None) -> int:
    """Start every due tick of the schedules this process registers (at most TICKS_PER_SCHEDULE
    a schedule); returns the runs started. A schedule that fails is logged (and noted in
    ``errors``) and tried again next sweep; the others go on."""
    with engine.db.connection() as conn:
        due = [row["workflow_class"] for row in db.fetch_all(conn, "schedules_due", (DUE_LIMIT,))]
    classes = registry()
    started = 0
    for name in due:
        klass = classes.get(name)
        if klass is None or klass.schedule_spec is None:
            continue  # another sweeper's class: this one cannot start it
        try:
            for _ in range(TICKS_PER_SCHEDULE):
                ticked = _start_tick(engine, klass)
                if ticked is None:
                    break
                ran, more = ticked
                started += ran
                if not more:
                    break
        except Exception as exc:
            reporting.report(exc, "sweep", engine=engine, workflow_class=name)
            log.exception("pgbus sweep: the schedule of %s could not start its tick", name)
            if errors is not None:
                errors.append(f"schedule {name}: {exc}")
    return started


def _start_tick(engine: Engine, klass: type[Workflow]) -> tuple[bool, bool] | None:
    """Start the schedule's due tick in one transaction; None when nothing is due (another
    sweeper started it, or it was paused meanwhile), else whether it started a run (its class's
    limit may refuse it: on_busy="refuse") and whether another tick is due already."""
    spec = klass.schedule_spec
    assert spec is not None
    name = klass.workflow_name
    with engine.db.transaction() as tx:
        row = db.fetch_one(tx, "schedule_lock", (name,))
        if (row is None or row["paused_at"] is not None or row["undeclared_at"] is not None
                or row["next_tick"] > row["tx_now"] or _differs(row, spec)):
            return None  # not due, or declared otherwise than here: the sync decides first
        now = row["tx_now"]
        tick = row["next_tick"]
        if spec.missed == "skip":  # after downtime, only the latest missed tick
            tick = max(tick, spec.latest_at_or_before(now) or tick)
        next_tick = spec.next_after(tick)
        try:
            started = runner.start(engine, klass, (), {**spec.kwargs, TICK_KWARG: tick}, subject=None,
                                   idempotency_key=tick_key(name, tick), actor=ACTOR, conn=tx.conn)
        except KeyBusy as busy:  # on_busy="refuse": this tick is skipped, the next one is due as usual
            log.info("pgbus sweep: the tick %s of %s was not started: %s", tick, name, busy)
            db.run(tx, "schedule_ticked", (tick, None, next_tick, name))
            return False, next_tick <= now
        db.run(tx, "schedule_ticked", (tick, started.workflow_id, next_tick, name))
    return True, next_tick <= now
