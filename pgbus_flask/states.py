"""The one source of truth for every list: statuses, events, stuck reasons (the verbs: pgbus_flask.verbs)."""

from __future__ import annotations

from datetime import datetime, timezone

RUN_STATUSES = ("ready", "running", "waiting", "paused", "finished", "cancelled")
ONGOING = ("ready", "running", "waiting", "paused")
TERMINAL = ("finished", "cancelled")

STEP_STATUSES = ("scheduled", "in_progress", "waiting", "completed", "failed", "skipped", "cancelled")
OPEN_STEP = ("scheduled", "in_progress", "waiting")

SIGNAL_STATUSES = ("pending", "claimed", "consumed")
CHILD_STATUSES = ("pending", "done", "failed")

ON_ERROR = ("pause", "reattempt", "cancel", "skip")
ON_TIMEOUT = ("fail", "skip", "continue")
ON_CHILD_FAILURE = ("fail", "ignore")
#: What a step that started child workflow runs does when one of them is cancelled.
ON_CHILD_RUN_FAILURE = ("fail", "continue")

EVENTS = (
    "started", "step_scheduled", "step_started", "step_completed", "step_failed", "step_skipped",
    "step_reattempted", "paused", "resumed", "cancelled", "finished", "run_now", "rescheduled", "rerun",
    "stall_detected", "late_completion_ignored", "signal_received", "signal_claimed", "step_waiting",
    "wait_timed_out", "fan_out_opened", "fan_out_finished", "children_started", "children_finished",
    "definition_upgraded", "slot_waiting", "slot_granted", "arguments_replaced",
)

#: Flow control (docs/flow-control.md): a run holds its class limit's slot while ready or running; a
#: step attempt holds its step limit's slot while scheduled (granted) or in progress.
SLOT_HOLDING_RUN = ("ready", "running")
SLOT_HOLDING_STEP = ("scheduled", "in_progress")
#: The runs of a class limit's key that count for on_busy: holding or waiting for a slot ...
LIMIT_KEY_RUNS = ("ready", "running", "waiting")
#: ... and those that may not have started a step yet (on_busy replace).
UNSTARTED_RUN = ("ready", "waiting")

#: The audit events that start (the first) or end (the others) a stretch a run spent paused.
#: The longest signal name, in characters.
SIGNAL_NAME_LIMIT = 200

PAUSE_EVENTS = ("paused", "resumed", "cancelled", "rerun", "step_skipped", "finished")

#: What the resume plan can decide (see runner.resume_plan).
RESUME_ACTIONS = ("retry", "continue", "finish", "keep_waiting", "run", "let_finish", "step_gone")

STUCK_REASONS = ("stalled", "paused_error", "paused_manual", "overdue", "waiting_overdue")
#: The stuck reasons of paused runs (no threshold: a paused run needs a person at once).
PAUSED_REASONS = ("stalled", "paused_error", "paused_manual")
#: The status of the runs each stuck reason is found in.
STUCK_REASON_STATUS = {"stalled": "paused", "paused_error": "paused", "paused_manual": "paused", "overdue": "ready",
                       "waiting_overdue": "waiting"}

#: Outcomes of a failed attempt that did not fail: its step asked for its own pause (``self.pause()``)
#: or for a reattempt while the run was paused. A paused run on such an attempt is paused_manual.
REQUESTED_OUTCOMES = ("paused", "reattempted")

#: The error class recorded for a stalled attempt (the stuck reason "stalled" looks for it).
STALLED_ERROR = "pgbus_flask.errors.StepStalled"
WAIT_TIMEOUT_ERROR = "pgbus_flask.errors.WaitTimedOut"

#: Keys and ids PostgreSQL indexes (idempotency keys, subject ids) are refused past this many
#: UTF-8 bytes: a B-tree entry must fit in a third of a page (2,704 bytes), with the class name.
KEY_LIMIT = 1_000
#: Subject types, in UTF-8 bytes (signal names: at most 200 characters).
NAME_LIMIT = 200
#: Actors, in UTF-8 bytes.
ACTOR_LIMIT = 200

#: Reasons longer than this are refused; other strings stored in events and errors are capped.
REASON_LIMIT = 1_000
DETAIL_LIMIT = 1_000
MESSAGE_LIMIT = 4_000
BACKTRACE_LIMIT = 16_000

#: The latest moment a step can be due (what Python, PostgreSQL and RQ can all hold).
LATEST_DUE = datetime(9998, 12, 31, tzinfo=timezone.utc)

#: Seconds RQ's job timeout exceeds what a step job may run (its steps' stall deadlines,
#: plus PGBUS_INLINE_SECONDS with inline continuation): the stall deadline fires first.
JOB_TIMEOUT_MARGIN = 30

#: What a schedule does with ticks it missed (downtime, or a pause: see docs/schedules.md):
#: "skip" starts the latest tick missed by downtime (none missed while paused), "all" every one.
SCHEDULE_MISSED = ("skip", "all")
SCHEDULE_KINDS = ("cron", "interval")
#: The audit trail of a schedule: the sweep's (declared, changed, undeclared) and the operators' verbs.
SCHEDULE_EVENTS = ("declared", "changed", "undeclared", "paused", "resumed")
#: The verbs on a schedule.
SCHEDULE_ACTIONS = ("pause", "resume")
