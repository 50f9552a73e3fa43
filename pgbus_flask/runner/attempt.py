"""A step attempt: the claim, the step's code, and recording its outcome."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.types.json import Jsonb

from .. import db, messages, metrics, orm, payload, reporting, states, tracing
from ..db import Transaction
from ..definition import (
    ChildStart,
    FanOut,
    PauseRequested,
    ReattemptRequested,
    ReceivedSignal,
    SleepRequest,
    StepSpec,
    child_starts,
    due_moment,
)
from ..errors import (
    ArgumentsNotSerializable,
    DatabaseError,
    DatabaseUnavailable,
    InvalidInput,
    PgbusError,
    StepNotDefined,
    UnknownWorkflow,
    WaitUntilFailed,
)
from . import limits
from .children import start_children
from .fanout import open_batch
from .inline import Budget, Continued, continue_inline
from .policy import fail_attempt
from .rows import (
    Row,
    cap,
    consume_signal_of,
    error_columns,
    load_class,
    lock_run,
    message_details,
    move_run,
    move_step,
    now_of,
    record_event,
    remember_now,
    worker_name,
)
from .scheduling import advance, resend_step, route, schedule_step

if TYPE_CHECKING:
    from ..engine import Engine
    from ..workflow import Workflow

log = logging.getLogger("pgbus_flask")


@dataclass
class Claim:
    run: Row
    step: Row
    klass: type[Workflow]
    spec: StepSpec
    outputs: dict[str, Any] | None  # None: read on the step's first output_of()
    signal: ReceivedSignal | None
    ran: float | None = None  # seconds the step's code ran (pgbus_step_duration_seconds)


@dataclass(frozen=True)
class WaitUntilDue:
    """A due step whose ``wait_until`` its job must evaluate before claiming it (nothing was written)."""

    run: Row
    step_id: int
    step_name: str
    attempt: int
    klass: type[Workflow]
    spec: StepSpec


def count_attempt(tx: Transaction, workflow_class: str, step_name: str, outcome: str | None,
                  seconds: float | None = None) -> None:
    """Count the attempt's ``outcome`` in the metrics once ``tx`` commits (never if it rolls back)."""
    if outcome is not None and metrics.enabled():
        tx.after_commit(partial(metrics.step_attempt, workflow_class, step_name, outcome, seconds))


def queue_wait_of(step: Row) -> float:
    """Seconds from the step being due and sent to its claim (all three are PostgreSQL's clock)."""
    ready = step["scheduled_at"]
    if step["enqueued_at"] is not None and step["enqueued_at"] > ready:
        ready = step["enqueued_at"]
    return (step["started_at"] - ready).total_seconds()


def held_or_claim_signal(conn: psycopg.Connection[Any], step: Row, name: str) -> tuple[Row | None, bool]:
    """The signal an earlier attempt of this step holds, else the oldest pending one claimed now."""
    held = db.fetch_one(conn, "held_signal", (step["workflow_id"], step["workflow_id"], step["step_name"]))
    if held is not None:
        return held, False
    claimed = db.fetch_one(conn, "claim_signal", {"step": step["id"], "wid": step["workflow_id"], "name": name})
    return claimed, claimed is not None


def _received(signal: Row | None) -> ReceivedSignal | None:
    if signal is None:
        return None
    return ReceivedSignal(signal["id"], signal["name"], payload.from_json(signal["payload"]), signal["created_at"])


