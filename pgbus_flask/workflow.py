"""Declaring workflows: ``class OrderWorkflow(Workflow)`` with ``@step`` methods.

An instance of the class is the context one step attempt runs in
(``self.args``, ``self.output_of(...)``, ``self.received_signal`` ...); the
class itself starts runs (``OrderWorkflow.start(...)``).
"""


from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

from . import orm, payload, runner, states
from .definition import (  # noqa: F401  (re-exported: the public names of declaring a workflow)
    REGISTRY,
    Backoff,
    ChildStart,
    FanOut,
    PauseRequested,
    ReattemptRequested,
    ReceivedSignal,
    SleepRequest,
    StepSpec,
    _as_seconds,
    _StepMarker,
    delay_seconds,
    due_moment,
    fan_out_function,
    registered,
    registry,
    step,
)
from .engine import Engine, resolve_engine
from .errors import DefinitionError, PgbusError, StepNotDefined
from .flow import Limit
from .handle import Run
from .schedule import ATTRIBUTES as SCHEDULE_ATTRIBUTES
from .schedule import TICK_KWARG, ScheduleSpec, from_class


def _name_flow_control(cls: type[Workflow]) -> None:
    """Check the class's flow control and name each limit and rate that has no name of its own."""
    if cls.priority is not None and (not isinstance(cls.priority, int) or isinstance(cls.priority, bool)):
        raise DefinitionError(f"{cls.__name__}.priority must be an int, got {cls.priority!r:.80}")
    limit = cls.concurrency
    if limit is not None and not isinstance(limit, Limit):
        raise DefinitionError(f"{cls.__name__}.concurrency must be a Limit(...), got {limit!r:.100}")
    cls.limit_name = (limit.name or cls.workflow_name) if limit is not None else None
    named = []
    for spec in cls.steps:
        if spec.concurrency is not None and spec.concurrency.name is None:
            spec = dataclasses.replace(spec, concurrency=dataclasses.replace(
                spec.concurrency, name=f"{cls.workflow_name}.{spec.name}"))
        if spec.rate is not None and spec.rate.name is None:
            spec = dataclasses.replace(spec, rate=dataclasses.replace(
                spec.rate, name=f"{cls.workflow_name}.{spec.name}"))
        if spec.concurrency is not None and spec.concurrency.name == cls.limit_name:
            raise DefinitionError(f"{cls.__name__}: step {spec.name}'s limit and the class's are both named "
                                  f"{cls.limit_name!r}: a limit counts runs or attempts, not both")
        named.append(spec)
    cls.steps = tuple(named)
    _check_limit_names(cls)


def _check_limit_names(cls: type[Workflow]) -> None:
    """A limit's name counts runs (a class limit) or attempts (a step limit) in every class, never both."""
    mine_run = {cls.limit_name} if cls.limit_name else set()
    mine_step = {s.concurrency.name for s in cls.steps if s.concurrency is not None and s.concurrency.name}
    for other in REGISTRY.values():
        if other.workflow_name == cls.workflow_name:
            continue
        theirs_run = {other.limit_name} if other.limit_name else set()
        theirs_step = {s.concurrency.name for s in other.steps if s.concurrency is not None and s.concurrency.name}
        clash = (mine_run & theirs_step) | (mine_step & theirs_run)
        if clash:
            raise DefinitionError(f"{cls.__name__}: the limit {sorted(clash)[0]!r} is a class limit in one of "
                                  f"{cls.workflow_name} and {other.workflow_name} and a step limit in the other: a "
                                  "limit counts runs or attempts, not both")


