"""Prometheus counters and histograms of this process: step attempts, step durations, queue waits, sweeps.

The runner and the sweep call the functions below where an outcome is already known
(after its transaction committed): no database or Redis round trip is added, and each
call is a dictionary lookup and a ``prometheus_client`` increment or observation.
Without ``prometheus-client`` installed every function is a no-op.

The values live in :data:`REGISTRY` (not ``prometheus_client``'s default registry, so
the dashboard's ``/metrics`` shows pgbus's metrics and nothing else of the host app's).
A host app that already serves its own exposition can add them to it with
``prometheus_client.REGISTRY.register(pgbus_flask.metrics.REGISTRY)``.

A forking worker's horse does not touch the values: :func:`capture` makes it keep its
observations in a list that :func:`encode` turns into bytes for the parent, which
:func:`replay` applies to its own values (see ``pgbus_flask.worker.runner`` and
docs/metrics.md for why a memory file and not prometheus_client's multiprocess mode).
The names, labels and meanings are listed in docs/metrics.md.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

log = logging.getLogger("pgbus_flask")

try:
    import prometheus_client
except ImportError:  # the metrics extra is not installed: everything below is a no-op
    prometheus_client = None  # type: ignore[assignment]

#: Whether prometheus-client is importable here.
AVAILABLE = prometheus_client is not None

#: The outcomes of ``pgbus_step_attempts_total``: what became of an attempt.
STEP_OUTCOMES = ("completed", "failed", "paused", "reattempted", "skipped", "cancelled", "fanned_out", "late",
                 "stalled", "timed_out")
#: The actions of ``pgbus_sweep_actions_total`` (fields of pgbus_flask.sweep.SweepReport).
SWEEP_ACTIONS = ("schedules_started", "stalled", "resent", "wait_timeouts", "children_failed", "children_resent",
                 "deleted_runs", "slots_granted", "rates_woken")
#: The parts of a sweep (``pgbus_sweep_errors_total``).
SWEEP_PARTS = ("schedules", "stalled", "overdue", "expired_waits", "lost_children", "child_runs", "flow", "retention",
               "fold_counts", "fold_insights")

#: Steps last from milliseconds (a no-op step) to an hour (a step's default timeout is 10 minutes).
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0,
                    3600.0)
#: A job waits from milliseconds (an idle worker) to the stall threshold and beyond (a backlog).
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
#: A sweep with nothing to do takes milliseconds; one that deletes old runs, seconds.
SWEEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# What each observation updates: (kind, labels, value) is also what a horse sends its parent.
ATTEMPT, DURATION, QUEUE_WAIT, SWEEP_DURATION, SWEEP_ACTION, SWEEP_ERROR = range(6)
_COUNTERS = frozenset((ATTEMPT, SWEEP_ACTION, SWEEP_ERROR))

REGISTRY: Any = None
_METRICS: dict[int, Any] = {}
if prometheus_client is not None:
    REGISTRY = prometheus_client.CollectorRegistry(auto_describe=True)
    _METRICS = {
        ATTEMPT: prometheus_client.Counter(
            "pgbus_step_attempts", "Step attempts that ended, by workflow class, step and outcome",
            ["workflow_class", "step", "outcome"], registry=REGISTRY),
        DURATION: prometheus_client.Histogram(
            "pgbus_step_duration_seconds", "How long a step's code ran, by workflow class and step",
            ["workflow_class", "step"], buckets=DURATION_BUCKETS, registry=REGISTRY),
        QUEUE_WAIT: prometheus_client.Histogram(
            "pgbus_step_queue_wait_seconds",
            "Time from a step being due and sent to a worker starting it (step jobs; inline steps do not queue)",
            ["workflow_class", "step"], buckets=WAIT_BUCKETS, registry=REGISTRY),
        SWEEP_DURATION: prometheus_client.Histogram(
            "pgbus_sweep_duration_seconds", "How long a sweep took (sweeps that got the lock)",
            buckets=SWEEP_BUCKETS, registry=REGISTRY),
        SWEEP_ACTION: prometheus_client.Counter(
            "pgbus_sweep_actions", "What the sweeps of this process did, by action", ["action"], registry=REGISTRY),
        SWEEP_ERROR: prometheus_client.Counter(
            "pgbus_sweep_errors", "Sweep parts that failed (the other parts still ran), by part", ["part"],
            registry=REGISTRY),
    }
    for _action in SWEEP_ACTIONS:  # every action shows from the start, at 0
        _METRICS[SWEEP_ACTION].labels(_action)
    for _part in SWEEP_PARTS:
        _METRICS[SWEEP_ERROR].labels(_part)

#: ``(kind, labels)`` -> the bound ``inc`` or ``observe`` of that series: the hot path's one lookup.
_series: dict[tuple[int, tuple[str, ...]], Callable[[float], None]] = {}
#: Observations kept for the parent process instead (a forking worker's horse), see capture().
_captured: list[tuple[int, tuple[str, ...], float]] | None = None
_enabled = AVAILABLE


def enabled() -> bool:
    """Whether observations are recorded (prometheus-client is installed and nobody turned them off)."""
    return _enabled


def set_enabled(on: bool) -> None:
    """Turn recording on or off in this process (benchmarks compare both); on needs prometheus-client."""
    global _enabled
    _enabled = bool(on) and AVAILABLE


def _record(kind: int, labels: tuple[str, ...], value: float) -> None:
    if _captured is not None:
        _captured.append((kind, labels, value))
        return
    update = _series.get((kind, labels))
    if update is None:
        metric = _METRICS[kind]
        child = metric.labels(*labels) if labels else metric
        update = child.inc if kind in _COUNTERS else child.observe
        _series[(kind, labels)] = update
    update(value)


def step_attempt(workflow_class: str, step: str, outcome: str, seconds: float | None = None) -> None:
    """An attempt ended with ``outcome`` (one of :data:`STEP_OUTCOMES`); ``seconds``: how long its
    code ran, when it ran in this process."""
    if not _enabled:
        return
    _record(ATTEMPT, (workflow_class, step, outcome), 1.0)
    if seconds is not None:
        _record(DURATION, (workflow_class, step), seconds)


def queue_wait(workflow_class: str, step: str, seconds: float) -> None:
    """A step job's attempt started ``seconds`` after its step was due and sent."""
    if _enabled:
        _record(QUEUE_WAIT, (workflow_class, step), max(seconds, 0.0))


