"""Flow control, measured (issue 22, part 5): what concurrency limits and rates cost when they do
not bind, what they give when they do, and whether they hold while workers are killed. Every
figure is printed beside the same workload without limits, in the same invocation.

    python -m bench.flow --redis-url redis://127.0.0.1:6379/15            # every part, the issue's sizes
    python -m bench.flow --quick --redis-url redis://127.0.0.1:6379/15    # a quick look (about 2 min)
    python -m bench.flow --only tenants --runs 2000 --redis-url ...       # one part, smaller

Parts (``--only NAME``, repeatable), each phase on a fresh database (a copy of one migrated
template, ``track_functions = 'pl'`` on) and a flushed Redis database, with real ``pgbus-worker``
processes (``PgbusWorker``, scheduler and sweep on) importing ``bench.flow_workflows``:

* ``overhead``: limits declared but never binding. ``--overhead-runs`` (1,000) runs of 5 no-op
  steps (bench.steps' workload), ``--workers`` (3) workers started first, then the starts; end
  to end = first run created to last run finished (database clock). Classes: no limits
  (``Free5``); ``concurrency = Limit(10_000)`` (one key); ``Limit(10_000, key=tenant)`` over
  ``--tenants`` keys; ``Limit(10_000)`` on the class and ``Limit(10_000, name=...)`` on step 3;
  ``Limit(64, key=tenant)`` (a small capacity no tenant reaches). Inline continuation on (as
  shipped) and off (``PGBUS_INLINE_STEPS=0``), ``--repeat`` times, the classes' order turned
  each repeat. Also: jobs per step (RQ's counts), slot rows left, runs put in line
  (``slot_waiting`` events: 0 when nothing binds). Target: within 10%.
* ``tenants``: ``--runs`` runs (10,000) over ``--tenants`` tenants (100), 2 steps that sleep
  5-20 ms each, ``TenantFree`` beside ``TenantLimited`` (``Limit(2, key=tenant)``), the same
  arguments; the runs shuffled, and the same runs in tenant blocks (each tenant's runs one
  after the other: the limit binds for all but 2 of each tenant's), ``--tenants-order``. All
  runs are started first, then ``--workers`` workers drain them (``--tenants-live``: started
  while the workers run). Drain = first attempt started to last run finished; runs/s beside
  the unlimited phase of the same order (``--grouped-baseline`` runs the unlimited class in
  tenant blocks too; it is the same work); the most runs of one tenant holding a slot at once,
  from the database (each run's first ``started_at`` to its last ``finished_at``: the slot is
  the run's from its first claim until it finishes) and from the steps' own clocks (the span
  of their code, inside the slot: no false positive from ``now()`` being a transaction's
  start). Target: >= 80% of the unlimited rate; never more than 2.
* ``hot``: one hot tenant's ``--hot-runs`` (5,000) runs started first, then ``--quiet-tenants``
  (99) x ``--quiet-runs`` (20) quiet runs in a shuffled order, workers already running; the
  phase ends when every quiet run has finished. Quiet runs' completion time (finished_at -
  created_at) p50/p95/max: quiet runs alone (limited class), hot + quiet with the limit, hot
  + quiet without it (what starvation looks like).
* ``rate``: ``--rate-runs`` (1,000) runs of one step under ``Rate(50, per=1 s, name=
  "bench-api")``, started first, then the workers; the most starts in any 1 s window
  (half-open, from ``started_at``, which the rate stamps), starts/s from the first to the last
  start, the fewest and most starts in each whole second, the bursts (their count, size and
  period); beside the same step without the rate.
* ``chaos``: ``--chaos-runs`` (2,000) runs of 2 sleeping steps (step timeout 3 s, reattempts
  with no backoff) over ``--chaos-tenants`` (5) tenants, ``Limit(2, key=tenant)``, started
  first; the workers run with ``PGBUS_SWEEP_INTERVAL=1`` and ``PGBUS_STALL_THRESHOLD=2``
  (``--chaos-inline-steps``: their ``PGBUS_INLINE_STEPS``); every ``--kill-every`` (2) seconds
  one worker (chosen at random, seeded) gets SIGKILL and a new one is started, until every run
  is finished (or ``--chaos-seconds``; then ``--settle`` seconds more with no kill). Sampled
  every 0.5 s and at the end: slots leaked (a held slot whose run is not ready/running, or
  whose step is not scheduled/in_progress; a run or step flagged holds_slot without its slot),
  lines with a free slot and a waiter; at the end: runs stuck (not finished, by status),
  attempts failed as stalled, sweep resends, the most runs of one tenant at once (completed
  attempts; all attempts, a stalled one until the sweep declared it; runs; the steps' clocks).
  Beside the same chaos without the limit.

Each phase also prints the wall time spent inside the flow-control SQL functions per run
(``pg_stat_user_functions``: the claims' take, the give-backs, the grants; lock waits inside
them included) and the CPU per run of the workers, PostgreSQL's backends, Redis and this
process (``bench.probes.CpuMeter``, not in chaos), with the cores other processes kept busy.

The checkout and the Redis database may be shared: the engine's revision (HEAD, and a digest of
``pgbus_flask/`` and ``worker/`` with their uncommitted changes) is printed, and a phase whose
engine differs from the one the template was migrated at says so; a key of the benchmark's own
in the Redis database tells when another client flushed it mid-phase (the queued jobs are lost),
and that phase is run again (at most twice). Figures are printed, never asserted. Databases are
named ``pgbus_bench_flow_<pid>`` (and ``_tpl_<pid>``) and dropped; the Redis database given is
flushed (give it one nobody else uses); every process started is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from redis import Redis

from bench.chain import flush_redis, jobs_run, wait_workers
from bench.common import (
    DEFAULT_REDIS,
    DEFAULT_SERVER,
    VENV_BIN,
    Processes,
    create_database,
    drop_database,
    env_for,
    pct,
    positive,
)
from bench.probes import CpuMeter

DB_NAME = f"pgbus_bench_flow_{os.getpid()}"
TEMPLATE = f"pgbus_bench_flow_tpl_{os.getpid()}"
IMPORT = "bench.flow_workflows"
PARTS = ("overhead", "tenants", "hot", "rate", "chaos")
PENDING = ("ready", "running", "waiting")
NAN = float("nan")
SENTINEL = "pgbus-bench-flow-sentinel"

#: A held slot that no ongoing holder explains, and a holder flag without its slot (one snapshot).
LEAKS_SQL = """
SELECT
 (SELECT count(*) FROM pgbus_limit_slots l LEFT JOIN pgbus_workflows w ON w.workflow_id = l.holder_run
   WHERE l.holder_run IS NOT NULL AND (w.status IS NULL OR w.status NOT IN ('ready', 'running'))),
 (SELECT count(*) FROM pgbus_limit_slots l LEFT JOIN pgbus_workflow_steps s ON s.id = l.holder_step
   WHERE l.holder_step IS NOT NULL AND (s.status IS NULL OR s.status NOT IN ('scheduled', 'in_progress'))),
 (SELECT count(*) FROM pgbus_workflows w WHERE w.holds_slot
   AND NOT EXISTS (SELECT 1 FROM pgbus_limit_slots l WHERE l.holder_run = w.workflow_id)),
 (SELECT count(*) FROM pgbus_workflow_steps s WHERE s.holds_slot
   AND NOT EXISTS (SELECT 1 FROM pgbus_limit_slots l WHERE l.holder_step = s.id)),
 (SELECT count(*) FROM (SELECT DISTINCT s.blocked_on, s.blocked_key FROM pgbus_workflow_steps s
   WHERE s.blocked_on IS NOT NULL AND s.blocked_key IS NOT NULL AND s.status = 'scheduled'
     AND EXISTS (SELECT 1 FROM pgbus_limit_slots l JOIN pgbus_limits m ON m.name = l.limit_name
                  AND m.kind IN ('run', 'step')
                  WHERE l.limit_name = s.blocked_on AND l.limit_key = s.blocked_key AND l.slot <= m.capacity
                    AND l.holder_run IS NULL AND l.holder_step IS NULL)) x)
