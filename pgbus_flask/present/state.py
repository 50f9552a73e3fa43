"""What a run is doing, in one badge and one sentence: a pure function of its row.

:func:`present` takes a run's row with its latest step (the ``step_*``
columns of :func:`pgbus_flask.queries.list_runs`, plus ``batch_done`` /
``batch_total``, and ``limit_line`` for a step in line for a limit or a
rate) and returns the badge, its tone, and the key and arguments
of the "what happens next" sentence, and whether the run needs attention now
(its stuck reason, from the attention columns the runner keeps on the row).
It does no I/O and translates nothing:
:mod:`pgbus_flask.present.sentences` turns the key into words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from .. import states

#: Badge -> tone (a CSS class suffix).
BADGE_TONES: dict[str, str] = {
    "scheduled": "gray",
    "queued": "blue",
    "overdue": "yellow",
    "running": "blue",
    "possibly_stalled": "yellow",
    "waiting": "yellow",
    "paused": "yellow",
    "paused_error": "red",
    "stalled": "red",
    "finished": "green",
    "cancelled": "gray",
}

#: Every next-step message key :func:`present` can return.
NEXT_KEYS = (
    "scheduled", "queued", "overdue", "running", "possibly_stalled", "waiting_signal", "waiting_signal_deadline",
    "waiting_any_signal", "waiting_batch", "waiting_children", "waiting_slot", "waiting_rate", "waiting_limit",
    "waiting", "paused_error", "paused_failed", "stalled", "paused_manual", "finished", "cancelled",
)


@dataclass(frozen=True)
class Presentation:
    """A run's badge, its tone, and its next-step sentence as a message key and arguments; and
    ``attention``, the stuck reason it needs a person for now (None when it needs none).

    Argument kinds by name: ``step``/``signal``/``error``/``limit``/``rate`` are
    names shown as code, ``key`` a limit's key (text from the app), ``batch`` a
    batch name linked to ``batch_id``, ``ago``/``time`` moments, ``since`` the
    start of a stretch, the rest plain values.
    """

    badge: str
    tone: str
    next_key: str
    next_args: dict[str, Any] = field(default_factory=dict)
    attention: str | None = None


def batch_name(workflow_class: str, step: str) -> str:
    """A fan-out batch as the dashboard names it: its run's class and its step, "OrderWorkflow#notify_vendors"."""
    return f"{workflow_class}#{step}"


def _step(row: Mapping[str, Any], name: str) -> Any:
    """A latest-step column: ``step_<name>`` (list rows) or ``<name>`` of ``row["latest_step"]``."""
    latest = row.get("latest_step")
    if isinstance(latest, Mapping):
        return latest.get(name)
    return row.get(f"step_{name}")


def _result(badge: str, key: str, /, **args: Any) -> Presentation:
    return Presentation(badge, BADGE_TONES[badge], key, args)


def stuck_reason(row: Mapping[str, Any], *, now: datetime, stall_threshold: timedelta,
                 waiting_threshold: timedelta | None) -> str | None:
    """The stuck reason a run needs a person for now, from its attention columns: the runs
    :func:`pgbus_flask.queries.stuck_reason_counts` counts, and no others (None for a row without
    those columns)."""
    reason, since, status = row.get("attention_reason"), row.get("attention_since"), row.get("status")
    if reason in states.PAUSED_REASONS:
        return str(reason) if status == "paused" else None
    if since is None:
        return None
    if reason == "overdue" and status == "ready" and since < now - stall_threshold:
        return "overdue"
    if (reason == "waiting_overdue" and status == "waiting" and waiting_threshold is not None
            and since < now - waiting_threshold):
        return "waiting_overdue"
    return None


def present(row: Mapping[str, Any], *, now: datetime, stall_threshold: timedelta,
            wait_for: str | None = None, waiting_threshold: timedelta | None = None) -> Presentation:
    """The badge and next-step sentence of a run, and the stuck reason it needs a person for.

    :param row: the run's row with its latest step, as ``step_*`` columns or a ``latest_step`` dict;
        for a step in line for a limit or a rate, ``limit_line``: what :func:`pgbus_flask.queries.limit_lines`
        read of that line.
    :param now: the current time (aware).
    :param stall_threshold: a scheduled step due longer than this is overdue.
    :param wait_for: the signal the current step waits for, when the class is known here.
    :param waiting_threshold: ``PGBUS_WAITING_THRESHOLD`` (None: waiting never needs attention).
    """
    shown = _present(row, now=now, stall_threshold=stall_threshold, wait_for=wait_for)
    attention = stuck_reason(row, now=now, stall_threshold=stall_threshold, waiting_threshold=waiting_threshold)
    return replace(shown, attention=attention) if attention else shown


