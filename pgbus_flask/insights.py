"""Insights per workflow class: the pipeline, the funnel, step durations, failures, throughput.

Read from roll-ups, never from every step (migration 0008):

- ``pgbus_run_counts`` counts ongoing runs by class, status and current step (the pipeline);
- a trigger on the audit trail adds a row to ``pgbus_insight_deltas`` for every run started,
  finished or cancelled, every step a run reaches for the first time, and every attempt that
  ends (its outcome, error class, and the bins of its run time and queue wait), in the
  transaction of the event: each counts exactly once, and no writer waits on a counter row;
- the sweep folds the deltas into ``pgbus_insights`` (:func:`fold`): one row per class, bucket,
  step, kind, label and bin. Runs started, finished and cancelled and attempts ended (the
  throughput chart) are kept by 5 minutes, hourly once older than two days; the funnel, the
  durations and the errors by the hour, by the UTC day once older than two days; all for 32 days;
- a read sums the class's roll-ups and its deltas not folded yet, the figures and the throughput
  chart in one statement (one snapshot: a fold that commits meanwhile moves rows from one table to
  the other, never counted twice or missed). So insights count a run the moment its transaction
  commits; the deltas a read adds are what was written since the last fold, about one sweep
  interval (``PGBUS_SWEEP_INTERVAL``) of traffic while workers run.

The funnel, durations and errors of a window count whole hours (whole days beyond two days) from
the one the window starts in. Durations are kept as
histograms with bins 1.5x wide: a percentile is the geometric middle of its bin (within about
±22%), never above the longest attempt seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from psycopg import Connection

from . import db
from .errors import InvalidInput

if TYPE_CHECKING:
    from .engine import Engine

#: The windows a page or the API may ask for, and the width of the throughput buckets in each.
WINDOWS: dict[str, tuple[timedelta, timedelta]] = {
    "1h": (timedelta(hours=1), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(hours=1)),
    "7d": (timedelta(days=7), timedelta(hours=6)),
    "30d": (timedelta(days=30), timedelta(days=1)),
}
DEFAULT_WINDOW = "24h"
#: Rolled-up rows older than this are deleted by the sweep (the longest window, and a margin).
KEEP = timedelta(days=32)
#: Rows older than this are merged into hourly rows.
HOURLY_AFTER = timedelta(days=2)
#: The most delta rows one sweep folds (the rest wait for the next).
FOLD_BATCH = 100_000
BIN_RATIO = 1.5

#: The kinds kept by 5 minutes (the throughput chart's series); every other kind is kept by the hour
#: (pgbus_flask/sql/insights.sql spells them out).
FINE = ("started", "finished", "cancelled", "attempt")


def fold(conn: Connection[Any], cursor: datetime | None) -> tuple[int, datetime]:
    """Fold the deltas, compact old rows, drop expired ones: ``(delta rows folded, new cursor)``.
    ``cursor`` is where the last compaction stopped (None: from the start)."""
    folded = db.run(conn, "insights_fold", {"batch": FOLD_BATCH, "hourly": HOURLY_AFTER}).rowcount
    until = db.fetch_one(conn, "insights_compact_until", (HOURLY_AFTER,))["until"]  # type: ignore[index]
    db.run(conn, "insights_compact", {"since": cursor or datetime(2000, 1, 1).astimezone(), "hourly": HOURLY_AFTER})
    db.run(conn, "insights_expire", (KEEP,))
    return folded, until - timedelta(days=1)


@dataclass
class StepInsight:
    step: str
    now_by_status: dict[str, int] = field(default_factory=dict)
    reached: int = 0
    completed_attempts: int = 0
    failed_attempts: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    max_ms: float | None = None
    queue_p50_ms: float | None = None
    queue_p95_ms: float | None = None
    #: of the runs started in the window that reached this step, how many are still there or ended there
    stopped_here: int = 0
    errors: list[tuple[str, int]] = field(default_factory=list)

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts / attempts that ended (completed or failed) in the window; None when none ended."""
        ended = self.completed_attempts + self.failed_attempts
        return self.failed_attempts / ended if ended else None

    def as_json(self) -> dict[str, Any]:
        rate = self.failure_rate
        return {"step": self.step, "now_by_status": self.now_by_status, "reached": self.reached,
                "completed_attempts": self.completed_attempts, "failed_attempts": self.failed_attempts,
                "failure_rate": round(rate, 4) if rate is not None else None,
                "p50_ms": self.p50_ms, "p95_ms": self.p95_ms, "max_ms": self.max_ms,
                "queue_p50_ms": self.queue_p50_ms, "queue_p95_ms": self.queue_p95_ms,
                "stopped_here": self.stopped_here,
                "errors": [{"error_class": name, "count": count} for name, count in self.errors]}