def sweep_error(part: str) -> None:
    """A part of a sweep failed (the others still ran)."""
    if _enabled:
        _record(SWEEP_ERROR, (part,), 1.0)


def sweep_done(seconds: float, actions: Mapping[str, int]) -> None:
    """A sweep that held the lock took ``seconds`` and did ``actions`` (action -> count)."""
    if not _enabled:
        return
    _record(SWEEP_DURATION, (), seconds)
    for action, count in actions.items():
        if count:
            _record(SWEEP_ACTION, (action,), float(count))


def capture() -> None:
    """From now on keep this process's observations for :func:`encode` instead of recording them
    (a forking worker's horse: its values are a copy its parent never sees)."""
    global _captured
    _captured = []


def encode() -> bytes:
    """The observations kept since :func:`capture`, as bytes for :func:`replay`; the list starts empty again."""
    global _captured
    kept, _captured = (_captured or []), ([] if _captured is not None else None)
    return json.dumps(kept, separators=(",", ":")).encode()


def replay(data: bytes) -> int:
    """Record the observations another process :func:`encode`\\ d; how many there were. Anything that is
    not such a list (a horse killed while writing it) is logged and dropped."""
    if not data or not _enabled:
        return 0
    try:
        observations = [(int(kind), tuple(str(label) for label in labels), float(value))
                        for kind, labels, value in json.loads(data)]
    except (ValueError, TypeError) as exc:
        log.warning("pgbus metrics: dropped %d bytes of a horse's observations that could not be read (%s)",
                    len(data), exc)
        return 0
    for kind, labels, value in observations:
        if kind in _METRICS:
            _record(kind, labels, value)
    return len(observations)


class Forward:
    """A collector that yields what ``registry`` holds, so that one exposition can join several registries."""

    def __init__(self, registry: Any) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Any]:
        yield from self.registry.collect()


def registry_of(*collectors: Any) -> Any:
    """A registry holding ``collectors`` (each registry given is forwarded), without describing them at
    registration (a collector that reads PostgreSQL reads it only when scraped)."""
    assert prometheus_client is not None
    joined = prometheus_client.CollectorRegistry(auto_describe=False)
    for collector in collectors:
        joined.register(Forward(collector) if isinstance(collector, prometheus_client.CollectorRegistry)
                        else collector)
    return joined


def exposition(registry: Any) -> tuple[bytes, str]:
    """``registry`` in Prometheus's text format, and its content type."""
    assert prometheus_client is not None
    return prometheus_client.generate_latest(registry), prometheus_client.CONTENT_TYPE_LATEST


def serve(port: int, host: str = "127.0.0.1", extra: Iterable[Any] = ()) -> Any:
    """Serve this process's metrics (and prometheus_client's default registry: process_*, python_*, and
    anything the app registered there) over HTTP on ``host:port`` from a daemon thread; the server.
    Raises OSError when the port cannot be bound."""
    assert prometheus_client is not None
    registry = registry_of(REGISTRY, prometheus_client.REGISTRY, *extra)
    started = prometheus_client.start_http_server(port, addr=host, registry=registry)
    return started[0] if isinstance(started, tuple) else started


def value(name: str, labels: Mapping[str, str] | None = None) -> float | None:
    """The current value of one sample of :data:`REGISTRY` (tests and the CLI read it), None if absent."""
    if REGISTRY is None:
        return None
    found = REGISTRY.get_sample_value(name, dict(labels or {}))
    return None if found is None else float(found)