"""


def log(msg: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {msg}", flush=True)


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def revision() -> str:
    """The engine measured: HEAD, the tree of pgbus_flask/ and worker/ in it, and a digest of their
    uncommitted changes (the checkout is shared: each phase compares the engine's part with the one
    the template database was migrated at; a commit of other files changes nothing)."""
    import hashlib
    import subprocess

    from bench.common import ROOT

    def git(*argv: str) -> str:
        try:
            return subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=10).stdout
        except Exception:
            return ""

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    tree = git("rev-parse", "HEAD:pgbus_flask", "HEAD:worker").split()
    changes = git("diff", "HEAD", "--", "pgbus_flask", "worker") + git(
        "ls-files", "--others", "--exclude-standard", "--", "pgbus_flask", "worker")
    engine = hashlib.sha1((" ".join(tree) + changes).encode()).hexdigest()[:8]
    return f"{head} (engine {engine}{', uncommitted changes' if changes.strip() else ''})"


def engine_of(text: str) -> str:
    """The engine part of a :func:`revision`."""
    return text.partition(" ")[2]


def load1() -> float:
    return os.getloadavg()[0]


@dataclass
class Phase:
    """One phase: its runs, what the database says of them, and the phase's own notes."""

    label: str
    runs: int = 0
    seconds: float = NAN          # end to end (see the part), database clock
    start_seconds: float = NAN    # the starts, in this process
    jobs: int | None = None
    load: tuple[float, float] = (NAN, NAN)
    runs_rows: list[dict[str, Any]] = field(default_factory=list)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, Any] = field(default_factory=dict)
    cpu: dict[str, float | None] = field(default_factory=dict)
    kills: list[float] = field(default_factory=list)
    samples: list[tuple[int, ...]] = field(default_factory=list)
    ended_at: float = NAN
    flushed: bool = False  # another client flushed the Redis database during the phase
    notes: list[str] = field(default_factory=list)

    @property
    def finished(self) -> int:
        return sum(1 for r in self.runs_rows if r["status"] == "finished")


