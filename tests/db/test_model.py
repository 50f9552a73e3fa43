"""A model-based test of the engine: hypothesis drives runs through every path at random.

A :class:`~hypothesis.stateful.RuleBasedStateMachine` works on the real
PostgreSQL and Redis of the other tests. Its rules start runs of the classes in
``tests/model_workflows.py`` (plain, reattempting, waiting on a signal with a
deadline or without one, fanning out with a child that may fail, pausing
itself), run queued jobs in this process (all of them or a few; every job sent
once, twice or three times), deliver a step or a fan-out child again by hand,
claim an attempt and record its outcome later (verbs and the sweep run in
between), send signals (idempotency keys repeat), move stored deadlines into
the past instead of sleeping (wait deadlines, stall deadlines, due times,
waiting-since), lose every queued job (a Redis restart), run the sweep, and
call every verb with random arguments whether the run allows it or not.

After every rule it checks, over every run in the database:

* a refused verb or start (any :class:`~pgbus_flask.PgbusError`) changed no row
  of any ``pgbus_*`` table and sent no job;
* ``available_actions`` lists exactly the verbs that succeed: the verb a rule
  just called succeeded exactly when it was listed (``ActionNotAllowed`` when it
  was not), and the ``probe_actions`` rule tries all nine in transactions it
  rolls back;
* a run has at most one open step, and it is its latest;
* a run's status agrees with its latest step (``STATUS_AGREES`` below, from
  docs/architecture.md, "The rows"), ``paused_at`` is set while paused and ``finished_at``
  exactly while terminal, and a finished run ended on its class's last step;
* per step name at most one completed attempt in each cycle of a run (a cycle
  starts with the run and again at each ``rerun`` and ``resume_at``, the two
  verbs that may run a completed step again), and a finished run's last cycle
  completed or skipped each of its steps exactly once;
* every status change has its audit event: replaying the audit trail alone gives
  the run's status, and every step row has the events of what happened to it;
* no run is stuck without a reason the attention view shows: the runs
  ``queries.stuck_reason_counts`` and the attention groups list are exactly the
  paused runs (stalled / paused_error / paused_manual by their latest step:
  failed with StepStalled, failed otherwise, or not failed), the ready runs
  whose step is due longer than the stall threshold and the runs waiting
  without a deadline (on a signal or a fan-out batch) longer than the waiting
  threshold; every
  other ongoing run moves on by itself: its scheduled step has a job in Redis
  (unless the test lost it), its signal wait has no pending signal it could
  take, its open batch has a job for each pending child, and no job crashed;
* what a person must see is stored right: each run's attention columns (the
  stuck reason it has or will have once its time passes, since when, its latest
  step and that step's error class) are what its row and latest step say now,
  and ``pgbus_run_counts`` sums to the runs by class and status (ongoing ones by current step; paused ones by
  attention group);
* signals and batches are consistent (claimed and consumed ones name a step of
  the run, at most one claimed per step; batch counts match their children).

How long it runs: by default a CI-sized count (``DEFAULT`` below, about a
minute). For more::

    HYPOTHESIS_PROFILE=long python -m pytest tests/db/test_model.py    # LONG: 300 examples of up to 60 rules
    PGBUS_MODEL_EXAMPLES=2000 PGBUS_MODEL_STEPS=80 python -m pytest tests/db/test_model.py

(with ``PGBUS_TEST_DATABASE_URL`` / ``PGBUS_TEST_REDIS_URL`` as for the other
tests). A failure prints the shortest sequence of rules hypothesis found; the
example database under ``.hypothesis/`` replays it on the next run. Engine bugs
it found are kept as plain tests in tests/db/test_model_findings.py.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg.rows import dict_row
from rq.job import Job, JobStatus
from rq.registry import FailedJobRegistry

from pgbus_flask import (
    ActionNotAllowed,
    PgbusError,
    StepNotDefined,
    SubjectConflict,
    attention,
    payload,
    queries,
    runner,
    states,
    verbs,
)
from pgbus_flask.engine import Engine
from pgbus_flask.handle import Run
from pgbus_flask.jobs import run_child, run_step
from pgbus_flask.sweep import sweep
from pgbus_flask.testing import TABLES, empty
from pgbus_flask.workflow import PauseRequested, ReattemptRequested, Workflow
from tests.model_workflows import CLASSES, CONTENDING, MODEL_CAPACITY, SIGNAL
from tests.support import QuietWorker

Row = dict[str, Any]

SETTINGS: dict[str, Any] = {
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    "deadline": None,
    "print_blob": True,
}
DEFAULT = settings(max_examples=25, stateful_step_count=30, **SETTINGS)  # type: ignore[arg-type]
LONG = settings(max_examples=300, stateful_step_count=60, **SETTINGS)  # type: ignore[arg-type]
settings.register_profile("pgbus-model", DEFAULT)
settings.register_profile("pgbus-model-long", LONG)


def chosen_settings() -> settings:
    base = LONG if os.environ.get("HYPOTHESIS_PROFILE", "").endswith("long") else DEFAULT
    examples, steps = os.environ.get("PGBUS_MODEL_EXAMPLES"), os.environ.get("PGBUS_MODEL_STEPS")
    if examples or steps:
        base = settings(base, max_examples=int(examples or base.max_examples),
                        stateful_step_count=int(steps or base.stateful_step_count))
    return base


#: The latest step's statuses each run status allows (docs/architecture.md, "The rows": ready = its current step
#: is scheduled, running = an attempt in progress, waiting = parked on a signal or a batch; a paused
#: run keeps whatever its step was doing or how it ended; a terminal run has no open step).
STATUS_AGREES: dict[str, tuple[str, ...]] = {
    "ready": ("scheduled",),
    "running": ("in_progress",),
    "waiting": ("waiting", "scheduled"),  # scheduled: in line for a slot (blocked_on)
    "paused": ("scheduled", "in_progress", "waiting", "completed", "failed", "skipped", "cancelled"),
    "finished": ("completed", "skipped"),
    "cancelled": ("completed", "failed", "skipped", "cancelled"),
}

#: Held slots whose holder does not hold them, and holders that hold no slot (docs/flow-control.md).
LEAKED_SLOTS = """
SELECT 'slot', t.limit_name, t.limit_key FROM pgbus_limit_slots t
LEFT JOIN pgbus_workflows w ON w.workflow_id = t.holder_run
LEFT JOIN pgbus_workflow_steps s ON s.id = t.holder_step
WHERE (t.holder_run IS NOT NULL AND (w.workflow_id IS NULL OR NOT w.holds_slot OR w.status NOT IN ('ready', 'running')))
   OR (t.holder_step IS NOT NULL AND (s.id IS NULL OR NOT s.holds_slot OR s.status NOT IN ('scheduled', 'in_progress')))
