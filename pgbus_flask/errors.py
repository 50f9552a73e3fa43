"""Every exception pgbus-flask raises, under one base class."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from .messages import Coded


class PgbusError(Exception):
    """Base class of every pgbus-flask error."""


class ConfigError(PgbusError):
    """A ``PGBUS_*`` setting has a bad value."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key} {problem}")


class InvalidInput(PgbusError, ValueError):
    """A value given to pgbus cannot be used or stored: it names the field and what was wrong.

    Raised before anything is written. It is also a ``ValueError``, so code that
    already catches those keeps working.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field} {problem}")


class DatabaseUnavailable(PgbusError):
    """PostgreSQL could not be reached (a connection failure or a server shutting down)."""


class DatabaseError(PgbusError):
    """PostgreSQL refused a statement for a reason other than an outage (a size limit,
    a statement or lock timeout, a cancelled query). Retrying the same thing will not help."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        self.sqlstate = sqlstate
        super().__init__(message)


class SchemaMissing(PgbusError):
    """The database has no pgbus tables yet (or an older schema)."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"the pgbus tables are missing or out of date in this database ({detail}): "
            "run `flask pgbus migrate` (or bus.migrate())"
        )


class QueueUnavailable(PgbusError):
    """Redis could not be reached."""


class WorkflowNotFound(PgbusError):
    """No run has this workflow id."""

    def __init__(self, workflow_id: object) -> None:
        self.workflow_id = workflow_id
        super().__init__(f"no workflow run with id {workflow_id}")


class UnknownWorkflow(Coded, PgbusError):
    """No workflow class is registered under this name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(self._coded("unknown_workflow", workflow=name))


class DefinitionError(PgbusError):
    """A workflow class or step is declared wrongly."""


class ArgumentsNotSerializable(InvalidInput):
    """A value cannot be stored (only JSON, datetime, date, Decimal and UUID can)."""

    def __init__(self, message: str) -> None:
        PgbusError.__init__(self, message)
        self.field = message.split(" ", 1)[0]
        self.problem = message


class SubjectConflict(PgbusError):
    """The subject already has an ongoing run of this workflow class."""

    def __init__(self, workflow_class: str, subject: tuple[str, str], existing: object = None) -> None:
        self.workflow_class = workflow_class
        self.subject = subject
        self.existing = existing
        where = f" (run {existing})" if existing else ""
        super().__init__(f"{subject[0]} {subject[1]} already has an ongoing {workflow_class} run{where}")


class KeyBusy(PgbusError):
    """start() of a class whose limit says ``on_busy="refuse"`` found the key busy: nothing was written."""

    def __init__(self, workflow_class: str, limit: str, key: str, capacity: int, active: int) -> None:
        self.workflow_class, self.limit, self.key = workflow_class, limit, key
        self.capacity, self.active = capacity, active
        keyed = f" for key {key!r}" if key else ""
        super().__init__(f"{workflow_class} runs at most {capacity} at once{keyed} (limit {limit!r}) and {active} "
                         "already hold or wait for a slot; this start was refused (on_busy='refuse')")


class ActionNotAllowed(PgbusError):
    """A verb was called that the run's status does not allow now."""

    def __init__(self, action: str, status: str, allowed: Iterable[str], detail: str | None = None) -> None:
        self.action = action
        self.status = status
        self.allowed = tuple(allowed)
        listed = ", ".join(self.allowed) if self.allowed else "none"
        extra = f" ({detail})" if detail else ""
        super().__init__(f"cannot {action} a {status} run{extra}; allowed now: {listed}")


class StepNotDefined(Coded, PgbusError):
    """A verb names a step the workflow class does not have (any longer)."""

    def __init__(self, workflow_class: str, step_name: str, known: Iterable[str] = ()) -> None:
        self.workflow_class = workflow_class
        self.step_name = step_name
        names = ", ".join(known)
        super().__init__(self._coded("unknown_step_known", workflow=workflow_class, step=step_name, known=names)
                         if names else self._coded("unknown_step", workflow=workflow_class, step=step_name))


class SignalRefused(InvalidInput):
    """A signal cannot be stored: a bad name or payload (a signal to an ended run is
    ActionNotAllowed)."""

    def __init__(self, message: str, field: str = "signal") -> None:
        PgbusError.__init__(self, message)
        self.field = field
        self.problem = message