class Bench:
    """Settings, the template database and the worker logs, shared by every phase."""

    def __init__(self, args: argparse.Namespace, logdir: str) -> None:
        self.args, self.logdir = args, logdir
        self.phases = 0
        self.revision = revision()
        create_database(args.server_url, TEMPLATE)
        self.classes = _classes()

    def close(self) -> None:
        drop_database(self.args.server_url, DB_NAME)
        drop_database(self.args.server_url, TEMPLATE)

    def phase(self, label: str, starts: Sequence[tuple[str, dict[str, Any]]], **kw: Any) -> Phase:
        """:meth:`phase_once`, again (at most twice more) when another client flushed the Redis
        database meanwhile: the jobs it held were lost, and the figures measure the stall threshold."""
        for attempt in range(3):
            out = self.phase_once(label, starts, stop_on_flush=attempt < 2, **kw)
            if not out.flushed or attempt == 2:
                break
            log(f"  {label}: the Redis database was flushed by another client during the phase; once more")
        if attempt:
            out.notes.append(f"run {attempt + 1} times: another client flushed the Redis database during the"
                             f" earlier run{'s' if attempt > 1 else ''}")
        return out

    def phase_once(self, label: str, starts: Sequence[tuple[str, dict[str, Any]]], *, workers: int,
                   prefill: bool, env: dict[str, str] | None = None, pending_sql: str | None = None,
                   chaos: dict[str, Any] | None = None, timeout: float | None = None,
                   stop_on_flush: bool = False) -> Phase:
        """Start ``starts`` (class name, kwargs) before the workers (``prefill``) or after, poll
        until ``pending_sql`` (default: runs still ready, running or waiting) counts 0, with
        ``chaos`` killing workers meanwhile; then read back every run and attempt."""
        args = self.args
        out = Phase(label, runs=len(starts))
        wall = time.monotonic()
        now_at = revision()
        if engine_of(now_at) != engine_of(self.revision):
            out.notes.append(f"the engine changed during this invocation: {self.revision} when it began (and"
                             f" migrated its template), {now_at} for this phase's workers")
        db = create_database(args.server_url, DB_NAME, template=TEMPLATE)
        with psycopg.connect(args.server_url, autocommit=True) as conn:  # time the SQL functions (pl/pgSQL)
            conn.execute(f'ALTER DATABASE "{DB_NAME}" SET track_functions = \'pl\'')
        flush_redis(args.redis_url)
        # A key of our own, no TTL: if it vanishes mid-phase, someone else flushed the Redis database
        # (its jobs went with it: the sweep resends them after PGBUS_STALL_THRESHOLD) and the phase says so.
        sentinel = Redis.from_url(args.redis_url)
        sentinel.set(SENTINEL, os.getpid())
        engine = _engine(db, args.redis_url)
        pending_sql = pending_sql or f"SELECT count(*) FROM pgbus_workflows WHERE status IN {PENDING}"
        timeout = timeout or args.timeout
        worker_env = env_for(db, args.redis_url, PGBUS_IMPORT=IMPORT, **(env or {}))
        self.phases += 1
        tag = f"{self.phases:02d}-" + "".join(c if c.isalnum() else "_" for c in label)[:40]
        started = 0
        try:
            with Processes() as procs, psycopg.connect(db, autocommit=True) as poll:
                def spawn() -> Any:
                    nonlocal started
                    started += 1
                    return procs.start([os.path.join(VENV_BIN, "pgbus-worker"), "--log-level", "WARNING"],
                                       worker_env, os.path.join(self.logdir, f"{tag}-{started}.log"))

                engine.db.pool.wait()
                out.load = (load1(), NAN)
                if prefill:
                    out.start_seconds = _start_all(self.classes, starts)
                live = [spawn() for _ in range(workers)]
                wait_workers(args.redis_url, workers, timeout=60)
                cpu = None if chaos else CpuMeter([p.pid for p in live], args.server_url, DB_NAME, args.redis_url)
                if cpu is not None:
                    cpu.start()
                if not prefill:
                    out.start_seconds = _start_all(self.classes, starts)
                t0 = time.monotonic()
                rng = random.Random(args.seed)
                next_kill = t0 + chaos["every"] if chaos else NAN
                kills_until = t0 + chaos["seconds"] if chaos else NAN
                pending = -1
                while time.monotonic() - t0 < timeout + (chaos["settle"] if chaos else 0):
                    pending = int(poll.execute(pending_sql).fetchone()[0])  # type: ignore[index]
                    if not sentinel.exists(SENTINEL):
                        if not out.flushed:
                            out.notes.append(f"the Redis database was flushed by another client about"
                                             f" {time.monotonic() - t0:.0f}s after the workers started: its queued"
                                             " jobs were lost (the sweep resends them after the stall threshold)")
                        out.flushed = True
                        sentinel.set(SENTINEL, os.getpid())
                        if stop_on_flush:
                            break  # measured again
                    if chaos:
                        out.samples.append(tuple(int(v) for v in poll.execute(LEAKS_SQL).fetchone()))  # type: ignore[union-attr]
                    if pending == 0:
                        break
                    now = time.monotonic()
                    if chaos and now >= next_kill and now < kills_until:
                        victim = rng.randrange(len(live))
                        _kill(live[victim])
                        out.kills.append(now - t0)
                        live[victim] = spawn()
                        next_kill = now + chaos["every"]
                    time.sleep(0.5 if chaos else 0.2)
                if pending and not (out.flushed and stop_on_flush):
                    out.notes.append(f"{pending} runs still pending when the phase stopped"
                                     f" ({time.monotonic() - t0:.0f}s after the workers started)")
                if cpu is not None:
                    out.cpu = cpu.stop()
                with contextlib.suppress(Exception):
                    out.jobs = jobs_run(args.redis_url)
                out.load = (out.load[0], load1())
                procs.stop()
                out.ended_at = time.time()
                _read_back(poll, out, explain_resends=not chaos)
                if not chaos and out.counts["resends"]:
                    out.notes.insert(0, f"{out.counts['resent_steps']} steps were sent again by the sweep (their job"
                                        f" was lost); worker logs: {self.logdir}/{tag}-*.log")
        finally:
            engine.close()
            sentinel.close()
            drop_database(args.server_url, DB_NAME)
            flush_redis(args.redis_url)
        log(f"  {label}: {out.finished}/{out.runs} runs finished; the phase took {time.monotonic() - wall:.1f}s")
        return out


def _classes() -> dict[str, Any]:
    import bench.flow_workflows as wf

    return {name: getattr(wf, name) for name in dir(wf) if isinstance(getattr(wf, name), type)
            and getattr(getattr(wf, name), "steps", None)}


def _engine(db: str, redis_url: str) -> Any:
    from pgbus_flask.config import Settings
    from pgbus_flask.engine import Engine

    return Engine(Settings.load({"PGBUS_DATABASE_URL": db, "PGBUS_REDIS_URL": redis_url})).make_default()


def _start_all(classes: dict[str, Any], starts: Sequence[tuple[str, dict[str, Any]]]) -> float:
    t = time.perf_counter()
    for name, kwargs in starts:
        classes[name].start(**kwargs)
    return time.perf_counter() - t