UNION ALL
SELECT 'run', w.workflow_class, w.workflow_id::text FROM pgbus_workflows w
WHERE w.holds_slot AND NOT EXISTS (SELECT 1 FROM pgbus_limit_slots t WHERE t.holder_run = w.workflow_id)
UNION ALL
SELECT 'step', s.workflow_class, s.id::text FROM pgbus_workflow_steps s
WHERE s.holds_slot AND NOT EXISTS (SELECT 1 FROM pgbus_limit_slots t WHERE t.holder_step = s.id)
"""
#: Each line (limit, key): slots held, and runs waiting in it.
LINES = """
SELECT k.name, k.key,
  (SELECT count(*) FROM pgbus_limit_slots t WHERE t.limit_name = k.name AND t.limit_key = k.key
     AND (t.holder_run IS NOT NULL OR t.holder_step IS NOT NULL)),
  (SELECT count(*) FROM pgbus_workflow_steps s JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id
   WHERE s.blocked_on = k.name AND s.blocked_key = k.key AND s.status = 'scheduled' AND w.status = 'waiting')
FROM (SELECT DISTINCT limit_name AS name, limit_key AS key FROM pgbus_limit_slots
      UNION SELECT DISTINCT blocked_on, blocked_key FROM pgbus_workflow_steps WHERE blocked_key IS NOT NULL) k
"""

ACTORS = ("app", "cli:alice", "dashboard:bob", "mcp", "system")
#: Reasons by the name the failing examples print.
REASONS: dict[str, str | None] = {
    "none": None, "short": "checking", "at_limit": "x" * states.REASON_LIMIT,
    "too_long": "x" * (states.REASON_LIMIT + 1), "unicode": "déjà vu ✓",
}


class Rollback(Exception):
    """Raised to roll back a probing transaction."""


def klass_of(name: str) -> type[Workflow]:
    return next(k for k in CLASSES if k.workflow_name == name)


def work(engine: Engine, max_jobs: int | None) -> None:
    worker = QuietWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
    worker.work(burst=True, logging_level="WARNING", max_jobs=max_jobs)


def finish_claim(engine: Engine, claim: runner.Claim) -> None:
    """What a step job does after its claim: the step's code, then its outcome."""
    arguments = payload.from_json(claim.run["arguments"]) or {}
    context = claim.klass(
        engine=engine, workflow_id=claim.run["workflow_id"], args=arguments.get("args", ()),
        kwargs=arguments.get("kwargs", {}), subject=None, attempt=claim.step["attempt"],
        step_name=claim.step["step_name"], outputs=claim.outputs, received_signal=claim.signal,
    )
    try:
        result = claim.spec.func(context)
    except (PauseRequested, ReattemptRequested) as request:
        runner.record_outcome(engine, claim, request=request)
    except Exception as exc:
        runner.record_outcome(engine, claim, error=exc)
    else:
        runner.record_outcome(engine, claim, result=result)


# -- what the database holds ---------------------------------------------------------


class World:
    """Every row of every pgbus table at one moment, with the database's now()."""

    def __init__(self, engine: Engine) -> None:
        with engine.db.connection() as conn:
            cur = conn.cursor(row_factory=dict_row)
            self.now: datetime = cur.execute("SELECT now() AS now").fetchone()["now"]  # type: ignore[index]
            self.runs: list[Row] = cur.execute("SELECT * FROM pgbus_workflows ORDER BY id").fetchall()
            self.steps: list[Row] = cur.execute("SELECT * FROM pgbus_workflow_steps ORDER BY id").fetchall()
            self.events: list[Row] = cur.execute("SELECT * FROM pgbus_workflow_events ORDER BY id").fetchall()
            self.signals: list[Row] = cur.execute("SELECT * FROM pgbus_workflow_signals ORDER BY id").fetchall()
            self.batches: list[Row] = cur.execute("SELECT * FROM pgbus_batches ORDER BY id").fetchall()
            self.children: list[Row] = cur.execute(
                "SELECT * FROM pgbus_batch_children ORDER BY batch_id, position").fetchall()
            self.counts: list[Row] = cur.execute(
                "SELECT workflow_class, status, step, attention_reason, error_class, sum(runs) AS runs"
                " FROM pgbus_run_counts GROUP BY 1, 2, 3, 4, 5 HAVING sum(runs) <> 0").fetchall()
        self.steps_of: dict[Any, list[Row]] = {r["workflow_id"]: [] for r in self.runs}
        for s in self.steps:
            self.steps_of[s["workflow_id"]].append(s)
        self.events_of: dict[Any, list[Row]] = {r["workflow_id"]: [] for r in self.runs}
        for e in self.events:
            self.events_of[e["workflow_id"]].append(e)
        self.step_by_id = {s["id"]: s for s in self.steps}

    def latest(self, run: Row) -> Row | None:
        found = self.steps_of[run["workflow_id"]]
        return found[-1] if found else None


