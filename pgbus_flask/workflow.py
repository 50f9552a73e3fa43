"""Declaring workflows: ``class OrderWorkflow(Workflow)`` with ``@step`` methods.

An instance of the class is the context one step attempt runs in
(``self.args``, ``self.output_of(...)``, ``self.received_signal`` ...); the
class itself starts runs (``OrderWorkflow.start(...)``).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, overload

from . import states
from .errors import DefinitionError, StepNotDefined, UnknownWorkflow

if TYPE_CHECKING:
    from .engine import Engine
    from .handle import Run


Backoff = float | timedelta | Callable[[int], float | timedelta]


@dataclass(frozen=True)
class StepSpec:
    """One declared step and its options."""

    name: str
    func: Callable[..., Any]
    queue: str | None = None
    priority: int | None = None
    timeout: timedelta | None = None
    on_error: str = "pause"
    max_reattempts: int = 3
    backoff: Backoff = 10.0
    wait_for: str | None = None
    wait_timeout: timedelta | None = None
    on_timeout: str = "fail"

    def describe(self) -> dict[str, Any]:
        """The options that make up the definition digest."""
        backoff = self.backoff
        return {
            "name": self.name,
            "queue": self.queue,
            "priority": self.priority,
            "timeout": self.timeout.total_seconds() if self.timeout else None,
            "on_error": self.on_error,
            "max_reattempts": self.max_reattempts,
            "backoff": backoff.total_seconds() if isinstance(backoff, timedelta)
            else (backoff if isinstance(backoff, (int, float)) else getattr(backoff, "__qualname__", "callable")),
            "wait_for": self.wait_for,
            "wait_timeout": self.wait_timeout.total_seconds() if self.wait_timeout else None,
            "on_timeout": self.on_timeout,
        }

    def backoff_seconds(self, reattempt: int) -> float:
        """Delay before reattempt number ``reattempt`` (1-based): doubles each time, at most an hour."""
        value = self.backoff
        if callable(value) and not isinstance(value, (int, float, timedelta)):
            value = value(reattempt)
            return _as_seconds(value)
        return min(_as_seconds(value) * 2 ** (reattempt - 1), 3600.0)


def _as_seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def _duration(name: str, value: Any) -> timedelta | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = timedelta(seconds=value)
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise DefinitionError(f"{name} must be a positive timedelta or number of seconds, got {value!r}")
    return value


class _StepMarker:
    """What ``@step`` leaves on the class until ``__init_subclass__`` collects it."""

    counter = 0

    def __init__(self, func: Callable[..., Any], options: dict[str, Any]) -> None:
        self.func = func
        self.options = options
        _StepMarker.counter += 1
        self.order = _StepMarker.counter

    def build(self, name: str) -> StepSpec:
        opts = dict(self.options)
        on_error = opts.get("on_error", "pause")
        if on_error not in states.ON_ERROR:
            raise DefinitionError(f"step {name}: on_error must be one of {states.ON_ERROR}, got {on_error!r}")
        on_timeout = opts.get("on_timeout", "fail")
        if on_timeout not in states.ON_TIMEOUT:
            raise DefinitionError(f"step {name}: on_timeout must be one of {states.ON_TIMEOUT}, got {on_timeout!r}")
        max_reattempts = opts.get("max_reattempts", 3)
        if not isinstance(max_reattempts, int) or max_reattempts < 0:
            raise DefinitionError(f"step {name}: max_reattempts must be a non-negative int, got {max_reattempts!r}")
        priority = opts.get("priority")
        if priority is not None and not isinstance(priority, int):
            raise DefinitionError(f"step {name}: priority must be an int, got {priority!r}")
        wait_for = opts.get("wait_for")
        if wait_for is not None and (not isinstance(wait_for, str) or not wait_for):
            raise DefinitionError(f"step {name}: wait_for must be a signal name, got {wait_for!r}")
        if opts.get("wait_timeout") is not None and wait_for is None:
            raise DefinitionError(f"step {name}: wait_timeout needs wait_for")
        backoff = opts.get("backoff", 10.0)
        if not (callable(backoff) or isinstance(backoff, (int, float, timedelta))) or isinstance(backoff, bool):
            raise DefinitionError(f"step {name}: backoff must be seconds, a timedelta or a callable")
        return StepSpec(
            name=name,
            func=self.func,
            queue=opts.get("queue"),
            priority=priority,
            timeout=_duration(f"step {name}: timeout", opts.get("timeout")),
            on_error=on_error,
            max_reattempts=max_reattempts,
            backoff=backoff,
            wait_for=wait_for,
            wait_timeout=_duration(f"step {name}: wait_timeout", opts.get("wait_timeout")),
            on_timeout=on_timeout,
        )


_STEP_OPTIONS = frozenset(
    ("queue", "priority", "timeout", "on_error", "max_reattempts", "backoff", "wait_for", "wait_timeout", "on_timeout")
)


@overload
def step(func: Callable[..., Any]) -> Any: ...
@overload
def step(func: None = None, **options: Any) -> Callable[[Callable[..., Any]], Any]: ...


def step(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Declare a method as the next step of its workflow: ``@step`` or ``@step(on_error="reattempt")``.

    Options: ``queue``, ``priority`` (a positive one puts the job at the front
    of its queue), ``timeout`` (the attempt's stall deadline and RQ's job
    timeout), ``on_error`` (``"pause"``, ``"reattempt"``, ``"cancel"``,
    ``"skip"``), ``max_reattempts``, ``backoff`` (seconds, doubled each
    reattempt, or a callable of the reattempt number), ``wait_for`` (a signal
    name), ``wait_timeout`` and ``on_timeout`` (``"fail"``, ``"skip"``,
    ``"continue"``).
    """
    unknown = set(options) - _STEP_OPTIONS
    if unknown:
        raise DefinitionError(f"unknown step option(s): {', '.join(sorted(unknown))}")
    if func is not None:
        return _StepMarker(func, {})
    return lambda f: _StepMarker(f, options)


