"""Recurring starts: the sweep starts one run per due tick, never twice, as each class declares.

Scheduled classes are declared inside each test and unregistered after it (a class
left registered would be started by every later test's sweep). Time is not waited
for: a test moves the stored next tick back, as a downtime or a pause would leave it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from pgbus_flask import PgBus, ScheduleConflict, UnknownSchedule, Workflow, step
from pgbus_flask.definition import REGISTRY, registry, scoped_registry
from pgbus_flask.engine import Engine
from pgbus_flask.errors import DefinitionError, InvalidInput
from pgbus_flask.schedule import ScheduleSpec
from pgbus_flask.schedules import TICKS_PER_SCHEDULE, start_due
from pgbus_flask.sweep import sweep
from tests.support import work
from tests.support.schedule_helpers import Declare, _tick_step

UTC = timezone.utc


def q(engine: Engine, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with engine.db.connection() as conn:
        cur = conn.execute(query.encode(), params)
        return cur.fetchall() if cur.description else []


def stored(engine: Engine, name: str) -> dict[str, Any]:
    with engine.db.connection() as conn:
        cur = conn.execute("SELECT * FROM pgbus_schedules WHERE workflow_class = %s", (name,))
        columns = [c.name for c in cur.description or ()]
        row = cur.fetchone()
    assert row is not None, f"no stored schedule for {name}"
    return dict(zip(columns, row, strict=True))


def runs_by_key(engine: Engine, name: str) -> dict[str, int]:
    """How many runs each idempotency key of ``name`` has."""
    return {key: n for key, n in q(engine, "SELECT idempotency_key, count(*) FROM pgbus_workflows"
                                           " WHERE workflow_class = %s GROUP BY 1", name)}


def ticks_of(engine: Engine, name: str) -> list[datetime]:
    keys = runs_by_key(engine, name)
    assert all(n == 1 for n in keys.values()), f"a tick started twice: {keys}"
    return sorted(datetime.fromisoformat(key.split(":", 2)[2]) for key in keys)


def db_now(engine: Engine) -> datetime:
    return q(engine, "SELECT now()")[0][0]  # type: ignore[no-any-return]


def back(engine: Engine, name: str, by: timedelta) -> None:
    """As if the sweep had not run for ``by``: the stored next tick moved back."""
    q(engine, "UPDATE pgbus_schedules SET next_tick = next_tick - %s WHERE workflow_class = %s", by, name)


# -- declaration -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("attrs", "message"), [
    ({"schedule": "0 2 * *"}, "schedule '0 2 * *' is not a cron expression cronsim reads (Wrong number of fields"),
    ({"schedule": "61 * * * *"}, "(Bad minute;"),
    ({"schedule": "0 0 30 2 *"}, "(Bad day-of-month;"),
    ({"schedule": timedelta(0)}, "a timedelta schedule must be a positive whole number of seconds"),
    ({"schedule": timedelta(seconds=-5)}, "a timedelta schedule must be a positive whole number of seconds"),
    ({"schedule": timedelta(milliseconds=1500)}, "a timedelta schedule must be a positive whole number of seconds"),
    ({"schedule": 300}, "schedule must be a cron string such as '0 2 * * *' or a positive timedelta, got int 300"),
    ({"schedule": "0 2 * * *", "schedule_timezone": "Europe/Atlantis"},
     "schedule_timezone 'Europe/Atlantis' is not a timezone zoneinfo knows"),
    ({"schedule": "0 2 * * *", "schedule_timezone": "../../etc/passwd"}, "is not a timezone zoneinfo knows"),
    ({"schedule": timedelta(minutes=5), "schedule_timezone": "Europe/Berlin"},
     "schedule_timezone is for cron schedules"),
    ({"schedule": "@daily", "schedule_missed": "catch_up"}, "schedule_missed must be one of ('skip', 'all')"),
    ({"schedule": "@daily", "schedule_kwargs": {"ids": {1, 2}}}, "schedule_kwargs['ids'] is a set"),
    ({"schedule": "@daily", "schedule_kwargs": ["a"]}, "schedule_kwargs must be a dict with string keys"),
    ({"schedule": "@daily", "schedule_kwargs": {"tick": 1}}, "schedule_kwargs cannot hold 'tick'"),
    ({"schedule_timezone": "Europe/Berlin"}, "schedule_timezone needs schedule"),
    ({"schedule": "0 2 * * *\x00"}, "is not a cron expression"),
])
def test_a_bad_declaration_is_refused_when_the_class_is_defined(attrs: dict[str, Any], message: str) -> None:
    with pytest.raises(DefinitionError, match=r"^Bad: ") as raised:
        type("Bad", (Workflow,), {**attrs, "record": step(_tick_step)})
    assert message in str(raised.value)
    assert "Bad" not in REGISTRY


def test_good_declarations(declare: Declare) -> None:
    nightly = declare("Nightly", "0 2 * * *", schedule_timezone="Europe/Berlin", schedule_kwargs={"report": "sales"})
    assert nightly.schedule_spec == ScheduleSpec("cron", "0 2 * * *", "Europe/Berlin", "skip", {"report": "sales"})
    every = declare("Every5", timedelta(minutes=5), schedule_missed="all")
    assert every.schedule_spec is not None
    assert (every.schedule_spec.kind, every.schedule_spec.text) == ("interval", "300")
    hourly = declare("Hourly", "@hourly")
    assert hourly.schedule_spec is not None and hourly.schedule_spec.cron == "0 * * * *"
    assert declare("Unscheduled", None).schedule_spec is None


def test_interval_ticks_are_whole_multiples_since_the_epoch() -> None:
    spec = ScheduleSpec("interval", "300", interval=timedelta(minutes=5))
    at = datetime(2026, 12, 3, 15, 7, 12, 345, tzinfo=UTC)
    assert spec.next_after(at) == datetime(2026, 12, 3, 15, 10, tzinfo=UTC)
    assert spec.latest_at_or_before(at) == datetime(2026, 12, 3, 15, 5, tzinfo=UTC)
    on = datetime(2026, 12, 3, 15, 10, tzinfo=UTC)
    assert (spec.next_after(on), spec.latest_at_or_before(on)) == (datetime(2026, 12, 3, 15, 15, tzinfo=UTC), on)


def test_cron_ticks_across_dst_follow_cronsim_debian_rules() -> None:
    """cronsim documents Debian cron's handling: a time the clocks skip runs when they jump (02:30 on the
    spring-forward night runs at 03:00), a time they repeat runs once (the first 02:30), and jobs of
    hourly granularity run every real hour."""
    berlin = ZoneInfo("Europe/Berlin")
    nightly = ScheduleSpec("cron", "30 2 * * *", "Europe/Berlin")

    def ticks(spec: ScheduleSpec, start: datetime, n: int) -> list[datetime]:
        found, at = [], start
        for _ in range(n):
            at = spec.next_after(at)
            found.append(at)
        return found

    spring = ticks(nightly, datetime(2026, 3, 28, 12, tzinfo=berlin), 3)
    assert [t.astimezone(berlin).isoformat() for t in spring] == [
        "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"]
    autumn = ticks(nightly, datetime(2026, 10, 24, 12, tzinfo=berlin), 3)
    assert [t.astimezone(berlin).isoformat() for t in autumn] == [
        "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00", "2026-10-27T02:30:00+01:00"]
    hourly = ticks(ScheduleSpec("cron", "0 * * * *", "Europe/Berlin"), datetime(2026, 10, 25, 0, 30, tzinfo=UTC), 3)
    assert [t.isoformat() for t in hourly] == [  # 02:00 CEST, 02:00 CET, 03:00 CET: every real hour
        "2026-10-25T01:00:00+00:00", "2026-10-25T02:00:00+00:00", "2026-10-25T03:00:00+00:00"]
    # The latest tick at or before a moment agrees with the forward ticks, even just after a change.
    assert nightly.latest_at_or_before(datetime(2026, 10, 26, 12, tzinfo=UTC)) == autumn[1]
    assert nightly.latest_at_or_before(datetime(2026, 3, 29, 1, 0, tzinfo=UTC)) == spring[0]
    assert nightly.latest_at_or_before(datetime(2026, 3, 29, 0, 59, 59, tzinfo=UTC)) == datetime(
        2026, 3, 28, 1, 30, tzinfo=UTC)


# -- the sweep ----------------------------------------------------------------------------------------


def test_the_first_sweep_starts_nothing_then_each_due_tick_starts_one_run(engine: Engine, declare: Declare) -> None:
    declare("EveryMinute", timedelta(minutes=1), schedule_kwargs={"report": "sales"})
    first = sweep(engine)
    assert (first.schedules_synced, first.schedules_started) == (1, 0)
    row = stored(engine, "EveryMinute")
    now = db_now(engine)
    assert now < row["next_tick"] <= now + timedelta(minutes=1) and row["next_tick"].second == 0
    assert row["last_tick"] is None and runs_by_key(engine, "EveryMinute") == {}
    assert sweep(engine).schedules_started == 0, "nothing is due yet"

    due = row["next_tick"] - timedelta(minutes=1)
    back(engine, "EveryMinute", timedelta(minutes=1))  # the tick now due is the last one at or before now
    report = sweep(engine)
    assert (report.schedules_synced, report.schedules_started, report.errors) == (0, 1, [])
    assert runs_by_key(engine, "EveryMinute") == {f"schedule:EveryMinute:{due.isoformat()}": 1}
    after = stored(engine, "EveryMinute")
    assert after["last_tick"] == due and after["next_tick"] == row["next_tick"]
    assert sweep(engine).schedules_started == 0 and len(runs_by_key(engine, "EveryMinute")) == 1

    run = PgBus().run(after["last_run_id"])
    assert run.row["started_by"] == "schedule"
    work(engine)
    run = PgBus().run(after["last_run_id"])
    assert run.status == "finished"
    assert run.outputs()["record"] == {"tick": due, "kwargs": {"report": "sales"}}


def test_missed_skip_starts_only_the_latest_tick(engine: Engine, declare: Declare) -> None:
    declare("SkipsMissed", timedelta(minutes=1))
    sweep(engine)
    back(engine, "SkipsMissed", timedelta(minutes=30))  # a downtime of half an hour
    before = db_now(engine)
    assert sweep(engine).schedules_started == 1
    [tick] = ticks_of(engine, "SkipsMissed")
    assert tick == before.replace(second=0, microsecond=0) or tick == before.replace(second=0, microsecond=0) + \
        timedelta(minutes=1), "the latest tick at or before now"
    assert stored(engine, "SkipsMissed")["next_tick"] > db_now(engine)
    assert sweep(engine).schedules_started == 0


def test_missed_all_starts_every_tick_bounded_per_sweep(engine: Engine, declare: Declare) -> None:
    declare("CatchesUp", timedelta(seconds=10), schedule_missed="all")
    sweep(engine)
    first_due = stored(engine, "CatchesUp")["next_tick"] - timedelta(seconds=10 * 120)
    back(engine, "CatchesUp", timedelta(seconds=10 * 120))  # 120 ticks missed, and the one due soon
    counts = []
    while True:
        started = sweep(engine).schedules_started
        if not started:
            break
        counts.append(started)
    assert counts[:2] == [TICKS_PER_SCHEDULE, TICKS_PER_SCHEDULE], "one sweep starts at most this many"
    ticks = ticks_of(engine, "CatchesUp")  # each exactly once
    assert ticks[0] == first_due
    assert ticks == [first_due + timedelta(seconds=10 * i) for i in range(len(ticks))], "no tick left out"
    assert ticks[-1] <= db_now(engine) < ticks[-1] + timedelta(seconds=10)
    assert stored(engine, "CatchesUp")["last_tick"] == ticks[-1]


def test_a_paused_schedule_starts_nothing_and_resume_follows_the_missed_policy(engine: Engine,
                                                                             declare: Declare) -> None:
    bus = PgBus()
    declare("Skipper", timedelta(minutes=1))
    declare("Keeper", timedelta(minutes=1), schedule_missed="all")
    sweep(engine)
    for name in ("Skipper", "Keeper"):
        paused = bus.pause_schedule(name, actor="cli:alice", reason="supplier API down")
        assert paused.paused and (paused.paused_by, paused.paused_reason) == ("cli:alice", "supplier API down")
        back(engine, name, timedelta(minutes=3))
    assert sweep(engine).schedules_started == 0
    assert runs_by_key(engine, "Skipper") == runs_by_key(engine, "Keeper") == {}

    events = len(bus.schedule_events("Skipper"))
    with pytest.raises(ScheduleConflict, match="cannot pause the schedule of Skipper: it is paused; nothing was"):
        bus.pause_schedule("Skipper", actor="cli:bob", reason="again")
    assert len(bus.schedule_events("Skipper")) == events and bus.schedule("Skipper").paused_by == "cli:alice"

    kept = stored(engine, "Keeper")["next_tick"]
    skipped = bus.resume_schedule("Skipper", actor="cli:alice", reason="API back")
    assert skipped.next_tick is not None and skipped.next_tick > db_now(engine), "skip: nothing of the pause"
    resumed = bus.resume_schedule("Keeper", actor="cli:alice", reason="API back")
    assert resumed.next_tick == kept, "all: every tick missed while paused"
    with pytest.raises(ScheduleConflict, match="cannot resume the schedule of Keeper: it is not paused"):
        bus.resume_schedule("Keeper")

    sweep(engine)
    assert runs_by_key(engine, "Skipper") == {}
    assert len(ticks_of(engine, "Keeper")) in (3, 4)  # the three missed (and one more if a minute turned)
    trail = bus.schedule_events("Skipper")
    assert [(e["event"], e["actor"], e["reason"]) for e in trail] == [
        ("resumed", "cli:alice", "API back"), ("paused", "cli:alice", "supplier API down"),
        ("declared", "system", None)]


def test_a_scoped_registry_forgets_the_classes_declared_in_it() -> None:
    before = registry()
    with scoped_registry():
        class ForgottenAfter(Workflow):
            schedule = timedelta(minutes=1)

            @step
            def only(self) -> None: ...

        assert registry()["ForgottenAfter"] is ForgottenAfter
    assert registry() == before
    assert "ForgottenAfter" not in REGISTRY


def test_unknown_and_undeclared_schedules(engine: Engine, declare: Declare) -> None:
    bus = PgBus()
    declare("Staying", "0 3 * * *", schedule_timezone="Asia/Tokyo")
    with scoped_registry():  # Leaving is declared until the block ends
        declare("Leaving", timedelta(minutes=1))
        assert [(s.workflow_class, s.stored) for s in bus.schedules()] == [("Leaving", False), ("Staying", False)]
        with pytest.raises(UnknownSchedule,
                           match=r"no schedule for workflow class 'Nope' \(schedules: Leaving, Staying\)"):
            bus.pause_schedule("Nope")
        with pytest.raises(InvalidInput, match="workflow class"):
            bus.pause_schedule("bad\x00name")
        sweep(engine)
    assert "Leaving" not in registry() and "Staying" in registry()
    back(engine, "Leaving", timedelta(minutes=5))
    report = sweep(engine)
    assert (report.schedules_synced, report.schedules_started) == (1, 0), "no longer declared: never started"
    leaving = bus.schedule("Leaving")
    assert leaving.stored and not leaving.declared and leaving.undeclared_at is not None
    assert bus.schedule_events("Leaving")[0]["event"] == "undeclared"
    assert sweep(engine).schedules_synced == 0, "marked once"
    # A verb still works on it (a class that comes back starts paused, say).
    assert bus.pause_schedule("Leaving", actor="cli:alice").paused


def test_a_changed_declaration_restarts_its_ticks_from_now(engine: Engine, declare: Declare) -> None:
    bus = PgBus()
    declare("Reports", timedelta(minutes=1))
    sweep(engine)
    back(engine, "Reports", timedelta(hours=1))
    declare("Reports", "*/5 * * * *", schedule_timezone="Europe/Berlin", schedule_kwargs={"v": 2})
    report = sweep(engine)
    assert (report.schedules_synced, report.schedules_started) == (1, 0)
    row = stored(engine, "Reports")
    assert (row["kind"], row["schedule"], row["timezone"]) == ("cron", "*/5 * * * *", "Europe/Berlin")
    assert row["next_tick"] > db_now(engine) and row["next_tick"].minute % 5 == 0
    changed = bus.schedule_events("Reports")[0]
    assert changed["event"] == "changed" and changed["details"]["before"]["schedule"] == "60"
    assert changed["details"]["after"]["schedule"] == "*/5 * * * *" and changed["details"]["arguments_changed"]
    # The missed policy alone applies from the next tick on: the next tick stays.
    declare("Reports", "*/5 * * * *", schedule_timezone="Europe/Berlin", schedule_kwargs={"v": 2},
            schedule_missed="all")
    assert sweep(engine).schedules_synced == 1 and stored(engine, "Reports")["next_tick"] == row["next_tick"]


def test_a_cron_schedule_in_a_timezone_across_dst(engine: Engine, declare: Declare) -> None:
    declare("Nightly", "30 2 * * *", schedule_timezone="Europe/Berlin", schedule_missed="all")
    sweep(engine)
    q(engine, "UPDATE pgbus_schedules SET next_tick = '2026-10-24 00:30+00' WHERE workflow_class = 'Nightly'")
    assert sweep(engine).schedules_started >= 4  # a night a run, up to TICKS_PER_SCHEDULE of them
    berlin = ZoneInfo("Europe/Berlin")
    assert [t.astimezone(berlin).isoformat() for t in ticks_of(engine, "Nightly")[:4]] == [
        "2026-10-24T02:30:00+02:00", "2026-10-25T02:30:00+02:00",  # once on the night the clocks go back
        "2026-10-26T02:30:00+01:00", "2026-10-27T02:30:00+01:00"]


def test_two_sweeps_racing_start_each_tick_once(engine: Engine, declare: Declare) -> None:
    declare("Raced", timedelta(seconds=10), schedule_missed="all")
    declare("RacedSkip", timedelta(seconds=10))
    sweep(engine)
    back(engine, "Raced", timedelta(seconds=10 * 40))
    back(engine, "RacedSkip", timedelta(seconds=10 * 40))
    results: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def race(part: Callable[[Engine], Any]) -> None:
        try:
            barrier.wait(10)
            results.append(part(engine))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    # Two with the sweep's advisory lock (one of them sweeps), two without it (the row lock orders them).
    threads = [threading.Thread(target=race, args=(part,)) for part in (sweep, sweep, start_due, start_due)]
    began = db_now(engine)
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    ticks = ticks_of(engine, "Raced")  # fails on any tick started twice
    assert len(ticks) >= 40 and ticks == [ticks[0] + timedelta(seconds=10 * i) for i in range(len(ticks))]
    # Skipping the missed ticks starts only the latest one due; a racer that runs after the next 10 s
    # boundary (a slow machine) rightly starts that new tick too, once.
    skipped = ticks_of(engine, "RacedSkip")
    assert skipped[0] > began - timedelta(seconds=10), "none of the 40 missed ticks but the latest"
    assert skipped == [skipped[0] + timedelta(seconds=10 * i) for i in range(len(skipped))]
    assert skipped[-1] <= db_now(engine)
    with engine.db.connection() as conn:
        events = conn.execute("SELECT count(*) FROM pgbus_schedule_events WHERE workflow_class = 'Raced'").fetchone()
    assert events is not None and events[0] == 1, "declared once"


def test_a_tick_refused_by_its_class_limit_is_skipped_not_retried_every_sweep(engine: Engine,
                                                                              declare: Declare) -> None:
    from pgbus_flask import Limit

    declare("OneAtATime", timedelta(minutes=1), concurrency=Limit(1, on_busy="refuse"))
    sweep(engine)
    back(engine, "OneAtATime", timedelta(minutes=1))
    assert sweep(engine).schedules_started == 1  # its run is ready: the key is busy from now on
    first = stored(engine, "OneAtATime")
    back(engine, "OneAtATime", timedelta(minutes=1))
    report = sweep(engine)
    assert (report.schedules_started, report.errors) == (0, [])
    skipped = stored(engine, "OneAtATime")
    assert skipped["last_run_id"] is None and skipped["last_tick"] == first["next_tick"] - timedelta(minutes=1)
    assert len(runs_by_key(engine, "OneAtATime")) == 1
    assert sweep(engine).errors == []