def claim_attempt(engine: Engine, step_id: int, job_id: str | None, *,
                  evaluated: bool = False) -> Claim | WaitUntilDue | None:
    """scheduled -> in_progress for a due step of a ready run; None makes the job a no-op.

    A due step whose wait_until is still pending is not claimed: :class:`WaitUntilDue` tells the
    job to evaluate it first (``evaluated=True`` then claims it all the same).
    """
    with engine.db.transaction(pipeline=True) as tx:
        # The run's row lock, the step's name and now(), in one round trip.
        run = db.fetch_one(tx, "lock_run_of_step", (step_id,))
        if run is None or run["status"] != "ready":
            return None
        remember_now(tx, run["tx_now"])
        step_name = run["claim_step"]
        klass, spec, problem = _definition_of(engine, run["workflow_class"], step_name)
        if run["claim_pending"] and not evaluated and spec is not None and spec.wait_until is not None:
            assert klass is not None
            return WaitUntilDue(run, step_id, step_name, run["claim_attempt"], klass, spec)
        started = None
        if problem is None and run["claim_due"] and limits.limited(klass, spec):  # type: ignore[arg-type]
            assert klass is not None and spec is not None
            try:
                may_run, started = limits.take(engine, tx, run, step_id, klass, spec,
                                               partial(_instance, engine, run, klass, step_name, run["claim_attempt"]))
            except InvalidInput as exc:  # its limit's key callable failed: a person must look
                problem = exc
            else:
                if not may_run:
                    return None  # in line: a given-back slot or the rate's wake-up sends it again
        # Claim the attempt and mark the run running in one statement.
        step = db.fetch_one(
            tx.conn, "claim_attempt",
            {"id": step_id, "wid": run["workflow_id"], "job": job_id, "worker": worker_name(),
             "rev": engine.settings.app_revision, "runnable": problem is None, "started": started,
             "timeout": route(engine, klass, step_name)[1].total_seconds()},
        )
        if step is None:
            return None
        if problem is not None or klass is None or spec is None:
            assert problem is not None
            _pause_unrunnable(tx, run, step_id, step_name, problem)
            return None
        run = {**run, "status": "running"}
        record_event(tx, run["workflow_id"], "step_started", "system", step=step, details={"worker": step["worker"]})
        signal: Row | None = None
        if spec.wait_for and not step["wait_timed_out"]:
            signal = _signal_for(tx, run, step, spec.wait_for)
            if signal is None:
                park_on_signal(tx, run, step, spec)
                return None
        return Claim(run, step, klass, spec, None, _received(signal))


def _definition_of(engine: Engine, workflow_class: str,
                   step_name: str) -> tuple[type[Workflow] | None, StepSpec | None, Exception | None]:
    """The class and step a claim runs, or the problem that keeps any code here from running it."""
    klass = load_class(engine, workflow_class)
    if klass is None:
        return None, None, UnknownWorkflow(workflow_class)
    try:
        return klass, klass.step_spec(step_name), None
    except StepNotDefined as exc:
        return klass, None, exc


def _pause_unrunnable(tx: Transaction, run: Row, step_id: int, step_name: str, problem: Exception) -> None:
    """Nothing here can run the claimed step (its class or step is unknown): record why and pause for a person."""
    error = error_columns(problem, trace=False)
    step = move_step(tx.conn, step_id, ["in_progress"], "failed", finished_at=now_of(tx), outcome="failed",
                     **error)
    move_run(tx.conn, run["workflow_id"], ["ready"], "paused", paused_at=now_of(tx))
    record_event(tx, run["workflow_id"], "step_failed", "system", step=step,
                 details={"error_class": error["error_class"], "error_message": str(problem),
                          **message_details(error)})
    record_event(tx, run["workflow_id"], "paused", "system", reason=str(problem), step=step,
                 details=message_details(error))
    count_attempt(tx, run["workflow_class"], step_name, "failed")


def _signal_for(tx: Transaction, run: Row, step: Row, name: str) -> Row | None:
    """The signal ``name`` the claimed step waits for (held by an earlier attempt, or claimed now);
    None: none came yet."""
    signal, claimed_now = held_or_claim_signal(tx.conn, step, name)
    if claimed_now:
        record_event(tx, run["workflow_id"], "signal_claimed", "system", step=step,
                     details={"signal": name, "signal_id": signal["id"]})  # type: ignore[index]
    return signal


def park_on_signal(tx: Transaction, run: Row, step: Row, spec: StepSpec) -> None:
    timeout = spec.wait_timeout.total_seconds() if spec.wait_timeout else None
    parked = db.fetch_one(tx.conn, "park_on_signal", (timeout, step["id"]))
    move_run(tx.conn, run["workflow_id"], ["running"], "waiting")
    record_event(tx, run["workflow_id"], "step_waiting", "system", step=parked,
                 details={"signal": spec.wait_for, "timeout_at": parked["timeout_at"] if parked else None})


def run_attempt(engine: Engine, step_id: int, job_id: str | None = None, budget: Budget | None = None) -> None:
    """One delivery of a step job: claim, run the step's code outside any lock, record the outcome.

    With a ``budget`` (see :mod:`.inline`) the outcome transaction may claim the next step,
    which then runs here too, and so on while the budget lasts.
    """
    found = _claim_with_retry(engine, step_id, job_id)
    claim = _settle_wait_until(engine, found, job_id) if isinstance(found, WaitUntilDue) else found
    if claim is not None and metrics.enabled():
        metrics.queue_wait(claim.run["workflow_class"], claim.step["step_name"], queue_wait_of(claim.step))
    while claim is not None:
        claim = run_claimed(engine, claim, job_id, budget)