def _kill(proc: Any) -> None:
    """SIGKILL a worker and everything in its process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.wait(10)


def _read_back(conn: psycopg.Connection[Any], out: Phase, explain_resends: bool = True) -> None:
    cols = ("workflow_id", "cls", "tenant", "status", "created", "finished")
    out.runs_rows = [dict(zip(cols, row, strict=True)) for row in conn.execute(
        "SELECT workflow_id, workflow_class, arguments->'kwargs'->>'tenant', status,"
        " extract(epoch FROM created_at)::float8, extract(epoch FROM finished_at)::float8 FROM pgbus_workflows")]
    step_cols = ("workflow_id", "tenant", "step", "attempt", "status", "started", "finished", "error", "t0", "t1",
                 "resends")
    out.attempts = [dict(zip(step_cols, row, strict=True)) for row in conn.execute(
        "SELECT s.workflow_id, w.arguments->'kwargs'->>'tenant', s.step_name, s.attempt, s.status,"
        " extract(epoch FROM s.started_at)::float8, extract(epoch FROM s.finished_at)::float8, s.error_class,"
        " (s.output->>'t0')::float8, (s.output->>'t1')::float8, s.resends"
        " FROM pgbus_workflow_steps s JOIN pgbus_workflows w USING (workflow_id)")]
    row = conn.execute(
        "SELECT (SELECT count(*) FROM pgbus_limit_slots),"
        " (SELECT count(*) FROM pgbus_limit_slots WHERE holder_run IS NOT NULL OR holder_step IS NOT NULL),"
        " (SELECT count(*) FROM pgbus_workflow_events WHERE event = 'slot_waiting'),"
        " (SELECT count(*) FROM pgbus_workflow_events WHERE event = 'slot_granted'),"
        " (SELECT count(*) FROM pgbus_workflow_steps WHERE blocked_on IS NOT NULL AND status = 'scheduled')"
    ).fetchone()
    assert row is not None
    out.counts.update(zip(("slot_rows", "slots_held", "in_line_events", "granted_events", "in_line_now"), row,
                          strict=True))
    out.counts["leaks_end"] = tuple(int(v) for v in conn.execute(LEAKS_SQL).fetchone())  # type: ignore[union-attr]
    conn.execute("SELECT pg_stat_clear_snapshot()")
    out.counts["functions"] = {name: (int(calls), float(total), float(own)) for name, calls, total, own in conn.execute(
        "SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions WHERE funcname LIKE 'pgbus%'")}
    late = conn.execute(
        "SELECT count(*) FILTER (WHERE resends > 0), coalesce(sum(resends), 0),"
        " count(*) FILTER (WHERE started_at - scheduled_at > interval '60 seconds'),"
        " max(extract(epoch FROM started_at - scheduled_at))::float8 FROM pgbus_workflow_steps").fetchone()
    assert late is not None
    out.counts.update(zip(("resent_steps", "resends", "late_steps", "max_wait"), late, strict=True))
    if late[1] and explain_resends:  # a step whose job was lost: what happened to it
        for row in conn.execute(
                "SELECT s.id, s.step_name, s.attempt, s.status, s.sends, s.resends, s.job_id,"
                " extract(epoch FROM s.started_at - s.scheduled_at)::float8 AS waited,"
                " (SELECT string_agg(e.event || '@' || to_char(e.created_at, 'HH24:MI:SS.MS')"
                "   || coalesce(' ' || e.details::text, ''), ', ' ORDER BY e.id)"
                "  FROM pgbus_workflow_events e WHERE e.workflow_id = s.workflow_id) AS events"
                " FROM pgbus_workflow_steps s WHERE s.resends > 0"
                " ORDER BY s.id LIMIT 3"):
            out.notes.append(f"late step {row}")
    dup = conn.execute("SELECT count(*) FROM (SELECT workflow_id, step_name FROM pgbus_workflow_steps"
                       " WHERE status = 'completed' GROUP BY 1, 2 HAVING count(*) > 1) x").fetchone()
    if dup and dup[0]:
        out.notes.append(f"{dup[0]} steps completed more than once")


# -- what the rows say -------------------------------------------------------------------------

def most_at_once(spans: Iterable[tuple[Any, float, float]], cap: int) -> tuple[int, Any, float]:
    """The most spans of one key open at once (an end at the very moment of a start counts first),
    the key, and the longest stretch any key spent above ``cap`` (seconds)."""
    by_key: dict[Any, list[tuple[float, int]]] = {}
    for key, a, b in spans:
        events = by_key.setdefault(key, [])
        events += [(a, 1), (b, -1)]
    best, best_key, over = 0, None, 0.0
    for key, events in by_key.items():
        events.sort()
        n = 0
        for i, (t, d) in enumerate(events):
            n += d
            if n > best:
                best, best_key = n, key
            if n > cap and i + 1 < len(events):
                over = max(over, events[i + 1][0] - t)
    return best, best_key, over


def run_spans(out: Phase, *, code: bool = False, statuses: Sequence[str] = ("completed",),
              per_run: bool = True, tenants: Callable[[str], bool] | None = None) -> list[tuple[Any, float, float]]:
    """(tenant, start, end) of each run (its first start to its last end) or each attempt, from the
    database's timestamps or (``code``) from the steps' own clocks; attempts of ``statuses`` only,
    an attempt not ended taken as open until the phase ended."""
    spans: dict[Any, list[float]] = {}
    out_list = []
    for a in out.attempts:
        if a["status"] not in statuses or (tenants is not None and not tenants(a["tenant"])):
            continue
        if code:
            if a["t0"] is None:
                continue
            start, end = a["t0"], a["t1"]
        else:
            if a["started"] is None:
                continue
            start, end = a["started"], a["finished"] if a["finished"] is not None else out.ended_at
        if not per_run:
            out_list.append((a["tenant"], start, end))
            continue
        span = spans.setdefault(a["workflow_id"], [a["tenant"], start, end])
        span[1], span[2] = min(span[1], start), max(span[2], end)
    return out_list if not per_run else [tuple(s) for s in spans.values()]  # type: ignore[misc]


def concurrency(out: Phase, cap: int, detail: bool = True, **kw: Any) -> str:
    """The most runs (or attempts) of one tenant at once; where it is above ``cap`` and ``detail``,
    which tenant and the longest stretch above (a few ms: transaction-start timestamps, see part 2)."""
    most, key, over = most_at_once(run_spans(out, **kw), cap)
    text = f"{most}"
    if most > cap and detail:
        text += f" (tenant {key}; longest stretch above {cap}: {over * 1000:.1f} ms)"
    return text


def drain(out: Phase) -> float:
    """First attempt started to last run finished."""
    starts = [a["started"] for a in out.attempts if a["started"] is not None]
    ends = [r["finished"] for r in out.runs_rows if r["finished"] is not None]
    return max(ends) - min(starts) if starts and ends else NAN


def end_to_end(out: Phase) -> float:
    """First run created to last run finished."""
    ends = [r["finished"] for r in out.runs_rows if r["finished"] is not None]
    return max(ends) - min(r["created"] for r in out.runs_rows) if ends else NAN


def flow_ms(out: Phase) -> str:
    """Wall time per run inside the flow-control SQL functions (pg_stat_user_functions; lock waits
    inside them included): the claims' take, the give-backs (triggers), the grants nested in both."""
    f = out.counts.get("functions", {})
    runs = out.finished or 1

    def per(name: str) -> float:
        return f[name][1] / runs if name in f else 0.0

    return (f"take {per('pgbus_take_slots'):.2f}, give back {per('pgbus_give_back_slots'):.2f} (of which grant"
            f" {per('pgbus_grant_slots'):.2f}), rate {per('pgbus_take_rate') + per('pgbus_wake_rate'):.2f} ms a run")