def snapshot(engine: Engine) -> Any:
    """Every row of every pgbus table, and every job key in Redis."""
    with engine.db.connection() as conn:
        rows = {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall() for table in TABLES}
    return rows, sorted(engine.redis.keys("rq:job:*"))


def replay_status(events: list[Row]) -> str | None:
    """A run's status from its audit trail alone (docs/architecture.md: every transition writes its event)."""
    status: str | None = None
    for e in events:
        event, details = e["event"], e["details"] or {}
        if event in ("started", "step_scheduled", "rerun"):
            status = "ready"
        elif event == "step_started":
            status = "running"
        elif event in ("step_waiting", "fan_out_opened") and status == "running":
            status = "waiting"  # (an attempt of a run paused meanwhile parks its step; the run stays paused)
        elif event in ("paused", "cancelled", "finished"):
            status = event
        elif event == "resumed":
            plan = details.get("plan")
            status = {"keep_waiting": "waiting", "let_finish": "running", "finish": status}.get(plan, "ready")
        elif event == "signal_claimed" and status == "waiting":
            status = "ready"  # a signal woke the parked step
        elif event == "slot_waiting" and status == "ready":
            status = "waiting"  # its claim found no free slot: in line
        elif (event == "slot_granted" and status == "waiting") or (
                event == "wait_timed_out" and details.get("on_timeout") == "continue"):
            status = "ready"
    return status


def cycle_starts(events: list[Row]) -> list[int]:
    """Ids of the first step row of each cycle after the first: the step a rerun or resume_at scheduled."""
    starts: list[int] = []
    pending = False
    for e in events:
        if e["event"] == "rerun" or (e["event"] == "resumed" and (e["details"] or {}).get("plan") == "resume_at"):
            pending = True
        elif e["event"] == "step_scheduled" and pending:
            starts.append(e["step_id"])
            pending = False
    return starts


def paused_reason(latest: Row) -> str:
    """The stuck reason of a paused run, as the reference has it: its latest step failed (stalled, or
    with any other error) or not; a step that asked for its own pause or reattempt did not fail."""
    if latest["status"] == "failed" and latest["error_class"] == states.STALLED_ERROR:
        return "stalled"
    if latest["status"] == "failed" and latest["outcome"] not in states.REQUESTED_OUTCOMES:
        return "paused_error"
    return "paused_manual"


def expected_stuck(world: World, engine: Engine) -> set[tuple[Any, str, str]]:
    """(workflow id, reason, step) of each run the stuck reasons of docs/operate.md name."""
    found: set[tuple[Any, str, str]] = set()
    stall = engine.settings.stall_threshold
    waiting = engine.settings.waiting_threshold
    for run in world.runs:
        latest = world.latest(run)
        assert latest is not None
        wid, status = run["workflow_id"], run["status"]
        if status == "paused":
            found.add((wid, paused_reason(latest), latest["step_name"]))
        elif status == "ready" and latest["status"] == "scheduled" and latest["scheduled_at"] < world.now - stall:
            found.add((wid, "overdue", latest["step_name"]))
        elif (status == "waiting" and waiting is not None and latest["status"] == "waiting"
              and latest["timeout_at"] is None and latest["waiting_since"] < world.now - waiting):
            found.add((wid, "waiting_overdue", latest["step_name"]))
        elif (status == "waiting" and waiting is not None and latest["status"] == "scheduled"
              and latest["blocked_since"] < world.now - waiting):
            found.add((wid, "waiting_overdue", latest["step_name"]))  # in line for a slot too long
    return found


def expected_attention(run: Row, latest: Row) -> tuple[Any, ...]:
    """(reason, since, step id, error class) a run's attention columns must hold, from its row and
    latest step: the stuck reason it has, or will have once ``since`` is older than its threshold."""
    status = run["status"]
    reason, since = None, None
    if status == "paused":
        reason, since = paused_reason(latest), run["paused_at"]
    elif status == "ready" and latest["status"] == "scheduled":
        reason, since = "overdue", latest["scheduled_at"]
    elif status == "waiting" and latest["status"] == "waiting" and latest["timeout_at"] is None:
        reason, since = "waiting_overdue", latest["waiting_since"]  # on a signal or on a fan-out batch
    elif status == "waiting" and latest["status"] == "scheduled":
        reason, since = "waiting_overdue", latest["blocked_since"]  # in line for a slot
    if reason is None:
        return (None, None, None, None)
    return (reason, since, latest["id"], latest["error_class"])


def stored_attention(run: Row) -> tuple[Any, ...]:
    return (run["attention_reason"], run["attention_since"], run["attention_step_id"], run["attention_error_class"])


def expected_counts(world: World) -> Counter[tuple[str, ...]]:
    """Runs by class and status, ongoing ones also by current step (0008), paused ones also by
    stuck reason and error class or ''."""
    counts: Counter[tuple[str, ...]] = Counter()
    for run in world.runs:
        paused = run["status"] == "paused"
        ongoing = run["status"] in ("ready", "running", "waiting", "paused")
        counts[(run["workflow_class"], run["status"], run["current_step"] if ongoing else "",
                (run["attention_reason"] or "") if paused else "",
                (run["attention_error_class"] or "") if paused else "")] += 1
    return counts


def job_statuses(engine: Engine, ids: list[str]) -> dict[str, Any]:
    jobs = Job.fetch_many(ids, connection=engine.redis) if ids else []
    return {jid: job.get_status(refresh=False) if job is not None else None
            for jid, job in zip(ids, jobs, strict=True)}


# -- the state machine -----------------------------------------------------------------

#: What the examples did (printed with -s; for judging how far the rules reach).
STATS: Counter[str] = Counter()

#: Which run a rule acts on: half the time the one the last rule touched, so that sequences on
#: one run (claim, pause, record the outcome, skip) come up as often as spread ones.
index = st.just(0) | st.integers(min_value=0, max_value=1_000)
later = st.sampled_from([timedelta(days=-1), timedelta(minutes=-10), timedelta(hours=1), timedelta(days=2)])