def _claim_with_retry(engine: Engine, step_id: int, job_id: str | None) -> Claim | WaitUntilDue | None:
    """:func:`claim_attempt`, again when PostgreSQL ended it as a deadlock or a serialization failure
    (two claims and outcomes taking the locks of several flow-control keys in crossing orders: it
    rolled back whole, so trying again is safe)."""
    for tries in range(3):
        try:
            return claim_attempt(engine, step_id, job_id)
        except DatabaseError as exc:
            if not (exc.sqlstate or "").startswith("40") or tries == 2:
                raise
    return None  # (not reached)


def _instance(engine: Engine, run: Row, klass: type[Workflow], step_name: str, attempt: int,
              outputs: dict[str, Any] | None = None, signal: ReceivedSignal | None = None) -> Workflow:
    """The workflow instance a step's code (or its wait_until) runs with."""
    arguments = payload.from_json(run["arguments"]) or {}
    return klass(
        engine=engine, workflow_id=run["workflow_id"], args=arguments.get("args", ()),
        kwargs=arguments.get("kwargs", {}),
        subject=(run["subject_type"], run["subject_id"]) if run["subject_type"] else None,
        attempt=attempt, step_name=step_name, outputs=outputs, received_signal=signal,
    )


def _context(engine: Engine, claim: Claim) -> Workflow:
    return _instance(engine, claim.run, claim.klass, claim.step["step_name"], claim.step["attempt"],
                     claim.outputs, claim.signal)


def _settle_wait_until(engine: Engine, due: WaitUntilDue, job_id: str | None) -> Claim | None:
    """Evaluate a due step's wait_until (no lock held: it is the app's code), then either move the
    step to the later moment it gave and send it for then, or claim it now. When wait_until
    raises or gives no aware datetime, the step is claimed and its attempt fails with
    :class:`WaitUntilFailed` (its error policy applies; a retry evaluates wait_until again).
    Another delivery of the same step evaluates too, but only one moves or claims it."""
    assert due.spec.wait_until is not None
    moment = error = None
    try:
        moment = due_moment(due.spec.wait_until(_instance(engine, due.run, due.klass, due.step_name, due.attempt)),
                            f"the moment wait_until of step {due.step_name} returned")
    except Exception as exc:
        error = WaitUntilFailed(due.step_name, exc)
        error.__cause__ = exc
    if moment is not None:
        with engine.db.transaction() as tx:
            run = lock_run(tx, due.run["workflow_id"])
            if run["status"] != "ready":
                return None  # paused or cancelled meanwhile: resume sends it again, still pending
            later = db.fetch_one(tx.conn, "postpone_to_wait_until", (moment, due.step_id, moment, moment))
            if later is not None:
                sent = resend_step(engine, tx, due.klass, later, priority=run.get("priority"))
                record_event(tx, run["workflow_id"], "rescheduled", "system", step=sent or later,
                             details={"scheduled_at": moment, "wait_until": True})
                return None
    claim = claim_attempt(engine, due.step_id, job_id, evaluated=True)
    if isinstance(claim, WaitUntilDue):  # cannot happen: evaluated claims
        return None
    if claim is not None and error is not None:
        tracer = tracing.tracer()
        if tracer is None:
            return _record_raised(engine, claim, error)
        with tracing.step_span(tracer, claim.run, claim.step):
            return _record_raised(engine, claim, error)
    return claim


def run_claimed(engine: Engine, claim: Claim, job_id: str | None, budget: Budget | None) -> Claim | None:
    """Run one claimed attempt's code and record its outcome; the next claim if it continues inline.
    When the app traces, in the attempt's consumer span (:mod:`pgbus_flask.tracing`)."""
    tracer = tracing.tracer()
    if tracer is None:
        return _run_claimed(engine, claim, job_id, budget)
    with tracing.step_span(tracer, claim.run, claim.step):
        return _run_claimed(engine, claim, job_id, budget)


