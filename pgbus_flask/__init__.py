"""pgbus-flask: durable, operable workflows for Flask apps."""

from __future__ import annotations

from . import logs as _logs
from .errors import (
    ActionNotAllowed,
    ArgumentsNotSerializable,
    ConfigError,
    DatabaseError,
    DatabaseUnavailable,
    InvalidInput,
    KeyBusy,
    PgbusError,
    ScheduleConflict,
    SchemaMissing,
    SignalRefused,
    StepNotDefined,
    StepStalled,
    SubjectConflict,
    TooManyPendingSignals,
    UnknownSchedule,
    UnknownWorkflow,
    WaitTimedOut,
    WaitUntilFailed,
    WorkflowNotFound,
)
from .extension import PgBus
from .flow import Limit, Rate
from .handle import Run
from .workflow import Workflow, step

_logs.install()


__all__ = [
    "ActionNotAllowed",
    "ArgumentsNotSerializable",
    "ConfigError",
    "DatabaseError",
    "DatabaseUnavailable",
    "InvalidInput",
    "KeyBusy",
    "Limit",
    "PgBus",
    "PgbusError",
    "Rate",
    "Run",
    "ScheduleConflict",
    "SchemaMissing",
    "SignalRefused",
    "StepNotDefined",
    "StepStalled",
    "SubjectConflict",
    "TooManyPendingSignals",
    "UnknownSchedule",
    "UnknownWorkflow",
    "WaitTimedOut",
    "WaitUntilFailed",
    "Workflow",
    "WorkflowNotFound",
    "step",
]