def cpu_text(out: Phase, per: int, unit: str = "run") -> str:
    """CPU ms per run (or step) by part, over the phase (bench.probes.CpuMeter), and the cores every
    other process on the machine kept busy meanwhile."""
    c = out.cpu
    if not c or not per:
        return "CPU not measured"

    def ms_per(part: str) -> str:
        value = c.get(part)
        return "-" if value is None else f"{value * 1000 / per:.2f}"

    others = c.get("others_cores")
    return (f"CPU ms a {unit}: workers {ms_per('workers')}, PostgreSQL {ms_per('postgres')}, Redis {ms_per('redis')},"
            f" bench {ms_per('self')}; other processes kept {fmt(others if others is not None else NAN, '.2f')}"
            " cores busy")


def fmt(value: float, spec: str = ".0f") -> str:
    return "-" if value is None or value != value else format(value, spec)


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if a == a and b == b and b else "-"


# -- the parts ---------------------------------------------------------------------------------

def part_overhead(bench: Bench) -> dict[str, Any]:
    args = bench.args
    classes = [("no limits", "Free5"), ("class Limit(10000), one key", "Class5"),
               (f"class Limit(10000, key=tenant), {args.tenants} keys", "Keyed5"),
               ("class + step Limit(10000)", "Stepped5"),
               (f"class Limit(64, key=tenant), {args.tenants} keys", "Small5")]
    if args.quick:  # a look: the one-key limit and the small one beside none
        classes = [classes[0], classes[1], classes[4]]
    starts_of = {cls: [(cls, {"tenant": f"t{i % args.tenants}"}) for i in range(args.overhead_runs)]
                 for _, cls in classes}
    figures: dict[tuple[str, bool], list[Phase]] = {}
    for repeat in range(args.repeat):
        turn = classes[repeat % len(classes):] + classes[:repeat % len(classes)]
        for inline in (True, False):
            for label, cls in turn:
                name = f"{label}, inline {'on' if inline else 'off'}"
                log(f"overhead: {name} (repeat {repeat + 1} of {args.repeat})")
                out = bench.phase(name, starts_of[cls], workers=args.workers, prefill=False,
                                  env=None if inline else {"PGBUS_INLINE_STEPS": "0"})
                out.seconds = end_to_end(out)
                figures.setdefault((label, inline), []).append(out)
    print(f"\n--- 1. limits declared, never binding: {args.overhead_runs} runs x 5 no-op steps, {args.workers}"
          f" workers, {args.repeat} repeat(s) ---")
    print(f"{'what':<48}{'inline':>7}{'steps/s (each repeat)':>24}{'vs none':>9}{'CPU ms/step':>12}"
          f"{'vs none':>9}{'jobs/step':>10}{'slot rows':>10}{'in line':>8}{'unfinished':>11}{'load':>11}")
    summary: dict[str, Any] = {}

    def cpu_per_step(p: Phase) -> float:
        parts = [p.cpu.get(k) for k in ("workers", "postgres", "redis")]
        return sum(v for v in parts if v is not None) * 1000 / (5 * p.finished) if p.cpu and p.finished else NAN

    for inline in (True, False):
        base = figures[(classes[0][0], inline)]
        base_rates = [5 * p.finished / p.seconds for p in base]
        base_cpu = statistics.median(cpu_per_step(p) for p in base)
        for label, _cls in classes:
            phases = figures[(label, inline)]
            rates = [5 * p.finished / p.seconds for p in phases]
            ratios = [r / b for r, b in zip(rates, base_rates, strict=True)]
            cpu = statistics.median(cpu_per_step(p) for p in phases)
            jobs = [p.jobs / (5 * p.finished) for p in phases if p.jobs and p.finished]
            print(f"{label:<48}{'on' if inline else 'off':>7}{' / '.join(fmt(r) for r in rates):>24}"
                  f"{fmt(statistics.median(ratios), '.2f') + 'x':>9}{fmt(cpu, '.2f'):>12}"
                  f"{fmt(cpu / base_cpu, '.2f') + 'x':>9}{fmt(max(jobs) if jobs else NAN, '.2f'):>10}"
                  f"{phases[-1].counts['slot_rows']:>10}{max(p.counts['in_line_events'] for p in phases):>8}"
                  f"{sum(p.runs - p.finished for p in phases):>11}"
                  f"{fmt(phases[0].load[0], '.1f') + '-' + fmt(phases[-1].load[1], '.1f'):>11}")
            for p in phases:
                for note in p.notes:
                    print(f"  ! {p.label}: {note}")
            summary[f"{label}, inline {'on' if inline else 'off'}"] = {
                "steps_per_s": rates, "vs_none": ratios, "cpu_ms_per_step": cpu, "cpu_vs_none": cpu / base_cpu}
    for inline in (True, False):
        for label, _cls in classes:
            last = figures[(label, inline)][-1]
            flow = f"{flow_ms(last)}; " if label != classes[0][0] else ""
            print(f"  {label}, inline {'on' if inline else 'off'}: {flow}{cpu_text(last, 5 * last.finished, 'step')}")
    print("  vs none: the median of each repeat's ratio to 'no limits' with the same inline setting (target:"
          " 0.90x or more); CPU ms/step: the workers', PostgreSQL's backends' and Redis's CPU per step (median of"
          " the repeats), less disturbed by other processes than steps/s, and its ratio to 'no limits'"
          " (the breakdown of the last repeat below); slot rows: pgbus_limit_slots rows left at the end; in"
          " line: runs put in line (slot_waiting events, 0 when nothing binds); load: 1-minute load average at"
          " the first phase's start and the last one's end.")
    return summary