def _run_claimed(engine: Engine, claim: Claim, job_id: str | None, budget: Budget | None) -> Claim | None:
    if claim.spec.transactional:
        return _run_transactional(engine, claim, job_id, budget)
    context = _context(engine, claim)
    outcome: dict[str, Any]
    began = time.perf_counter()
    try:
        outcome = {"result": claim.spec.func(context), "budget": budget, "job_id": job_id}
        outcome["sleep"] = context.sleep_request
    except (PauseRequested, ReattemptRequested) as request:
        outcome = {"request": request}
    except Exception as exc:  # the step's own failure: its error policy decides
        outcome = {"error": exc}
    claim.ran = time.perf_counter() - began
    if "error" in outcome:
        return _record_raised(engine, claim, outcome["error"])
    return _record_with_retry(engine, claim, **outcome)


def _record_raised(engine: Engine, claim: Claim, exc: Exception) -> Claim | None:
    """Record the attempt whose code raised ``exc`` as failed with it, then report ``exc``
    (:mod:`pgbus_flask.reporting`, ``where="step"``) and mark the attempt's span failed: after the
    outcome, so that a slow reporter holds up no run."""
    nxt = _record_with_retry(engine, claim, error=exc)
    tracing.step_raised(exc)
    reporting.report(exc, "step", engine=engine, run_id=claim.run["workflow_id"],
                     workflow_class=claim.run["workflow_class"], step=claim.step["step_name"],
                     attempt=claim.step["attempt"])
    return nxt


class _RolledBack(Exception):
    """A transactional step's transaction is rolled back; its outcome is recorded on its own.
    ``raised``: the exception of the step's own code (or its ORM flush) that rolled it back."""

    def __init__(self, raised: Exception | None = None, **outcome: Any) -> None:
        super().__init__("rolled back")
        self.raised = raised
        self.outcome = outcome


def _run_transactional(engine: Engine, claim: Claim, job_id: str | None, budget: Budget | None) -> Claim | None:
    """A ``@step(transactional=True)`` attempt (docs/architecture.md, "Transactional steps"): its code runs in a
    transaction on a pooled connection (``self.conn``), and the outcome is recorded in that same
    transaction, taking the run's row lock only then. Whatever stops it from completing (an
    error, a pause or reattempt request, an outcome that comes after the attempt was declared
    stalled) rolls its writes back, and that outcome is then recorded in a transaction of its
    own; a dead worker's open transaction ends with its connection, so nothing of it commits.
    """
    context = _context(engine, claim)
    try:
        with orm.step_transaction(engine.db) as (tx, session):
            context.conn, context.session = tx.conn, session
            began = time.perf_counter()
            try:
                result: Any = claim.spec.func(context)
                if session is not None:
                    session.flush()  # the app's ORM writes: a refusal is the step's own error
            except (PauseRequested, ReattemptRequested) as request:
                claim.ran = time.perf_counter() - began
                raise _RolledBack(request=request) from None
            except Exception as exc:
                claim.ran = time.perf_counter() - began
                raise _RolledBack(exc, error=exc) from None
            claim.ran = time.perf_counter() - began
            output, error = _output(claim, result, None, None)
            if error is not None:
                raise _RolledBack(error=error)
            try:
                run = lock_run(tx, claim.step["workflow_id"], attempt=claim.step["id"])
            except (DatabaseError, psycopg.Error) as exc:  # the step left its transaction failed
                raise _RolledBack(error=exc) from None
            if run["attempt_status"] != "in_progress":
                raise _RolledBack(result=result)  # late: record_outcome writes late_completion_ignored
            return _apply(engine, tx, claim, run, output=output, result=result, error=None, request=None,
                          budget=budget, job_id=job_id, sleep=context.sleep_request)
    except _RolledBack as rolled_back:
        if rolled_back.raised is not None:
            return _record_raised(engine, claim, rolled_back.raised)
        return _record_with_retry(engine, claim, **rolled_back.outcome)
    except DatabaseError as exc:  # PostgreSQL refused the commit (a deferred constraint, a conflict)
        return _record_with_retry(engine, claim, error=exc)
    except Exception as exc:
        if not _refused_commit(exc):
            raise
        return _record_with_retry(engine, claim, error=exc)
    finally:
        context.conn = context.session = None


def _refused_commit(exc: Exception) -> bool:
    """SQLAlchemy's wrapper of a refusal by PostgreSQL (not an outage) at commit."""
    original = getattr(exc, "orig", None)
    return isinstance(original, psycopg.Error) and not isinstance(original, psycopg.OperationalError)


