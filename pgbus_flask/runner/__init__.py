"""The runner: the only code that changes a run's or a step's status.

Every transition is a guarded ``UPDATE ... WHERE status IN (...)`` made while
holding the run's row lock (``SELECT ... FOR UPDATE``), and writes its audit
event in the same transaction. A guarded update that moves no row did not
happen. No lock is held while user step code runs: an attempt is a claim
transaction, the step's code, then an outcome transaction.

One module per concern, lowest first (each imports only those above it):

- ``rows``: row reads, the run lock, ``move_run`` / ``move_step`` (the only
  status-changing UPDATEs) and audit events;
- ``scheduling``: a new scheduled attempt, the step after, and the
  after-commit enqueue (the only place a step job is sent);
- ``limits``: flow control at a claim (concurrency slots, rate starts) and sending what a
  given-back slot woke (docs/flow-control.md);
- ``policy``: what a failed attempt does next (reattempt, pause, cancel, skip);
- ``deadlines``: an attempt that stalled, a wait that timed out (the sweep finds them);
- ``fanout``: a step's batch of child jobs;
- ``children``: a step's child workflow runs (started with its outcome, waited on, settled
  when the last one ends);
- ``inline``: inline continuation (a step job claiming and running the next step);
- ``attempt``: a step attempt (claim, the step's code, its outcome);
- ``start``: a new run; ``signals``: sending and delivering signals;
- ``allowed``: which verbs a run allows now and what resume would do;
- ``verbs``: pause, resume, skip, cancel ... as the API, CLI and dashboard call them.

Nothing outside this package writes a status: the sweep, the jobs and the
verbs all come through here (``tests/unit/test_layers.py`` checks it).
"""

from __future__ import annotations

from . import verbs
from .allowed import ResumePlan, available_actions, outdated, resume_plan, step_gone
from .attempt import Claim, claim_attempt, park_on_signal, record_outcome, run_attempt
from .children import cancel_children, cancel_run, child_key, settle, sweep_children
from .deadlines import expire_wait, fail_stalled
from .fanout import finish_batch, open_batch, record_child, resend_child
from .inline import Budget, Continued
from .limits import declare, regrant, wake_rate
from .policy import fail_attempt
from .rows import (
    RESCHEDULE_EARLIEST,
    RESCHEDULE_LATEST,
    Row,
    cap,
    check_who,
    completed_outputs,
    error_columns,
    error_name,
    latest_step,
    load_class,
    lock_run,
    move_run,
    move_step,
    on_run_ended,
    record_event,
    run_ended,
    spec_of,
    worker_name,
)
from .scheduling import advance, next_send, resend_lost, resend_step, schedule_step, step_job_id
from .signals import SignalResult, send_signal
from .start import Started, start
from .verbs import *  # noqa: F403 (the verbs, named in verbs.__all__)

__all__ = [
    "RESCHEDULE_EARLIEST",
    "RESCHEDULE_LATEST",
    "Budget",
    "Claim",
    "Continued",
    "ResumePlan",
    "Row",
    "SignalResult",
    "Started",
    "advance",
    "available_actions",
    "cancel_children",
    "cancel_run",
    "cap",
    "check_who",
    "child_key",
    "claim_attempt",
    "completed_outputs",
    "declare",
    "error_columns",
    "error_name",
    "expire_wait",
    "fail_attempt",
    "fail_stalled",
    "finish_batch",
    "latest_step",
    "load_class",
    "lock_run",
    "move_run",
    "move_step",
    "next_send",
    "on_run_ended",
    "open_batch",
    "outdated",
    "park_on_signal",
    "record_child",
    "record_event",
    "record_outcome",
    "regrant",
    "resend_child",
    "resend_lost",
    "resend_step",
    "resume_plan",
    "run_attempt",
    "run_ended",
    "schedule_step",
    "send_signal",
    "settle",
    "spec_of",
    "start",
    "step_gone",
    "step_job_id",
    "sweep_children",
    "wake_rate",
    "worker_name",
    *verbs.__all__,
]