def _in_line(row: Mapping[str, Any], step: Any, name: str) -> Presentation:
    """A run waiting in line for a concurrency slot (``waiting_slot``) or a rate's start
    (``waiting_rate``); ``waiting_limit`` when ``row["limit_line"]`` (read by
    :func:`pgbus_flask.queries.limit_lines`) does not say what the limit allows."""
    since = _step(row, "blocked_since") or row.get("updated_at")
    key = _step(row, "blocked_key")
    line = row.get("limit_line") or {}
    capacity = line.get("capacity")
    if capacity is None:
        return _result("waiting", "waiting_limit", step=step, limit=name, since=since)
    if key is None:  # a rate's line has no key
        return _result("waiting", "waiting_rate", step=step, rate=name, capacity=int(capacity),
                       per_seconds=float(line.get("per_seconds") or 1.0), time=line.get("wake_at"), since=since)
    return _result("waiting", "waiting_slot", step=step, limit=name, kind=line.get("kind") or "step", key=str(key),
                   capacity=int(capacity), running=int(line.get("running") or 0),
                   waiting=int(line.get("waiting") or 0), since=since)


def _present(row: Mapping[str, Any], *, now: datetime, stall_threshold: timedelta,
             wait_for: str | None) -> Presentation:
    status = row["status"]
    step = _step(row, "step_name") or row.get("current_step")
    step_status = _step(row, "status")
    attempt = _step(row, "attempt") or 1
    if status == "finished":
        return _result("finished", "finished", ago=row.get("finished_at") or row.get("updated_at"))
    if status == "cancelled":
        return _result("cancelled", "cancelled", ago=row.get("finished_at") or row.get("updated_at"))
    if status == "paused":
        since = row.get("paused_at") or row.get("updated_at")
        error_class = _step(row, "error_class")
        if step_status == "failed" and error_class == states.STALLED_ERROR:
            return _result("stalled", "stalled", step=step, since=since, attempt=attempt)
        if step_status == "failed" and _step(row, "outcome") not in states.REQUESTED_OUTCOMES:
            if not error_class:
                return _result("paused_error", "paused_failed", step=step, since=since, attempt=attempt)
            return _result("paused_error", "paused_error", step=step, error=error_class, since=since,
                           attempt=attempt, message=_step(row, "error_message"))
        return _result("paused", "paused_manual", step=step, since=since)
    if status == "running":
        started = _step(row, "started_at")
        stall_at = _step(row, "stall_at")
        if stall_at is not None and stall_at < now:
            return _result("possibly_stalled", "possibly_stalled", step=step, ago=stall_at, attempt=attempt)
        return _result("running", "running", step=step, ago=started or row.get("updated_at"), attempt=attempt)
    if status == "waiting":
        blocked_on = _step(row, "blocked_on")
        if blocked_on is not None and step_status == "scheduled":
            return _in_line(row, step, str(blocked_on))
        since = _step(row, "waiting_since") or row.get("updated_at")
        if _step(row, "batch_id") is not None:
            # Named as the reference names it: "OrderWorkflow#notify_vendors".
            return _result("waiting", "waiting_batch", step=step, batch=batch_name(row["workflow_class"], str(step)),
                           batch_id=_step(row, "batch_id"),
                           done=int(row.get("batch_done") or 0), total=int(row.get("batch_total") or 0),
                           failed=int(row.get("batch_failed") or 0), ago=since)
        children = _step(row, "children") or len(_step(row, "child_ids") or ())
        if step_status == "waiting" and children:
            return _result("waiting", "waiting_children", step=step, total=int(children), since=since)
        if step_status != "waiting":
            return _result("waiting", "waiting", step=step, since=since)
        timeout_at = _step(row, "timeout_at")
        if wait_for is None:
            return _result("waiting", "waiting_any_signal", step=step, since=since)
        if timeout_at is not None:
            return _result("waiting", "waiting_signal_deadline", signal=wait_for, step=step, since=since,
                           time=timeout_at)
        return _result("waiting", "waiting_signal", signal=wait_for, step=step, since=since)
    # ready: its step is scheduled (for later, due now, or overdue)
    scheduled_at = _step(row, "scheduled_at") or row.get("updated_at") or now
    if scheduled_at > now:
        return _result("scheduled", "scheduled", step=step, time=scheduled_at)
    if scheduled_at < now - stall_threshold:
        return _result("overdue", "overdue", step=step, ago=scheduled_at)
    return _result("queued", "queued", step=step, ago=scheduled_at)