def _record_with_retry(engine: Engine, claim: Claim, **outcome: Any) -> Claim | None:
    """Record an outcome, waiting out a PostgreSQL outage (up to the attempt's stall deadline):
    the step's work is done and should not be lost to a dropped connection.

    Only an outage (or a serialization failure or deadlock) is retried. When PostgreSQL
    refuses the outcome itself (DatabaseError), the attempt is recorded as failed with
    that refusal as its error, so the run pauses on a reason an operator can read
    instead of stalling with the outcome lost.
    """
    delay = 0.5
    deadline = time.monotonic() + max(route(engine, claim.klass, claim.step["step_name"])[1].total_seconds(), 5)
    refused = False
    while True:
        try:
            return record_outcome(engine, claim, **outcome)
        except DatabaseError as exc:
            retryable = (exc.sqlstate or "").startswith("40")
            if not retryable and not refused:
                log.warning("pgbus: PostgreSQL refused the outcome of step %s (%s); recording it as failed",
                            claim.step["id"], exc)
                refused, outcome = True, {"error": exc}  # and no inline continuation
                continue
            if not retryable or time.monotonic() + delay > deadline:
                raise
        except DatabaseUnavailable:
            if time.monotonic() + delay > deadline:
                raise
            log.warning("pgbus: PostgreSQL unreachable while recording step %s; retrying in %.1fs",
                        claim.step["id"], delay)
            engine.db.discard_broken()
        time.sleep(delay)
        delay = min(delay * 2, 10.0)


def _output(claim: Claim, result: Any, error: BaseException | None,
            request: Exception | None) -> tuple[Any, BaseException | None]:
    """The step's return value as storable JSON, or the error that it cannot be stored."""
    if error is None and request is None and not isinstance(result, FanOut):
        try:
            if child_starts(result) is not None:
                return None, None
        except PgbusError as exc:  # a list mixing start_child(...) with other values
            return None, exc
        try:
            return payload.to_json(result, what=f"the output of step {claim.step['step_name']}"), None
        except ArgumentsNotSerializable as exc:
            return None, exc
    return None, error


def record_outcome(engine: Engine, claim: Claim, *, result: Any = None, error: BaseException | None = None,
                   request: Exception | None = None, budget: Budget | None = None,
                   job_id: str | None = None, sleep: SleepRequest | None = None) -> Claim | None:
    """Apply an attempt's outcome, only while the attempt is still in_progress.

    Returns the next step's claim when the outcome transaction continued inline (``budget``).
    ``sleep``: what the step's code asked of the step after it (``self.sleep()``).
    """
    step = claim.step
    output, error = _output(claim, result, error, request)
    with engine.db.transaction(pipeline=True) as tx:
        if _plain_completion(claim, result, error, request, sleep):
            # The common case first: continue inline in one statement that locks the run itself
            # (BEGIN and it in one round trip, no lock_run); nothing written when it cannot.
            nxt = continue_inline(engine, tx, claim.run, step, claim.klass, output, budget, job_id)
            if nxt is not None:
                if limits.limited(claim.klass, claim.spec):  # a step slot given back may wake a waiter
                    limits.watch(engine, tx)
                count_attempt(tx, claim.run["workflow_class"], step["step_name"], "completed", claim.ran)
                return _next_claim(claim, nxt, output)
        run = lock_run(tx, step["workflow_id"], attempt=step["id"])
        if run["attempt_status"] != "in_progress":
            record_event(tx, run["workflow_id"], "late_completion_ignored", "system", step=step,
                         details={"status": run["attempt_status"], "outcome": "failed" if error else "completed"})
            count_attempt(tx, run["workflow_class"], step["step_name"], "late", claim.ran)
            return None
        return _apply(engine, tx, claim, run, output=output, result=result, error=error, request=request,
                      budget=budget, job_id=job_id, sleep=sleep)


def _plain_completion(claim: Claim, result: Any, error: BaseException | None, request: Exception | None,
                     sleep: SleepRequest | None) -> bool:
    """The step returned a plain value and asked nothing of the next step: its outcome may continue
    inline before the run is locked by lock_run (continue_inline locks it; every other outcome,
    and a step holding a signal, takes the usual path)."""
    if error is not None or request is not None or sleep is not None or claim.spec.wait_for:
        return False
    if claim.spec.transactional or isinstance(result, FanOut):
        return False
    return not (isinstance(result, (ChildStart, list, tuple)) and child_starts(result))