class TooManyPendingSignals(PgbusError):
    """A run already holds as many pending signals as ``PGBUS_MAX_PENDING_SIGNALS`` allows (signals no
    step has taken yet): the signal was not stored. A redelivery of a stored one is still answered."""

    def __init__(self, workflow_id: object, limit: int) -> None:
        self.workflow_id = workflow_id
        self.limit = limit
        super().__init__(f"run {workflow_id} already holds {limit:,} pending signals, the most "
                         f"PGBUS_MAX_PENDING_SIGNALS allows: the signal was not stored (a signal stays pending "
                         "until a step waiting for its name takes it)")


class StepStalled(Coded, PgbusError):
    """The attempt ran past its stall deadline (its worker probably died)."""

    def __init__(self, attempt: int, step: str, worker: str | None, deadline: datetime) -> None:
        super().__init__(self._coded("step_stalled", attempt=attempt, step=step, worker=worker,
                                     deadline_at=deadline))


class WaitTimedOut(Coded, PgbusError):
    """The step waited longer than its ``wait_timeout`` for its signal."""

    def __init__(self, signal: str | None, deadline: datetime) -> None:
        super().__init__(self._coded("wait_timed_out", signal=signal, deadline_at=deadline) if signal
                         else self._coded("wait_timed_out_any", deadline_at=deadline))


class ChildJobFailed(Coded, PgbusError):
    """A fan-out child job failed, and the step fails with it."""

    def __init__(self, failed: int, total: int, first: tuple[int, str | None, str | None] | None) -> None:
        if first is None:
            text = self._coded("children_failed_unknown", failed=failed, total=total)
        else:
            text = self._coded("children_failed", failed=failed, total=total, position=first[0],
                               error_class=first[1], error=first[2])
        super().__init__(text)


class ChildRunsCancelled(Coded, PgbusError):
    """A child workflow run was cancelled, and the step that started it fails with it
    (``on_child_failure="fail"``)."""

    def __init__(self, cancelled: int, total: int, first: tuple[str, Any]) -> None:
        super().__init__(self._coded("child_runs_cancelled", cancelled=cancelled, total=total, workflow=first[0],
                                     run=str(first[1])))


class ChildLost(Coded, PgbusError):
    """A fan-out child's job ended in RQ without recording its result (its worker probably died)."""

    def __init__(self, job: str, status: str) -> None:
        super().__init__(self._coded("child_lost", job=job, status=status))


class ChildFunctionNotAllowed(Coded, PgbusError):
    """A fan-out names a function no registered workflow may hand to ``fan_out``: one defined
    neither in the module of a registered workflow class nor in a module ``PGBUS_IMPORT`` names.
    The worker refuses it before importing anything, and the child fails with this."""

    def __init__(self, func: str) -> None:
        self.func = func
        super().__init__(self._coded("child_function_not_allowed", func=func))


class UnknownSchedule(PgbusError):
    """No workflow class of this name declares a schedule (here, or in the stored schedules)."""

    def __init__(self, name: str, known: Iterable[str] = ()) -> None:
        self.name = name
        listed = ", ".join(sorted(known))
        super().__init__(f"no schedule for workflow class {name!r} "
                         + (f"(schedules: {listed})" if listed else "(no class declares a schedule)"))


class ScheduleConflict(PgbusError):
    """A schedule verb the schedule's state does not allow now (pausing a paused one, resuming
    a running one); nothing was changed."""

    def __init__(self, name: str, action: str, paused: bool) -> None:
        self.name = name
        self.action = action
        self.paused = paused
        state = "paused" if paused else "not paused"
        super().__init__(f"cannot {action} the schedule of {name}: it is {state}; nothing was changed")
class WaitUntilFailed(Coded, PgbusError):
    """A step's ``wait_until`` raised, or did not give an aware datetime: the step's attempt
    fails with this (its error policy applies) and a retry evaluates ``wait_until`` again."""

    def __init__(self, step: str, error: BaseException) -> None:
        klass = type(error)
        name = klass.__qualname__ if klass.__module__ == "builtins" else f"{klass.__module__}.{klass.__qualname__}"
        try:
            text = str(error)
        except Exception:  # an exception that cannot describe itself keeps its class
            text = ""
        super().__init__(self._coded("wait_until_failed", step=step, error_class=name, error=text[:1000]))