class Workflow:
    """Base class of every workflow. Subclass it and declare steps with ``@step``.

    Class attributes: ``queue`` and ``priority`` (defaults for every step),
    ``workflow_name`` (the name runs are stored under; the class name by
    default), and for recurring starts ``schedule`` (a cron string or a
    timedelta), ``schedule_timezone`` (cron only, default "UTC"),
    ``schedule_missed`` ("skip" or "all") and ``schedule_kwargs`` (the keyword
    arguments every scheduled run gets, besides ``tick``); see docs/schedules.md.
    """

    queue: ClassVar[str | None] = None
    priority: ClassVar[int | None] = None
    #: At most so many runs of this class running a step at once, per key (docs/flow-control.md).
    concurrency: ClassVar[Limit | None] = None
    #: The name the class's limit is kept under: its own ``name``, else the workflow's name.
    limit_name: ClassVar[str | None] = None
    workflow_name: ClassVar[str]
    steps: ClassVar[tuple[StepSpec, ...]] = ()
    definition_digest: ClassVar[str] = ""
    schedule: ClassVar[str | timedelta | None] = None
    schedule_timezone: ClassVar[str | None] = None
    schedule_missed: ClassVar[str | None] = None
    schedule_kwargs: ClassVar[dict[str, Any] | None] = None
    #: The checked schedule (None: the class is started only by hand).
    schedule_spec: ClassVar[ScheduleSpec | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        markers: dict[str, _StepMarker] = {}
        for klass in reversed(cls.__mro__):
            for name, value in vars(klass).items():
                if isinstance(value, _StepMarker):
                    markers[name] = value
        ordered = sorted(markers.items(), key=lambda item: item[1].order)
        cls.steps = tuple(marker.build(name) for name, marker in ordered)
        for spec in cls.steps:
            setattr(cls, spec.name, spec.func)
        if "workflow_name" not in vars(cls):
            cls.workflow_name = cls.__name__
        if not cls.steps:
            return  # an abstract base: not registered
        _name_flow_control(cls)
        cls.schedule_spec = from_class(cls.workflow_name, {a: getattr(cls, a) for a in SCHEDULE_ATTRIBUTES}, vars(cls))
        description = {"queue": cls.queue, "priority": cls.priority, "steps": [s.describe() for s in cls.steps]}
        cls.definition_digest = hashlib.sha256(
            json.dumps(description, sort_keys=True, default=str).encode()
        ).hexdigest()[:16]
        existing = REGISTRY.get(cls.workflow_name)
        if existing is not None and (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
            raise DefinitionError(
                f"two workflow classes named {cls.workflow_name!r}: {existing.__module__}.{existing.__qualname__} "
                f"and {cls.__module__}.{cls.__qualname__} (set workflow_name on one)"
            )
        REGISTRY[cls.workflow_name] = cls

    # -- the class side -------------------------------------------------

    @classmethod
    def step_spec(cls, name: str) -> StepSpec:
        for spec in cls.steps:
            if spec.name == name:
                return spec
        raise StepNotDefined(cls.workflow_name, name, [s.name for s in cls.steps])

    @classmethod
    def next_step(cls, name: str) -> StepSpec | None:
        """The step after ``name``, or None when ``name`` is the last."""
        names = [s.name for s in cls.steps]
        index = names.index(cls.step_spec(name).name)
        return cls.steps[index + 1] if index + 1 < len(cls.steps) else None

    @classmethod
    def start(
        cls,
        *args: Any,
        subject: tuple[str, Any] | None = None,
        idempotency_key: str | None = None,
        actor: str = "app",
        conn: Any = None,
        session: Any = None,
        bus: Any = None,
        priority: int | None = None,
        **kwargs: Any,
    ) -> Run:
        """Start a run; see :func:`pgbus_flask.runner.start`.

        ``priority``: this run's steps go before those of lower priority (it wins over the class's
        and the steps' own; docs/flow-control.md). With a class ``concurrency`` limit whose
        ``on_busy`` is ``"refuse"``, a busy key raises :class:`~pgbus_flask.errors.KeyBusy`; with
        ``"replace"``, the key's run that has not started yet takes these arguments and is returned.

        ``conn``: a psycopg connection of the app's, the run written in its next transaction.
        ``session``: a SQLAlchemy session (Flask-SQLAlchemy's ``db.session``), the run written in
        its transaction and the first step sent once it commits (see :mod:`pgbus_flask.orm`).
        """
        engine = resolve_engine(bus)
        if session is not None:
            if conn is not None:
                raise PgbusError("start() takes conn= or session=, not both")
            with orm.session_transaction(engine.db, session):
                started = runner.start(engine, cls, args, kwargs, subject=subject, idempotency_key=idempotency_key,
                                       actor=actor, conn=None, priority=priority)
                run = Run(engine, started.workflow_id) if started.run is None else None
            if run is not None:
                return run
        else:
            started = runner.start(engine, cls, args, kwargs, subject=subject, idempotency_key=idempotency_key,
                                   actor=actor, conn=conn, priority=priority)
        if started.run is None:
            return Run(engine, started.workflow_id)
        return Run.from_rows(engine, started.run, started.first_step, cls)

    # -- the step side --------------------------------------------------

    def __init__(
        self,
        *,
        engine: Engine,
        workflow_id: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        subject: tuple[str, str] | None,
        attempt: int,
        step_name: str,
        outputs: dict[str, Any] | None = None,
        received_signal: ReceivedSignal | None = None,
    ) -> None:
        self.engine = engine
        self.workflow_id = workflow_id
        self.args = tuple(args)
        self.kwargs = kwargs
        self.subject = subject
        self.attempt = attempt
        self.step_name = step_name
        self.received_signal = received_signal
        self._outputs = outputs
        #: In a ``@step(transactional=True)``: the psycopg connection whose transaction
        #: records this attempt's outcome (PGBUS_DATABASE_URL). Write the app's rows through it:
        #: they commit exactly when the step completes, and roll back with an error, a pause,
        #: a dead worker or an outcome that comes after the attempt was declared stalled.
        #: None in other steps.
        self.conn: Any = None
        #: In a transactional step, with SQLAlchemy installed: a ``Session`` in that same
        #: transaction, for the app's ORM models (flushed before the outcome is recorded).
        self.session: Any = None
        #: What ``sleep()`` / ``sleep_until()`` asked of the step after this one (the last call counts).
        self.sleep_request: SleepRequest | None = None

    @property
    def tick(self) -> datetime | None:
        """The tick (a UTC datetime) a scheduled run was started for: ``self.kwargs["tick"]``;
        None in a run started otherwise."""
        value = self.kwargs.get(TICK_KWARG)
        return value if isinstance(value, datetime) else None

    def output_of(self, step_name: str) -> Any:
        """The stored output of an earlier completed step of this run."""
        if self._outputs is None:  # read once, on the first call
            with self.engine.db.reading() as conn:
                self._outputs = runner.completed_outputs(conn, self.workflow_id)
        if step_name not in self._outputs:
            type(self).step_spec(step_name)  # StepNotDefined for a name the class lacks
            raise KeyError(f"step {step_name!r} has no completed output in run {self.workflow_id}")
        return self._outputs[step_name]

    def pause(self, reason: str | None = None) -> None:
        """Stop here and pause the run; resume retries this step."""
        raise PauseRequested(reason)

    def sleep(self, duration: float | timedelta) -> None:
        """Have the step after this one wait ``duration`` (a timedelta or seconds) after this step
        completes. The step goes on and completes with its return value; the next step is due at
        the later of this and its own ``wait`` (docs/delays.md). The last call counts. The last step
        cannot sleep: nothing comes after it."""
        seconds = delay_seconds(duration, "sleep() duration")
        self._check_a_step_follows("sleep()")
        self.sleep_request = SleepRequest(seconds=seconds)

    def sleep_until(self, moment: datetime) -> None:
        """Have the step after this one wait until ``moment`` (an aware datetime; a past one: no
        wait). As :meth:`sleep` otherwise."""
        due = due_moment(moment, "sleep_until() moment")
        self._check_a_step_follows("sleep_until()")
        self.sleep_request = SleepRequest(until=due)

    def _check_a_step_follows(self, what: str) -> None:
        if type(self).next_step(self.step_name) is None:
            raise DefinitionError(f"{what} in step {self.step_name}, the last step of {type(self).workflow_name}:"
                                  " no step comes after it to delay")

    def reattempt(self, wait: float | timedelta = 0) -> None:
        """Stop here and run this step again after ``wait``."""
        raise ReattemptRequested(_as_seconds(wait))

    def fan_out(
        self, func: Callable[..., Any] | str, args: Iterable[Sequence[Any]], *, on_child_failure: str = "fail"
    ) -> FanOut:
        """Return this from a step to run ``func(*a)`` for every ``a`` in ``args`` as RQ jobs.

        The step completes when every child is done (output: counts and each
        child's return value), or fails when a child failed and
        ``on_child_failure`` is ``"fail"``. ``func`` must be a function defined in the
        module of a workflow class or in a module PGBUS_IMPORT names: workers run
        nothing else (ChildFunctionNotAllowed, see docs/deploy.md).
        """
        if on_child_failure not in states.ON_CHILD_FAILURE:
            raise DefinitionError(f"on_child_failure must be one of {states.ON_CHILD_FAILURE}")
        if isinstance(func, str):
            path = func
        else:
            module, qualname = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
            if not module or "<" in qualname or "." in qualname:
                raise DefinitionError(f"fan_out needs a module-level function RQ can import, got {func!r}")
            path = f"{module}.{qualname}"
        if not isinstance(path, str) or "\x00" in path or any("\ud800" <= c <= "\udfff" for c in path):
            raise DefinitionError(f"fan_out needs a function or a dotted path, got {path!r:.100}")
        # Refused here already, as the worker would refuse every child (ChildFunctionNotAllowed).
        fan_out_function(path, self.engine.settings.imports)
        children = tuple(tuple(a) for a in args)
        if not children:
            raise DefinitionError("fan_out needs at least one argument tuple")
        return FanOut(path, children, on_child_failure)

    def start_child(self, workflow: type[Workflow], *args: Any, subject: tuple[str, Any] | None = None,
                    **kwargs: Any) -> ChildStart:
        """Return this (or a list of them) from a step to start ``workflow(*args, **kwargs)`` as a
        child run when the step's outcome is recorded, in the same transaction.

        The step then waits (status ``waiting``) until every child run has finished or been
        cancelled, and completes with ``{"outputs": [...], "finished": n, "cancelled": n,
        "total": n, "workflow_ids": [...]}`` (a child's output is the output of its last completed
        step), or fails when a child was cancelled and the step's ``on_child_failure`` is
        ``"fail"`` (the default). Cancelling this run cancels its ongoing children. A step
        attempted again (redelivered, reattempted, resumed) finds the children it started
        before instead of starting new ones; ``rerun`` and ``resume_at`` start a new set.
        """
        if not (isinstance(workflow, type) and issubclass(workflow, Workflow) and workflow.steps):
            raise DefinitionError(f"start_child needs a workflow class with steps, got {workflow!r:.100}")
        payload.to_json({"args": list(args), "kwargs": dict(kwargs)}, what="start_child arguments")
        return ChildStart(workflow, tuple(args), dict(kwargs), subject)