def _next_claim(claim: Claim, nxt: Continued, output: Any) -> Claim:
    """The claim of the step continued inline after ``claim``'s."""
    outputs = claim.outputs
    if outputs is not None:
        outputs = {**outputs, claim.step["step_name"]: payload.from_json(output)}
    return Claim(nxt.run, nxt.step, claim.klass, nxt.spec, outputs, None)


def _not_before(tx: Transaction, sleep: SleepRequest | None) -> datetime | None:
    """The moment ``self.sleep()`` / ``self.sleep_until()`` asked the next step to wait for."""
    if sleep is None:
        return None
    if sleep.until is not None:
        return sleep.until
    return now_of(tx) + timedelta(seconds=sleep.seconds or 0)


def _apply(engine: Engine, tx: Transaction, claim: Claim, run: Row, *, output: Any, result: Any,
           error: BaseException | None, request: Exception | None, budget: Budget | None,
           job_id: str | None, sleep: SleepRequest | None = None) -> Claim | None:
    """The outcome of an attempt still in progress, under the run's row lock."""
    step = claim.step
    if limits.limited(claim.klass, claim.spec):  # the slots it gives back wake the next in line
        limits.watch(engine, tx)
    not_before = _not_before(tx, sleep) if error is None and request is None else None
    outcome: str | None
    if isinstance(request, PauseRequested):
        failed = move_step(tx.conn, step["id"], ["in_progress"], "failed", finished_at=now_of(tx), outcome="paused",
                           error_message=cap(request.reason, states.MESSAGE_LIMIT))
        move_run(tx.conn, run["workflow_id"], ["running"], "paused", paused_at=now_of(tx))
        record_event(tx, run["workflow_id"], "paused", "system", reason=request.reason, step=failed)
        outcome = "paused"
    elif isinstance(request, ReattemptRequested):
        failed = move_step(tx.conn, step["id"], ["in_progress"], "failed", finished_at=now_of(tx),
                           outcome="reattempted", error_message=messages.english("reattempt_requested", {}),
                           error_code="reattempt_requested", error_params=Jsonb({}))
        record_event(tx, run["workflow_id"], "step_reattempted", "system", step=failed,
                     details={"wait": request.wait})
        if run["status"] == "running":
            move_run(tx.conn, run["workflow_id"], ["running"], "ready")
            schedule_step(engine, tx, run, claim.klass, step["step_name"], actor="system", delay=request.wait)
        outcome = "reattempted"
    elif error is not None:
        outcome = fail_attempt(engine, tx, run, claim.klass, step, error_columns(error), actor="system")
    elif isinstance(result, FanOut):
        open_batch(engine, tx, run, claim.spec, claim.klass, step, result, next_not_before=not_before)
        outcome = "fanned_out"
    elif isinstance(result, (ChildStart, list, tuple)) and (children := child_starts(result)):
        try:
            start_children(engine, tx, run, claim.spec, step, children, next_not_before=not_before)
            outcome = "fanned_out"
        except PgbusError as exc:  # a child that cannot start: none of them did, the attempt fails
            if claim.spec.transactional:  # with the step's own writes rolled back (_run_transactional)
                raise _RolledBack(error=exc) from None
            outcome = fail_attempt(engine, tx, run, claim.klass, step, error_columns(exc), actor="system")
    else:
        if claim.spec.wait_for:
            consume_signal_of(tx.conn, step)
        nxt = continue_inline(engine, tx, run, step, claim.klass, output, budget, job_id, not_before)
        count_attempt(tx, run["workflow_class"], step["step_name"], "completed", claim.ran)
        if nxt is not None:
            return _next_claim(claim, nxt, output)
        done = move_step(tx.conn, step["id"], ["in_progress"], "completed", finished_at=now_of(tx),
                         outcome="completed", output=Jsonb(output), next_not_before=not_before)
        record_event(tx, run["workflow_id"], "step_completed", "system", step=done)
        if run["status"] == "running":  # paused meanwhile: resume continues, honouring next_not_before
            advance(engine, tx, run, claim.klass, step["step_name"], actor="system", not_before=not_before)
        return None
    count_attempt(tx, run["workflow_class"], step["step_name"], outcome, claim.ran)
    return None