@dataclass(frozen=True)
class ReceivedSignal:
    """The signal a ``wait_for`` step runs with."""

    id: int
    name: str
    payload: Any
    received_at: datetime


@dataclass(frozen=True)
class FanOut:
    """What ``self.fan_out(...)`` returns: the step parks until every child is done."""

    func: str
    args: tuple[tuple[Any, ...], ...]
    on_child_failure: str = "fail"


class PauseRequested(Exception):
    """Raised by ``self.pause(reason)`` inside a step."""

    def __init__(self, reason: str | None) -> None:
        self.reason = reason
        super().__init__(reason or "paused by the step")


class ReattemptRequested(Exception):
    """Raised by ``self.reattempt(wait=...)`` inside a step."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        super().__init__(f"reattempt in {wait}s")


_REGISTRY: dict[str, type[Workflow]] = {}


class Workflow:
    """Base class of every workflow. Subclass it and declare steps with ``@step``.

    Class attributes: ``queue`` and ``priority`` (defaults for every step),
    ``workflow_name`` (the name runs are stored under; the class name by
    default).
    """

    queue: ClassVar[str | None] = None
    priority: ClassVar[int | None] = None
    workflow_name: ClassVar[str]
    steps: ClassVar[tuple[StepSpec, ...]] = ()
    definition_digest: ClassVar[str] = ""

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
        description = {"queue": cls.queue, "priority": cls.priority, "steps": [s.describe() for s in cls.steps]}
        cls.definition_digest = hashlib.sha256(
            json.dumps(description, sort_keys=True, default=str).encode()
        ).hexdigest()[:16]
        existing = _REGISTRY.get(cls.workflow_name)
        if existing is not None and (existing.__module__, existing.__qualname__) != (cls.__module__, cls.__qualname__):
            raise DefinitionError(
                f"two workflow classes named {cls.workflow_name!r}: {existing.__module__}.{existing.__qualname__} "
                f"and {cls.__module__}.{cls.__qualname__} (set workflow_name on one)"
            )
        _REGISTRY[cls.workflow_name] = cls

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
        bus: Any = None,
        **kwargs: Any,
    ) -> Run:
        """Start a run; see :func:`pgbus_flask.runner.start`."""
        from . import runner
        from .engine import resolve_engine

        return runner.start(
            resolve_engine(bus), cls, args, kwargs, subject=subject, idempotency_key=idempotency_key,
            actor=actor, conn=conn,
        )

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

    def output_of(self, step_name: str) -> Any:
        """The stored output of an earlier completed step of this run."""
        if self._outputs is None:  # read once, on the first call
            from .runner import completed_outputs

            with self.engine.db.reading() as conn:
                self._outputs = completed_outputs(conn, self.workflow_id)
        if step_name not in self._outputs:
            type(self).step_spec(step_name)  # StepNotDefined for a name the class lacks
            raise KeyError(f"step {step_name!r} has no completed output in run {self.workflow_id}")
        return self._outputs[step_name]

    def pause(self, reason: str | None = None) -> None:
        """Stop here and pause the run; resume retries this step."""
        raise PauseRequested(reason)

    def reattempt(self, wait: float | timedelta = 0) -> None:
        """Stop here and run this step again after ``wait``."""
        raise ReattemptRequested(_as_seconds(wait))

    def fan_out(
        self, func: Callable[..., Any] | str, args: Iterable[Sequence[Any]], *, on_child_failure: str = "fail"
    ) -> FanOut:
        """Return this from a step to run ``func(*a)`` for every ``a`` in ``args`` as RQ jobs.

        The step completes when every child is done (output: counts and each
        child's return value), or fails when a child failed and
        ``on_child_failure`` is ``"fail"``.
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
        children = tuple(tuple(a) for a in args)
        if not children:
            raise DefinitionError("fan_out needs at least one argument tuple")
        return FanOut(path, children, on_child_failure)


def registered(name: str, imports: Iterable[str] = ()) -> type[Workflow]:
    """The workflow class registered as ``name``, importing ``imports`` first if needed."""
    klass = _REGISTRY.get(name)
    if klass is None:
        for module in imports:
            importlib.import_module(module)
        klass = _REGISTRY.get(name)
    if klass is None:
        raise UnknownWorkflow(name)
    return klass


def registry() -> dict[str, type[Workflow]]:
    """Every registered workflow class by name (a copy)."""
    return dict(_REGISTRY)