class EngineModel(RuleBasedStateMachine):
    engine: Engine  # set by the test before it runs the machine

    def __init__(self) -> None:
        super().__init__()
        engine = self.engine
        with engine.db.connection() as conn:
            empty(conn)
        engine.redis.flushdb()
        engine.deliveries = 1
        self.runs: list[Any] = []
        self.claims: list[runner.Claim] = []
        self.lost_jobs: set[str] = set()

    # -- helpers -------------------------------------------------------------------

    def pick(self, i: int) -> Any:
        """Run number ``i`` (0: the run the last rule touched), now the touched one."""
        wid = self.runs.pop(i % len(self.runs))
        self.runs.insert(0, wid)
        return wid

    @contextmanager
    def unchanged_if_refused(self, what: str) -> Iterator[None]:
        """A refusal (any PgbusError) must leave every table and the queues as they were."""
        before = snapshot(self.engine)
        try:
            yield
        except PgbusError:
            after = snapshot(self.engine)
            assert after == before, f"{what} was refused but changed something"
            raise

    # -- starting runs ---------------------------------------------------------------

    run_kwargs = st.fixed_dictionaries({
        "fail_until": st.integers(0, 3), "ask": st.booleans(), "tidy_fails": st.booleans(),
        "close_fails": st.booleans(), "n": st.integers(1, 3), "fail_at": st.sampled_from([None, None, 0, 2]),
        "policy": st.sampled_from(["fail", "ignore"]),
    })

    @initialize(klasses=st.lists(st.sampled_from(CLASSES), min_size=1, max_size=3), kwargs=run_kwargs)
    def first_runs(self, klasses: list[type[Workflow]], kwargs: dict[str, Any]) -> None:
        for klass in klasses:
            self.runs.append(klass.start(bus=self.engine, **kwargs).workflow_id)

    @rule(klass=st.sampled_from(CLASSES), subject=st.sampled_from([None, None, 1, 2]),
          key=st.sampled_from([None, None, "k1", "k2"]), kwargs=run_kwargs, actor=st.sampled_from(ACTORS))
    def start(self, klass: type[Workflow], subject: int | None, key: str | None, kwargs: dict[str, Any],
              actor: str) -> None:
        engine = self.engine
        with engine.db.connection() as conn:
            existing = conn.execute(
                "SELECT workflow_id FROM pgbus_workflows WHERE workflow_class = %s AND idempotency_key = %s",
                (klass.workflow_name, key)).fetchone()
            busy = conn.execute(
                "SELECT workflow_id FROM pgbus_workflows WHERE workflow_class = %s AND subject_type = 'Order'"
                " AND subject_id = %s AND status = ANY(%s)",
                (klass.workflow_name, str(subject), list(states.ONGOING))).fetchone()
        before = snapshot(engine)
        try:
            with self.unchanged_if_refused("start"):
                run = klass.start(bus=engine, subject=("Order", subject) if subject else None,
                                  idempotency_key=key, actor=actor, **kwargs)
        except SubjectConflict:
            assert existing is None and subject is not None and busy is not None, "unexpected SubjectConflict"
            return
        if existing is not None:
            assert run.workflow_id == existing[0], "the same idempotency key started another run"
            assert snapshot(engine) == before, "a start with a known idempotency key wrote something"
            return
        assert busy is None or subject is None, "a second ongoing run for the same subject started"
        # (a run of a class with a limit whose key is busy goes in line at start: docs/flow-control.md)
        assert run.status in (("ready", "waiting") if klass.concurrency else ("ready",)), run.status
        assert run.current_step == klass.steps[0].name
        self.runs.insert(0, run.workflow_id)

    @rule(klass=st.sampled_from(CONTENDING), n=st.integers(2, 3), fail_until=st.sampled_from([0, 0, 1]))
    def start_contending(self, klass: type[Workflow], n: int, fail_until: int) -> None:
        """Runs that contend for one slot (docs/flow-control.md): the later ones wait in line."""
        for _ in range(n):
            self.runs.insert(0, klass.start(bus=self.engine, fail_until=fail_until).workflow_id)

    # -- running jobs --------------------------------------------------------------------

    @rule(max_jobs=st.sampled_from([None, 1, 1, 2, 5]))
    def run_jobs(self, max_jobs: int | None) -> None:
        """A worker in this process takes some (or all) queued jobs."""
        work(self.engine, max_jobs)

    @rule(max_jobs=st.sampled_from([None, 1, 3]))
    def run_more_jobs(self, max_jobs: int | None) -> None:
        work(self.engine, max_jobs)

    @rule(deliveries=st.sampled_from([1, 2, 3]))
    def set_deliveries(self, deliveries: int) -> None:
        """Every job sent from now on is delivered this many times."""
        self.engine.deliveries = deliveries

    @precondition(lambda self: self.runs)
    @rule(i=index, how=st.sampled_from(["step", "earlier_step", "child"]), position=st.integers(0, 3))
    def deliver_by_hand(self, i: int, how: str, position: int) -> None:
        """A step job or fan-out child delivered (again) outside the queue."""
        wid = self.pick(i)
        world = World(self.engine)
        steps = world.steps_of[wid]
        if how == "step":
            run_step(steps[-1]["id"])
        elif how == "earlier_step":
            run_step(steps[max(0, len(steps) - 1 - position)]["id"])
        else:
            batches = [b["id"] for b in world.batches if b["workflow_id"] == wid]
            if batches:
                run_child(batches[-1], position)

    @precondition(lambda self: self.runs)
    @rule(i=index)
    def claim(self, i: int) -> None:
        """Claim a run's latest step now and record its outcome in a later ``finish``: a step job in
        flight while other rules (verbs, the sweep) run."""
        latest = World(self.engine).steps_of[self.pick(i)][-1]
        found = runner.claim_attempt(self.engine, latest["id"], f"model-{latest['id']}")
        if found is not None:
            self.claims.insert(0, found)

    @precondition(lambda self: self.claims)
    @rule(i=index)
    def finish(self, i: int) -> None:
        finish_claim(self.engine, self.claims.pop(i % len(self.claims)))

    @precondition(lambda self: self.runs)
    @rule(i=index)
    def lose_jobs(self, i: int) -> None:
        """Redis lost a run's queued jobs (steps and fan-out children): the sweep resends them once overdue."""
        wid = self.pick(i)
        world = World(self.engine)
        batches = {b["id"] for b in world.batches if b["workflow_id"] == wid}
        lost = {s["job_id"] for s in world.steps_of[wid] if s["job_id"]}
        lost |= {c["job_id"] for c in world.children if c["batch_id"] in batches}
        self.lost_jobs |= lost
        keys = [f"rq:job:{jid}{suffix}" for jid in lost for suffix in ("", "-1", "-2")]
        if keys:
            self.engine.redis.delete(*keys)

    # -- the clock -------------------------------------------------------------------------

    @precondition(lambda self: self.runs)
    @rule(i=index, what=st.sampled_from(["wait_deadline", "stall_deadline", "due_long_ago", "waiting_long"]))
    def pass_deadline(self, i: int, what: str) -> None:
        """Move one of a run's stored times into the past instead of sleeping until then."""
        statement = {
            "wait_deadline": "UPDATE pgbus_workflow_steps SET timeout_at = now() - interval '1 second'"
                             " WHERE workflow_id = %(wid)s AND status = 'waiting' AND timeout_at IS NOT NULL",
            "stall_deadline": "UPDATE pgbus_workflow_steps SET stall_at = now() - interval '1 second'"
                              " WHERE workflow_id = %(wid)s AND status = 'in_progress'",
            "due_long_ago": "UPDATE pgbus_workflow_steps SET scheduled_at = scheduled_at - interval '1 day',"
                            " enqueued_at = enqueued_at - interval '1 day'"
                            " WHERE workflow_id = %(wid)s AND status = 'scheduled'",
            "waiting_long": "UPDATE pgbus_workflow_steps SET waiting_since = waiting_since - interval '1 day',"
                            " blocked_since = blocked_since - interval '1 day'"
                            " WHERE workflow_id = %(wid)s AND status IN ('waiting', 'scheduled')",
        }[what]
        wid = self.pick(i)
        with self.engine.db.connection() as conn:
            conn.execute(statement, {"wid": wid})
            # The run's stored copy of the time moves with it, as if the time had passed.
            attention.refresh(conn, [wid])
            if what == "due_long_ago":
                conn.execute("UPDATE pgbus_batch_children SET enqueued_at = enqueued_at - interval '1 day'"
                             " WHERE status = 'pending' AND batch_id IN"
                             " (SELECT id FROM pgbus_batches WHERE workflow_id = %s)", (wid,))

    @rule()
    def run_sweep(self) -> None:
        report = sweep(self.engine)
        assert report.ran and not report.errors, report

    # -- verbs ---------------------------------------------------------------------------------

    # (Two rules, each with one argument: hypothesis then picks a verb about as often as it
    # runs jobs, rather than rarely.)
    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def act(self, data: st.DataObject) -> None:
        """A verb the run allows now (mostly) or any verb, with random arguments, valid or not."""
        self.apply_verb(data)

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def act_again(self, data: st.DataObject) -> None:
        self.apply_verb(data)

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def send_signal(self, data: st.DataObject) -> None:
        """A signal (its idempotency key often one sent before), whatever the run is doing."""
        self.apply_verb(data, "signal")

    def apply_verb(self, data: st.DataObject, verb: str | None = None) -> None:
        engine, wid = self.engine, self.pick(data.draw(index, label="run"))
        before = Run(engine, wid)
        allowed = before.available_actions
        if verb is None:
            verb = data.draw(st.sampled_from(allowed) | st.sampled_from(verbs.ACTIONS) if allowed
                             else st.sampled_from(verbs.ACTIONS), label="verb")
        actor = data.draw(st.sampled_from(ACTORS), label="actor")
        reason = REASONS[data.draw(st.sampled_from(list(REASONS)), label="reason")]
        klass = klass_of(before.workflow_class)
        names = [s.name for s in klass.steps]
        params: dict[str, Any] = {}
        valid = reason is None or len(reason) <= states.REASON_LIMIT  # arguments checked before the run's status
        if verb == "resume_at":
            params["step_name"] = data.draw(st.sampled_from([*names, "nope"]), label="step")
        elif verb == "rerun":
            params["step_name"] = data.draw(st.sampled_from([None, *names, "nope"]), label="step")
        elif verb == "reschedule":
            naive = data.draw(st.booleans(), label="naive")
            at = datetime.now(timezone.utc) + data.draw(later, label="at")
            params["at"] = at.replace(tzinfo=None) if naive else at
            valid = valid and not naive
        elif verb == "signal":
            params["name"] = data.draw(st.sampled_from([SIGNAL, SIGNAL, "other", ""]), label="name")
            params["data"] = data.draw(st.sampled_from([None, 1, {"ok": True}]), label="payload")
            params["idempotency_key"] = data.draw(st.sampled_from([None, "s1", "s2"]), label="key")
            valid = valid and params["name"] != ""
        call: Callable[..., Any] = runner.send_signal if verb == "signal" else getattr(runner, verb)
        duplicate = False
        if verb == "signal" and params["idempotency_key"]:
            duplicate = any(s["idempotency_key"] == params["idempotency_key"] for s in before.signals())
        pre = snapshot(engine) if duplicate else None
        try:
            with self.unchanged_if_refused(verb):
                result = call(engine, wid, **params, actor=actor, reason=reason)
        except ActionNotAllowed:
            assert verb not in allowed, f"{verb} refused although available_actions listed it: {allowed}"
            STATS[f"{verb} refused from {before.status}"] += 1
            return
        except (StepNotDefined, SubjectConflict):
            assert verb in allowed, f"{verb} reached its step check although not allowed: {allowed}"
            return
        except PgbusError:
            assert not valid, f"{verb} refused valid arguments {params}"
            return
        assert valid, f"{verb} accepted invalid arguments {params}"
        assert verb in allowed, f"{verb} succeeded although available_actions did not list it: {allowed}"
        STATS[f"{verb} done from {before.status}"] += 1
        self.check_effect(before, verb, params, result, duplicate, pre)

    def check_effect(self, before: Run, verb: str, params: dict[str, Any], result: Any, duplicate: bool,
                     pre: Any) -> None:
        """What the verb table of docs/operate.md says each verb does."""
        run = Run(self.engine, before.workflow_id)
        latest = run.latest_step
        assert latest is not None
        if verb == "pause":
            assert run.status == "paused"
        elif verb == "cancel":
            assert run.status == "cancelled"
        elif verb == "upgrade":
            assert not run.definition_outdated
        elif verb in ("resume_at", "rerun"):
            klass = klass_of(run.workflow_class)
            step = params["step_name"] or klass.steps[0].name
            assert (run.status, latest["status"], latest["step_name"]) == ("ready", "scheduled", step)
        elif verb == "run_now":
            assert run.status == "ready" and latest["status"] == "scheduled"
            assert latest["scheduled_at"] <= run.row["db_now"]
        elif verb == "reschedule":
            assert run.status == "ready" and latest["scheduled_at"] == params["at"]
        elif verb == "skip":
            assert run.status in ("ready", "finished"), run.status
            assert any(s["status"] == "skipped" for s in run.steps())
        elif verb == "resume":
            expected = {"retry": ("ready",), "continue": ("ready",), "finish": ("finished",), "run": ("ready",),
                        "keep_waiting": ("waiting", "ready"), "let_finish": ("running",)}[result.action]
            assert run.status in expected, (result, run.status)
        elif verb == "signal":
            assert result.duplicate_delivery == duplicate
            if duplicate:
                assert snapshot(self.engine) == pre, "a duplicate signal stored something"

    @precondition(lambda self: self.runs)
    @rule(i=index)
    def probe_actions(self, i: int) -> None:
        """Try every verb in a transaction rolled back: exactly the listed ones may pass their check."""
        engine, wid = self.engine, self.pick(i)
        run = Run(engine, wid)
        step = run.current_step
        tries: dict[str, Callable[[], Any]] = {
            "pause": lambda: runner.pause(engine, wid),
            "resume": lambda: runner.resume(engine, wid),
            "resume_at": lambda: runner.resume_at(engine, wid, step),
            "run_now": lambda: runner.run_now(engine, wid),
            "reschedule": lambda: runner.reschedule(engine, wid, datetime.now(timezone.utc) + timedelta(hours=3)),
            "skip": lambda: runner.skip(engine, wid),
            "rerun": lambda: runner.rerun(engine, wid),
            "cancel": lambda: runner.cancel(engine, wid),
            "signal": lambda: runner.send_signal(engine, wid, "probe"),
            "upgrade": lambda: runner.upgrade(engine, wid),
        }
        passed = []
        for verb in verbs.ACTIONS:
            try:
                with engine.db.transaction():
                    try:
                        tries[verb]()
                        passed.append(verb)
                    except SubjectConflict:
                        passed.append(verb)  # allowed; another run of the subject is ongoing
                    except ActionNotAllowed:
                        pass
                    raise Rollback
            except Rollback:
                pass
        assert passed == run.available_actions, f"verbs that pass {passed} != available_actions {run.available_actions}"

    def teardown(self) -> None:
        world = World(self.engine)
        for run in world.runs:
            STATS[f"run ended {run['workflow_class']} {run['status']}"] += 1
        for event in world.events:
            if event["event"] in ("slot_waiting", "slot_granted"):
                STATS[f"event {event['event']}"] += 1

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def engine_invariants(self) -> None:
        engine = self.engine
        world = World(engine)
        problems: list[str] = []
        for run in world.runs:
            where = f"run {run['workflow_id']} ({run['workflow_class']})"
            problems += [f"{where}: {p}" for p in self.run_problems(world, run)]
        problems += self.signal_and_batch_problems(world)
        stored = self.stored_attention_problems(world)
        if stored:  # seen only under a loaded CI, never replayed: say what else was going on
            stored.append(self.attention_witness(world))
        problems += stored
        problems += self.attention_problems(world)
        problems += self.job_problems(world)
        problems += self.slot_problems()
        assert not problems, "\n".join(problems)

    def run_problems(self, world: World, run: Row) -> list[str]:
        problems: list[str] = []
        wid, status = run["workflow_id"], run["status"]
        klass = klass_of(run["workflow_class"])
        steps, events = world.steps_of[wid], world.events_of[wid]
        if not steps:
            return ["has no step"]
        latest = steps[-1]
        # At most one open step, and it is the latest.
        open_steps = [s["id"] for s in steps if s["status"] in states.OPEN_STEP]
        if len(open_steps) > 1 or (open_steps and open_steps[0] != latest["id"]):
            problems.append(f"open steps {open_steps}, latest is {latest['id']}")
        # The run's status agrees with its latest step.
        if latest["status"] not in STATUS_AGREES[status]:
            problems.append(f"status {status} with latest step {latest['step_name']} {latest['status']}")
        if run["current_step"] != latest["step_name"]:
            problems.append(f"current_step {run['current_step']} but latest step is {latest['step_name']}")
        if status == "paused" and run["paused_at"] is None:
            problems.append("paused without paused_at")
        if (run["finished_at"] is not None) != (status in states.TERMINAL):
            problems.append(f"status {status} with finished_at {run['finished_at']}")
        # Audit: the trail alone gives the status; every step row has its events.
        if not events or events[0]["event"] != "started":
            problems.append("audit trail does not open with 'started'")
        replayed = replay_status(events)
        if replayed != status:
            problems.append(f"status {status} but its audit trail says {replayed}: "
                            f"{[e['event'] for e in events]}")
        problems += self.step_audit_problems(steps, events)
        # Completed attempts: at most one per step name per cycle.
        starts = cycle_starts(events)
        cycles: dict[tuple[int, str], list[int]] = {}
        for s in steps:
            if s["status"] == "completed":
                cycle = sum(1 for start in starts if start <= s["id"])
                cycles.setdefault((cycle, s["step_name"]), []).append(s["id"])
        for (cycle, name), ids in cycles.items():
            if len(ids) > 1:
                problems.append(f"step {name} completed {len(ids)} times in cycle {cycle}: attempts {ids}")
        if status == "finished":
            first = starts[-1] if starts else steps[0]["id"]
            last_cycle = [s for s in steps if s["id"] >= first]
            ended = [s["step_name"] for s in last_cycle if s["status"] in ("completed", "skipped")]
            names = [s.name for s in klass.steps]
            expect = names[names.index(last_cycle[0]["step_name"]):]
            if ended != expect:
                problems.append(f"finished having completed or skipped {ended} in its last cycle, not {expect}")
        return problems

    @staticmethod
    def step_audit_problems(steps: list[Row], events: list[Row]) -> list[str]:
        problems: list[str] = []
        by_step: dict[int, set[str]] = {}
        for e in events:
            if e["step_id"] is not None:
                by_step.setdefault(e["step_id"], set()).add(e["event"])
        for s in steps:
            have = by_step.get(s["id"], set())
            need: list[tuple[str, ...]] = []
            inserted_skipped = s["status"] == "skipped" and s["started_at"] is None and "step_scheduled" not in have
            if not inserted_skipped:
                need.append(("step_scheduled",))
            if s["started_at"] is not None:
                need.append(("step_started",))
            if s["waiting_since"] is not None:
                need.append(("step_waiting", "fan_out_opened"))
            need.append({
                "completed": ("step_completed",),
                "skipped": ("step_skipped",),
                "cancelled": ("cancelled", "resumed"),
                "failed": ("paused",) if s["outcome"] == "paused" else
                          ("step_reattempted",) if s["error_class"] is None else ("step_failed",),
            }.get(s["status"], ()))
            for options in need:
                if options and not have & set(options):
                    problems.append(f"step {s['step_name']} #{s['attempt']} ({s['status']}) has no "
                                    f"{' or '.join(options)} event (has {sorted(have)})")
        return problems

    @staticmethod
    def signal_and_batch_problems(world: World) -> list[str]:
        problems: list[str] = []
        claimed_per_step: Counter[tuple[Any, str]] = Counter()
        for sig in world.signals:
            if sig["status"] == "pending":
                continue
            step = world.step_by_id.get(sig["claimed_by_step_id"])
            if step is None or step["workflow_id"] != sig["workflow_id"]:
                problems.append(f"signal {sig['id']} {sig['status']} by no step of its run")
                continue
            if sig["status"] == "claimed":
                claimed_per_step[(sig["workflow_id"], step["step_name"])] += 1
                latest_same = [s for s in world.steps_of[sig["workflow_id"]] if s["step_name"] == step["step_name"]]
                if latest_same[-1]["status"] in ("completed", "skipped"):
                    problems.append(f"signal {sig['id']} still claimed by {step['step_name']}, which ended "
                                    f"{latest_same[-1]['status']}")
        problems += [f"run {wid}: {n} signals claimed by step {name}" for (wid, name), n in claimed_per_step.items()
                     if n > 1]
        runs = {r["workflow_id"]: r for r in world.runs}
        for run in world.runs:
            latest = world.latest(run)
            assert latest is not None
            if run["status"] == "waiting" and latest["batch_id"] is None and latest["status"] == "waiting":
                spec = klass_of(run["workflow_class"]).step_spec(latest["step_name"])
                if any(s["workflow_id"] == run["workflow_id"] and s["status"] == "pending"
                       and s["name"] == spec.wait_for for s in world.signals):
                    problems.append(f"run {run['workflow_id']} waits for {spec.wait_for} with one pending")
        for batch in world.batches:
            children = [c for c in world.children if c["batch_id"] == batch["id"]]
            done = sum(c["status"] == "done" for c in children)
            failed = sum(c["status"] == "failed" for c in children)
            if (batch["done"], batch["failed"], batch["total"]) != (done, failed, len(children)):
                problems.append(f"batch {batch['id']} counts {batch['done']}/{batch['failed']}/{batch['total']}"
                                f" but its children say {done}/{failed}/{len(children)}")
            step = world.step_by_id[batch["step_id"]]
            latest = world.latest(runs[batch["workflow_id"]])
            if batch["status"] == "open" and (step["status"] != "waiting" or latest is not step):
                problems.append(f"batch {batch['id']} open but its step is {step['status']}")
            if step["status"] == "waiting" and step["batch_id"] == batch["id"] and batch["status"] != "open":
                problems.append(f"step {step['id']} waits on batch {batch['id']}, which is finished")
        return problems

    @staticmethod
    def stored_attention_problems(world: World) -> list[str]:
        """The attention columns agree with the run's row and latest step; the counts with the runs."""
        problems: list[str] = []
        for run in world.runs:
            latest = world.latest(run)
            assert latest is not None
            want, have = expected_attention(run, latest), stored_attention(run)
            if have != want:
                problems.append(f"run {run['workflow_id']} ({run['status']}, latest step {latest['step_name']} "
                                f"#{latest['attempt']} {latest['status']}) stores attention {have}, not {want}")
        stored = {tuple(r[k] for k in ("workflow_class", "status", "step", "attention_reason", "error_class")):
                  r["runs"] for r in world.counts}
        if stored != dict(expected_counts(world)):
            problems.append(f"pgbus_run_counts says {stored}, the runs say {dict(expected_counts(world))}")
        return problems

    def attention_witness(self, world: World) -> str:
        """What a run with wrong attention columns looks like from here: the columns a refresh computes
        now (rolled back), the installed function's digest, other sessions on this database, this
        process's threads, and the run's audit trail."""
        lines = []
        with self.engine.db.connection() as conn:
            for run in world.runs:
                latest = world.latest(run)
                if latest is None or expected_attention(run, latest) == stored_attention(run):
                    continue
                with contextlib.suppress(Exception), conn.transaction():
                    conn.execute("SELECT pgbus_workflow_attention(%s)", (run["workflow_id"],))
                    again = conn.execute("SELECT attention_reason, attention_since, status, updated_at FROM"
                                         " pgbus_workflows WHERE workflow_id = %s", (run["workflow_id"],)).fetchone()
                    lines.append(f"  refreshed now: {again}")
                    raise psycopg.Rollback  # the refresh is only looked at
                events = [(e["id"], e["event"], e["actor"], e["step_name"], e["created_at"].time().isoformat())
                          for e in world.events_of[run["workflow_id"]]]
                lines.append(f"  events of {run['workflow_id']}: {events}")
            digest = conn.execute("SELECT md5(pg_get_functiondef('pgbus_workflow_attention'::regproc))").fetchone()
            others = conn.execute("SELECT pid, application_name, state, left(query, 80) FROM pg_stat_activity"
                                  " WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
        lines.append(f"  pgbus_workflow_attention md5 {digest[0] if digest else None}; other sessions: {others}")
        lines.append(f"  threads: {[t.name for t in threading.enumerate()]}")
        return "\n".join(lines)

    def slot_problems(self) -> list[str]:
        """Flow control (docs/flow-control.md): slots taken = holders. Every held slot's holder is a run
        ready or running, or a step attempt scheduled (granted) or in progress, whose row says it holds;
        every row that says so holds one; no line holds more than its capacity; and no run waits in a
        line that has a free slot (a given-back slot always went to the first in line)."""
        with self.engine.db.connection() as conn:
            leaked = conn.execute(LEAKED_SLOTS).fetchall()
            lines = conn.execute(LINES).fetchall()
        problems = [f"{kind} {name} {key}: slot and holder disagree" for kind, name, key in leaked]
        for name, key, held, waiting in lines:
            if held > MODEL_CAPACITY:
                problems.append(f"limit {name} key {key!r}: {held} slots held, capacity {MODEL_CAPACITY}")
            if waiting and held < MODEL_CAPACITY:
                problems.append(f"limit {name} key {key!r}: {waiting} waiting with {held} of {MODEL_CAPACITY} held")
        return problems

    def attention_problems(self, world: World) -> list[str]:
        engine = self.engine
        expected = expected_stuck(world, engine)
        class_of = {r["workflow_id"]: r["workflow_class"] for r in world.runs}
        counts = queries.stuck_reason_counts(engine, now=world.now)
        want_counts = Counter((class_of[wid], reason) for wid, reason, _ in expected)
        problems = []
        if counts != dict(want_counts):
            problems.append(f"stuck_reason_counts {counts} != {dict(want_counts)}")
        shown: set[tuple[Any, str, str]] = set()
        for group in queries.attention_groups(engine, now=world.now):
            for wid in queries.attention_ids(engine, group.workflow_class, group.step_name, group.reason,
                                             group.error_class, now=world.now):
                shown.add((wid, group.reason, group.step_name))
        if shown != expected:
            problems.append(f"attention shows {sorted(map(str, shown - expected))} it should not and misses "
                            f"{sorted(map(str, expected - shown))}")
        return problems

    def job_problems(self, world: World) -> list[str]:
        """Every ongoing run moves on by itself unless a person is needed: its work is queued."""
        engine = self.engine
        problems: list[str] = []
        for name in engine.queue_names():
            failed = FailedJobRegistry(name, connection=engine.redis)
            for jid in failed.get_job_ids():
                job = Job.fetch(jid, connection=engine.redis)
                problems.append(f"job {jid} ({job.description}) crashed: {job.latest_result()}")
        wanted: dict[str, str] = {}
        for run in world.runs:
            latest = world.latest(run)
            assert latest is not None
            if run["status"] == "ready" and latest["job_id"] not in self.lost_jobs:
                recent = [e["event"] for e in world.events_of[run["workflow_id"]]][-6:]
                wanted[latest["job_id"]] = (f"step {latest['step_name']} of ready run {run['workflow_id']} "
                                            f"({run['workflow_class']}, last events {recent})")
        for batch in world.batches:
            if batch["status"] != "open":
                continue
            for child in world.children:
                if child["batch_id"] == batch["id"] and child["status"] == "pending" \
                        and child["job_id"] not in self.lost_jobs:
                    wanted[child["job_id"]] = f"child {child['position']} of batch {batch['id']}"
        statuses = job_statuses(engine, list(wanted))
        for jid, what in wanted.items():
            if statuses[jid] not in (JobStatus.QUEUED, JobStatus.SCHEDULED):
                problems.append(f"{what}: its job {jid} is {statuses[jid]}, so nothing will run it")
        return problems


@pytest.mark.settings(PGBUS_WAITING_THRESHOLD=3600, PGBUS_RETENTION=None)
def test_engine_model(engine: Engine) -> None:
    EngineModel.engine = engine
    STATS.clear()
    run_state_machine_as_test(EngineModel, settings=chosen_settings())
    print("\n".join(f"{n:6} {what}" for what, n in sorted(STATS.items())))