def _tenant_starts(rng: random.Random, cls: str, tenants: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    return [(cls, {"tenant": t, "ms": [rng.randint(5, 20), rng.randint(5, 20)]}) for t in tenants]


def part_tenants(bench: Bench) -> dict[str, Any]:
    args = bench.args
    rng = random.Random(args.seed)
    tenants = [f"t{i % args.tenants}" for i in range(args.runs)]
    rng.shuffle(tenants)
    shuffled = _tenant_starts(rng, "", tenants)
    # The same runs (tenant and sleeps) in tenant blocks: each tenant's runs arrive together.
    grouped = sorted(shuffled, key=lambda s: int(s[1]["tenant"][1:]))
    results = []
    for label, cls, plan in (("no limit", "TenantFree", shuffled),
                             ("Limit(2, key=tenant)", "TenantLimited", shuffled),
                             ("no limit, tenant blocks", "TenantFree", grouped),
                             ("Limit(2), tenant blocks", "TenantLimited", grouped)):
        blocks = "blocks" in label
        if (blocks and "no limit" in label and not (args.grouped_baseline or args.tenants_order == "blocks")) \
                or (args.tenants_order == "blocks" and not blocks) or (args.tenants_order == "shuffled" and blocks):
            continue
        log(f"tenants: {label}, {args.runs} runs over {args.tenants} tenants, {args.workers} workers"
            f"{', started while they run' if args.tenants_live else ''}")
        out = bench.phase(label, [(cls, kw) for _, kw in plan], workers=args.workers,
                          prefill=not args.tenants_live)
        out.seconds = drain(out)
        results.append(out)
    def rate_of(out: Phase) -> float:
        return out.finished / out.seconds if out.seconds else NAN

    # Each limited phase beside the unlimited one of the same order (shuffled, unless the tenant-block
    # baseline ran).
    baselines = {("blocks" in out.label): rate_of(out) for out in results if "no limit" in out.label}
    baselines.setdefault(False, baselines.get(True, NAN))
    when = (f"started while {args.workers} workers run them" if args.tenants_live
            else f"started first, then {args.workers} workers")
    print(f"\n--- 2. {args.runs} runs over {args.tenants} tenants, 2 steps of 5-20 ms, shuffled or in tenant blocks,"
          f" {when} ---")
    print(f"{'what':<26}{'finished':>9}{'drain s':>9}{'runs/s':>8}{'vs none':>9}{'in line':>9}{'granted':>9}"
          f"{'jobs/run':>9}   most runs of a tenant at once: database / steps' clocks{'':>4}load")
    summary: dict[str, Any] = {}
    for out in results:
        limited = "no limit" not in out.label
        rate = rate_of(out)
        base = baselines.get("blocks" in out.label, baselines[False])
        jobs = out.jobs / out.finished if out.jobs and out.finished else NAN
        db_most = concurrency(out, 2, detail=limited)
        code_most = concurrency(out, 2, detail=limited, code=True)
        print(f"{out.label:<26}{out.finished:>9}{fmt(out.seconds, '.1f'):>9}{fmt(rate, '.1f'):>8}"
              f"{ratio(rate, base):>9}{out.counts['in_line_events']:>9}"
              f"{out.counts['granted_events']:>9}{fmt(jobs, '.2f'):>9}   {db_most + ' / ' + code_most:<55}"
              f"{fmt(out.load[0], '.1f')}-{fmt(out.load[1], '.1f')}")
        print(f"  {out.label}: {flow_ms(out) + '; ' if limited else ''}{cpu_text(out, out.finished)}")
        for note in out.notes:
            print(f"  ! {out.label}: {note}")
        summary[out.label] = {"finished": out.finished, "drain_s": out.seconds, "runs_per_s": rate,
                              "vs_none": rate / base, "most_db": db_most, "most_code": code_most,
                              "in_line": out.counts["in_line_events"], "jobs_per_run": jobs}
    print("  vs none: runs/s over the unlimited phase's in the same order (shuffled, or tenant blocks with"
          " --grouped-baseline; target: 0.80x or more); in line / granted:"
          " slot_waiting / slot_granted events; jobs/run: RQ jobs the workers ran per run; most at once: the limit"
          " must keep it at 2 or fewer (the unlimited rows show what the workload alone does); database: each"
          " run's first started_at to its last finished_at; clocks: the steps' own code spans.")
    return summary


def part_hot(bench: Bench) -> dict[str, Any]:
    args = bench.args
    rng = random.Random(args.seed)
    quiet_tenants = [f"q{i}" for i in range(args.quiet_tenants) for _ in range(args.quiet_runs)]
    rng.shuffle(quiet_tenants)
    quiet = _tenant_starts(rng, "", quiet_tenants)
    hot = _tenant_starts(rng, "", ["hot"] * args.hot_runs)
    pending = ("SELECT count(*) FROM pgbus_workflows WHERE status IN ('ready', 'running', 'waiting')"
               " AND arguments->'kwargs'->>'tenant' <> 'hot'")
    phases = [("quiet only, limit 2", "TenantLimited", []), (f"hot {args.hot_runs} + quiet, limit 2",
                                                              "TenantLimited", hot),
              (f"hot {args.hot_runs} + quiet, no limit", "TenantFree", hot)]
    results = []
    for label, cls, first in phases:
        log(f"hot: {label}")
        out = bench.phase(label, [(cls, kw) for _, kw in first + quiet], workers=args.workers, prefill=False,
                          pending_sql=pending)
        results.append(out)
    print(f"\n--- 3. one hot tenant ({args.hot_runs} runs, started first) and {args.quiet_tenants} quiet tenants x"
          f" {args.quiet_runs} runs, {args.workers} workers already running ---")
    print(f"{'what':<32}{'quiet done':>11}{'p50 s':>8}{'p95 s':>8}{'max s':>8}{'quiet span s':>13}"
          f"{'hot done':>9}{'starts s':>9}   most at once, hot: database / clocks{'':>3}load")
    summary: dict[str, Any] = {}
    for out in results:
        q = [r for r in out.runs_rows if r["tenant"] != "hot"]
        done = [r["finished"] - r["created"] for r in q if r["finished"] is not None]
        span = (max(r["finished"] for r in q if r["finished"] is not None) - min(r["created"] for r in q)
                if done else NAN)
        hot_done = sum(1 for r in out.runs_rows if r["tenant"] == "hot" and r["status"] == "finished")
        is_hot = (lambda t: t == "hot")  # noqa: E731
        limited = "no limit" not in out.label
        most = (f"{concurrency(out, 2, limited, tenants=is_hot)} / "
                f"{concurrency(out, 2, limited, code=True, tenants=is_hot)}" if hot_done else "-")
        print(f"{out.label:<32}{len(done):>6}/{len(q):<4}{fmt(pct(done, 50), '.1f'):>8}{fmt(pct(done, 95), '.1f'):>8}"
              f"{fmt(max(done) if done else NAN, '.1f'):>8}{fmt(span, '.1f'):>13}{hot_done:>9}"
              f"{fmt(out.start_seconds, '.1f'):>9}   {most:<38}{fmt(out.load[0], '.1f')}-{fmt(out.load[1], '.1f')}")
        print(f"  {out.label}: {flow_ms(out) + '; ' if limited else ''}{cpu_text(out, out.finished)}")
        for note in out.notes:
            print(f"  ! {out.label}: {note}")
        summary[out.label] = {"quiet_p50": pct(done, 50), "quiet_p95": pct(done, 95),
                              "quiet_max": max(done) if done else NAN, "quiet_span": span, "hot_done": hot_done}
    print("  completion: a quiet run's finished_at - created_at; quiet span: first quiet run created to last quiet"
          " run finished; hot done: hot runs finished when the last quiet one did (the phase stops there);"
          " starts s: this process's start() calls (the hot ones first).")
    return summary


def part_rate(bench: Bench) -> dict[str, Any]:
    args = bench.args
    results = []
    for label, cls in (("no rate", "ApiFree"), ("Rate(50, per=1 s)", "ApiRated")):
        log(f"rate: {label}, {args.rate_runs} runs started first, {args.workers} workers")
        out = bench.phase(label, [(cls, {"n": i}) for i in range(args.rate_runs)], workers=args.workers,
                          prefill=True)
        results.append(out)
    print(f"\n--- 4. a rate of 50 starts a second on one name: {args.rate_runs} one-step runs started first, then"
          f" {args.workers} workers ---")
    print(f"{'what':<22}{'started':>8}{'starts/s':>9}{'most in any 1 s':>16}{'per whole second min-max':>26}"
          f"{'bursts: n, size, period':>25}{'in line':>9}{'load':>11}")
    summary: dict[str, Any] = {}
    for out in results:
        starts = sorted(a["started"] for a in out.attempts if a["started"] is not None)
        most, j = 0, 0
        for i, t in enumerate(starts):  # half-open windows [t, t + 1 s) starting at each start
            while j < len(starts) and starts[j] < t + 1.0:
                j += 1
            most = max(most, j - i)
        per_s = (len(starts) - 1) / (starts[-1] - starts[0]) if len(starts) > 1 else NAN
        seconds: dict[int, int] = {}
        for t in starts:
            seconds[int(t - starts[0])] = seconds.get(int(t - starts[0]), 0) + 1
        whole = [seconds.get(s, 0) for s in range(int(starts[-1] - starts[0]))] if starts else []
        lumps = f"{min(whole)}-{max(whole)}" if whole else "-"
        # Bursts: starts less than 0.25 s apart belong to one; period: first start to the next burst's.
        firsts = [t for i, t in enumerate(starts) if i == 0 or t - starts[i - 1] > 0.25]
        sizes = [sum(1 for t in starts if a <= t < b) for a, b in zip(firsts, [*firsts[1:], float("inf")],
                                                                          strict=True)]
        periods = [b - a for a, b in itertools.pairwise(firsts)]
        bursts = (f"{len(firsts)}, {statistics.median(sizes):.0f}, "
                  f"{fmt(statistics.median(periods) if periods else NAN, '.2f')} s") if starts else "-"
        print(f"{out.label:<22}{len(starts):>8}{fmt(per_s, '.1f'):>9}{most:>16}{lumps:>26}{bursts:>25}"
              f"{out.counts['in_line_events']:>9}{fmt(out.load[0], '.1f') + '-' + fmt(out.load[1], '.1f'):>11}")
        print(f"  {out.label}: {flow_ms(out) + '; ' if 'no rate' not in out.label else ''}"
              f"{cpu_text(out, out.finished)}")
        for note in out.notes:
            print(f"  ! {out.label}: {note}")
        summary[out.label] = {"starts": len(starts), "starts_per_s": per_s, "most_in_1s": most, "per_second": lumps,
                              "bursts": bursts}
    print("  most in any 1 s: the most started_at in a half-open second beginning at any start (the rate: 50 or"
          " fewer); starts/s: (starts - 1) over the first to the last start; per whole second: from the first"
          " start, the last partial second left out; bursts: starts less than 0.25 s apart, their count, median"
          " size and median period (a burst's first start to the next one's); in line: runs put in line"
          " (slot_waiting events).")
    return summary


def part_chaos(bench: Bench) -> dict[str, Any]:
    args = bench.args
    rng = random.Random(args.seed + 5)
    tenants = [f"c{i % args.chaos_tenants}" for i in range(args.chaos_runs)]
    rng.shuffle(tenants)
    plan = _tenant_starts(rng, "", tenants)
    env = {"PGBUS_SWEEP_INTERVAL": "1", "PGBUS_STALL_THRESHOLD": "2"}
    if args.chaos_inline_steps is not None:
        env["PGBUS_INLINE_STEPS"] = str(args.chaos_inline_steps)
    chaos = {"every": args.kill_every, "seconds": args.chaos_seconds, "settle": args.settle}
    results = []
    for label, cls in (("no limit", "ChaosFree"), ("Limit(2, key=tenant)", "ChaosLimited")):
        log(f"chaos: {label}, {args.chaos_runs} runs over {args.chaos_tenants} tenants, a worker killed every"
            f" {args.kill_every:g}s")
        out = bench.phase(label, [(cls, kw) for _, kw in plan], workers=args.workers, prefill=True, env=env,
                          chaos=chaos, timeout=args.chaos_seconds)
        out.seconds = drain(out)
        results.append(out)
    inline = "" if args.chaos_inline_steps is None else f", PGBUS_INLINE_STEPS={args.chaos_inline_steps}"
    print(f"\n--- 5. chaos: {args.chaos_runs} runs over {args.chaos_tenants} tenants, {args.workers} workers, one"
          f" SIGKILLed (and restarted) every {args.kill_every:g}s; step timeout 3 s, sweep every 1 s, stall"
          f" threshold 2 s{inline} ---")
    print(f"{'what':<24}{'kills':>6}{'drain s':>8}{'finished':>9}{'in line':>8}{'stuck':>7}{'stalled':>8}{'resent':>7}"
          f"{'leaked end':>11}{'leaked max':>11}{'free+waiter':>12}   most runs of a tenant at once: completed"
          f" attempts / all attempts / runs / clocks")
    summary: dict[str, Any] = {}
    for out in results:
        stuck: dict[str, int] = {}
        for r in out.runs_rows:
            if r["status"] != "finished":
                stuck[r["status"]] = stuck.get(r["status"], 0) + 1
        stalled = sum(1 for a in out.attempts if (a["error"] or "").endswith("StepStalled"))
        resent = sum(a["resends"] or 0 for a in out.attempts)
        leaks_end = out.counts["leaks_end"]
        sampled = [sum(s[:4]) for s in out.samples]
        lines = [s[4] for s in out.samples]
        most = " / ".join([
            concurrency(out, 2, per_run=False),
            concurrency(out, 2, per_run=False, statuses=("completed", "failed", "in_progress", "cancelled")),
            concurrency(out, 2, statuses=("completed", "failed", "in_progress", "cancelled")),
            concurrency(out, 2, code=True)])
        print(f"{out.label:<24}{len(out.kills):>6}{fmt(out.seconds, '.1f'):>8}{out.finished:>9}"
              f"{out.counts['in_line_events']:>8}"
              f"{sum(stuck.values()):>7}{stalled:>8}{resent:>7}{sum(leaks_end[:4]):>11}"
              f"{max(sampled) if sampled else 0:>11}{(max(lines) if lines else 0):>5} max,{leaks_end[4]:>2} end"
              f"   {most}")
        if stuck:
            print(f"  ! {out.label}: stuck by status: {stuck}; still in line at the end: {out.counts['in_line_now']}")
        if out.counts["slots_held"] and not any(r["status"] in PENDING for r in out.runs_rows):
            print(f"  ! {out.label}: {out.counts['slots_held']} slots still held with no run ongoing")
        for note in out.notes:
            print(f"  ! {out.label}: {note}")
        summary[out.label] = {"kills": len(out.kills), "drain_s": out.seconds, "finished": out.finished,
                              "in_line": out.counts["in_line_events"],
                              "stuck": stuck, "stalled": stalled, "resent": resent, "leaks_end": leaks_end,
                              "leaks_sampled_max": max(sampled) if sampled else 0, "most": most,
                              "samples": len(out.samples)}
    print("  in line: runs put in line (slot_waiting events); stuck: runs not finished at the end; stalled:"
          " attempts the sweep failed with StepStalled; resent: jobs the sweep sent again (resends); leaked: held"
          " slots whose holder is not ongoing, plus holds_slot"
          " flags without a slot (at the end, and the most in one sample, every 0.5 s); free+waiter: lines with a"
          " free slot and a run waiting in them (the sweep regrants those). Most at once: completed attempts"
          " only; all attempts (a killed one until the sweep declared it stalled); runs (first start to last"
          " end, across reattempts); the steps' own clocks (completed attempts, per run).")
    return summary


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.flow", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server-url", default=DEFAULT_SERVER, help="a PostgreSQL URL (its database is not used)")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help="a Redis database of the benchmark's own (flushed)")
    parser.add_argument("--only", action="append", choices=PARTS, help="run only this part (repeatable)")
    parser.add_argument("--quick", action="store_true", help="small sizes: about 2 minutes")
    parser.add_argument("--workers", type=positive, default=3, help="worker processes (3)")
    parser.add_argument("--runs", type=positive, help="tenants: runs (10000; quick 300)")
    parser.add_argument("--tenants", type=positive, help="tenants and overhead: tenants (100; quick 10)")
    parser.add_argument("--overhead-runs", type=positive, help="overhead: runs of 5 no-op steps (1000; quick 100)")
    parser.add_argument("--repeat", type=positive,
                        help="overhead: repeats, the order of the classes turned each time (1)")
    parser.add_argument("--grouped-baseline", action="store_true",
                        help="tenants: also run the unlimited class in tenant blocks (the same work as shuffled)")
    parser.add_argument("--tenants-order", choices=("both", "shuffled", "blocks"), default="both",
                        help="tenants: the runs shuffled, in tenant blocks, or both (both)")
    parser.add_argument("--tenants-live", action="store_true",
                        help="tenants: start the runs while the workers run (default: all started first)")
    parser.add_argument("--hot-runs", type=positive, help="hot: the hot tenant's runs (5000; quick 200)")
    parser.add_argument("--quiet-tenants", type=positive, help="hot: quiet tenants (99; quick 10)")
    parser.add_argument("--quiet-runs", type=positive, help="hot: runs per quiet tenant (20; quick 10)")
    parser.add_argument("--rate-runs", type=positive, help="rate: runs (1000; quick 120)")
    parser.add_argument("--chaos-runs", type=positive, help="chaos: runs (2000; quick 300)")
    parser.add_argument("--chaos-tenants", type=positive, default=5, help="chaos: tenants (5)")
    parser.add_argument("--chaos-inline-steps", type=int, help="chaos: PGBUS_INLINE_STEPS (the shipped default)")
    parser.add_argument("--kill-every", type=float, default=2.0, help="chaos: seconds between kills (2)")
    parser.add_argument("--chaos-seconds", type=float, help="chaos: kill for at most this long (240; quick 60)")
    parser.add_argument("--settle", type=float, default=60.0, help="chaos: seconds to wait once the kills stop (60)")
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a phase may take at most (900)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    sizes = {"runs": (10_000, 300), "tenants": (100, 10), "overhead_runs": (1000, 100), "repeat": (1, 1),
             "hot_runs": (5000, 200), "quiet_tenants": (99, 10), "quiet_runs": (20, 10), "rate_runs": (1000, 120),
             "chaos_runs": (2000, 300), "chaos_seconds": (240.0, 60.0)}
    for name, (full, quick) in sizes.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    return args


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM: stop the workers and drop the databases on the way out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    parts = args.only or list(PARTS)
    logdir = tempfile.mkdtemp(prefix="pgbus-bench-flow-")
    began = datetime.now().astimezone()
    load_start = loadavg()
    print(f"bench.flow: parts {', '.join(parts)}; {args.workers} workers, {os.cpu_count()} cores,"
          f" {began.isoformat(timespec='seconds')}, load average {load_start}; worker logs in {logdir}", flush=True)
    bench = Bench(args, logdir)
    print(f"engine: pgbus-flask at {bench.revision}", flush=True)
    summary: dict[str, Any] = {}
    try:
        for part in parts:
            summary[part] = globals()[f"part_{part}"](bench)
    finally:
        bench.close()
    took = (datetime.now().astimezone() - began).total_seconds()
    print(f"\nbench.flow took {took / 60:.1f} min; load average at the start {load_start}, at the end {loadavg()}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"when": began.isoformat(timespec="seconds"), "revision": bench.revision, "args": vars(args),
                       "load_start": load_start,
                       "load_end": loadavg(), "parts": summary}, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