@dataclass
class Bucket:
    start: datetime
    started: int = 0
    finished: int = 0
    failed: int = 0


@dataclass
class Insights:
    workflow_class: str
    window: str
    since: datetime
    until: datetime
    width: timedelta
    started: int = 0
    finished: int = 0
    cancelled: int = 0
    #: failed attempts in the window
    failed: int = 0
    #: of the runs started in the window: how many finished, were cancelled
    funnel_started: int = 0
    funnel_finished: int = 0
    funnel_cancelled: int = 0
    steps: list[StepInsight] = field(default_factory=list)
    buckets: list[Bucket] = field(default_factory=list)
    #: (step, error class, failed attempts), the most first
    errors: list[tuple[str, str, int]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "workflow_class": self.workflow_class, "window": self.window, "since": self.since.isoformat(),
            "until": self.until.isoformat(), "bucket_seconds": int(self.width.total_seconds()),
            "started": self.started, "finished": self.finished, "cancelled": self.cancelled, "failed": self.failed,
            "funnel": {"started": self.funnel_started, "finished": self.funnel_finished,
                       "cancelled": self.funnel_cancelled},
            "steps": [s.as_json() for s in self.steps],
            "buckets": [{"start": b.start.isoformat(), "started": b.started, "finished": b.finished,
                         "failed": b.failed} for b in self.buckets],
            "errors": [{"step": s, "error_class": e, "count": n} for s, e, n in self.errors],
        }


def _bin_value(bin_: int) -> float:
    """The geometric middle of a bin, in ms (bin 0: under 1 ms)."""
    return 0.5 if bin_ <= 0 else BIN_RATIO ** (bin_ - 0.5)


def percentile(bins: dict[int, int], q: float, longest: float | None) -> float | None:
    """The ``q`` quantile (0..1) of a histogram ``{bin: count}``, in ms, never above ``longest``."""
    total = sum(bins.values())
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for bin_ in sorted(bins):
        seen += bins[bin_]
        if seen >= rank:
            value = _bin_value(bin_)
            return round(min(value, longest) if longest is not None else value, 1)
    return None  # pragma: no cover - the loop always reaches rank


def window_of(value: str | None) -> str:
    """``value`` when it names a window (1h, 24h, 7d, 30d); the default for none; InvalidInput otherwise."""
    if value is None or value == "":
        return DEFAULT_WINDOW
    if value not in WINDOWS:
        raise InvalidInput("window", f"must be one of {', '.join(WINDOWS)}, not {value[:40]!r}")
    return value


def insights(engine: Engine, workflow_class: str, window: str | None = None,
             step_names: list[str] | None = None) -> Insights:
    """The insights of ``workflow_class`` over ``window`` (one of :data:`WINDOWS`).

    ``step_names``: the class's steps in declaration order (steps seen in the roll-ups but no
    longer declared follow them)."""
    window = window_of(window)
    span, width = WINDOWS[window]
    with engine.db.connection() as conn:
        now = db.fetch_one(conn, "now")["now"]  # type: ignore[index]
        origin = datetime(2000, 1, 1, tzinfo=now.tzinfo)
        # the first bucket is the one the window starts in, so a window holds whole buckets
        first = origin + ((now - span) - origin) // width * width
        coarse = (first.replace(minute=0, second=0, microsecond=0) if span <= HOURLY_AFTER
                  else first.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0))
        params = {"cls": workflow_class, "since": first, "coarse": coarse, "width": width, "origin": origin}
        rows = db.fetch_all(conn, "insights_read", params)
        at_now = db.fetch_all(conn, "insights_now", params)
    result = Insights(workflow_class, window, first, now, width)
    folding = _Folding(result, step_names or [])
    series = []
    for row in rows:
        if row["series"]:
            series.append(row)
        else:
            folding.add(row)
    for row in at_now:
        if row["step"]:
            folding.step(row["step"]).now_by_status[row["status"]] = int(row["runs"])
    result.steps = folding.finish()
    result.buckets = _buckets(first, now, width, series)
    return result


#: Roll-up kinds that count runs, and the :class:`Insights` field each adds to.
_RUN_COUNTS = {"started": "started", "finished": "finished", "cancelled": "cancelled",
               "run_finished": "funnel_finished", "run_cancelled": "funnel_cancelled"}


class _Folding:
    """The roll-up rows of a window folded into an :class:`Insights` and its steps."""

    def __init__(self, result: Insights, step_names: list[str]) -> None:
        self.result = result
        self.steps: dict[str, StepInsight] = {name: StepInsight(name) for name in step_names}
        self.declared = len(step_names)
        self.durations: dict[str, dict[int, int]] = {}
        self.waits: dict[str, dict[int, int]] = {}
        self.longest: dict[str, float] = {}
        self.longest_wait: dict[str, float] = {}

    def step(self, name: str) -> StepInsight:
        if name not in self.steps:
            self.steps[name] = StepInsight(name)
        return self.steps[name]

    def add(self, row: dict[str, Any]) -> None:
        result, name, kind, label, n = self.result, row["step"], row["kind"], row["label"], int(row["n"])
        if kind in _RUN_COUNTS:
            field_name = _RUN_COUNTS[kind]
            setattr(result, field_name, getattr(result, field_name) + n)
        elif kind == "reached":
            self.step(name).reached += n
        elif kind == "attempt" and label == "failed":
            self.step(name).failed_attempts += n
            result.failed += n
        elif kind == "attempt":
            self.step(name).completed_attempts += n
        elif kind == "error":
            self.step(name).errors.append((label, n))
            result.errors.append((name, label, n))
        elif kind in ("duration", "wait"):
            bins, longest = (self.durations, self.longest) if kind == "duration" else (self.waits, self.longest_wait)
            bins.setdefault(name, {})[int(row["bin"])] = bins.get(name, {}).get(int(row["bin"]), 0) + n
            if row["max_ms"] is not None:
                longest[name] = max(longest.get(name, 0.0), float(row["max_ms"]))

    def finish(self) -> list[StepInsight]:
        """The steps in order with their percentiles, and the funnel."""
        for name, insight in self.steps.items():
            bins = self.durations.get(name, {})
            insight.p50_ms = percentile(bins, 0.5, self.longest.get(name))
            insight.p95_ms = percentile(bins, 0.95, self.longest.get(name))
            insight.max_ms = round(self.longest[name], 1) if name in self.longest else None
            insight.queue_p50_ms = percentile(self.waits.get(name, {}), 0.5, self.longest_wait.get(name))
            insight.queue_p95_ms = percentile(self.waits.get(name, {}), 0.95, self.longest_wait.get(name))
            insight.errors.sort(key=lambda item: (-item[1], item[0]))
        # the declared steps in their order, then the others by name (the rows come in no set order)
        listed = list(self.steps.values())
        ordered = listed[:self.declared] + sorted(listed[self.declared:], key=lambda insight: insight.step)
        result = self.result
        # the funnel: runs started in the window are the ones that reached the first step
        result.funnel_started = ordered[0].reached if ordered else 0
        for here, after in zip(ordered, [*ordered[1:], None][: len(ordered)], strict=True):
            onward = after.reached if after is not None else result.funnel_finished
            here.stopped_here = max(here.reached - onward, 0)
        result.errors.sort(key=lambda item: (-item[2], item[0], item[1]))
        return ordered


def _buckets(first: datetime, now: datetime, width: timedelta, series: list[dict[str, Any]]) -> list[Bucket]:
    """The window's buckets, from ``first`` to ``now``, with the series' counts."""
    counts: dict[datetime, Bucket] = {}
    start = first
    while start <= now:
        counts[start] = Bucket(start)
        start += width
    for row in series:
        bucket = counts.setdefault(row["b"], Bucket(row["b"]))
        kind = "failed" if row["kind"] == "attempt" else row["kind"]  # failed attempts
        setattr(bucket, kind, getattr(bucket, kind) + int(row["n"]))
    return [counts[k] for k in sorted(counts)]
