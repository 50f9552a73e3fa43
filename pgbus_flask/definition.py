"""What a workflow declares: steps and their options, and what a step may return or raise.

The layer below the runner: :class:`StepSpec` (one ``@step`` and its options),
the ``step`` decorator, :class:`FanOut`, the control exceptions a step raises
to pause or reattempt, the signal a step receives, and the registry of
workflow classes by name. :mod:`pgbus_flask.workflow` builds the ``Workflow``
base class on top of it.
"""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, overload

from . import payload, states
from .errors import ChildFunctionNotAllowed, DefinitionError, InvalidInput, UnknownWorkflow
from .flow import Limit, Rate

if TYPE_CHECKING:
    from .workflow import Workflow


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
    transactional: bool = False
    on_child_failure: str = "fail"
    #: How long after the step before it ended (for the first step: after start) this step is due.
    wait: timedelta | None = None
    #: A callable of the workflow instance giving the aware moment this step is due (docs/delays.md).
    wait_until: Callable[[Any], datetime] | None = None
    #: At most so many attempts of this step (or of every step naming the same limit) at once.
    concurrency: Limit | None = None
    #: At most so many starts of this step (or of every step naming the same rate) per window.
    rate: Rate | None = None

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
            # Only when set, so that classes declared before the option keep their digest.
            **({"transactional": True} if self.transactional else {}),
            **({"on_child_failure": self.on_child_failure} if self.on_child_failure != "fail" else {}),
            **({"wait": self.wait.total_seconds()} if self.wait else {}),
            **({"wait_until": getattr(self.wait_until, "__qualname__", "callable")} if self.wait_until else {}),
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
    if value > LONGEST_DELAY:
        raise DefinitionError(f"{name} must be at most {LONGEST_DELAY.days} days, got {value!r}")
    return value


#: The longest ``wait`` or ``self.sleep()`` (a step due later than year 9998 could not be stored).
LONGEST_DELAY = timedelta(days=36_500)


def delay_seconds(value: Any, what: str) -> float:
    """``value`` (a timedelta or seconds, zero or more, at most LONGEST_DELAY) in seconds;
    InvalidInput naming ``what`` otherwise."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        seconds = float(value)
    else:
        raise InvalidInput(what, "must be a timedelta or a number of seconds, got "
                                 f"{payload.safe_str(repr(value))[:80]}")
    if not 0 <= seconds <= LONGEST_DELAY.total_seconds():
        raise InvalidInput(what, f"must be from 0 seconds to {LONGEST_DELAY.days} days, got {seconds:g} seconds")
    return seconds


def due_moment(value: Any, what: str) -> datetime:
    """``value`` as an aware datetime in UTC a step can be due at (a past one is due now);
    InvalidInput naming ``what`` for a naive datetime, anything else, or a moment past year 9998."""
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        kind = "a naive datetime" if isinstance(value, datetime) else type(value).__name__
        raise InvalidInput(what, f"must be a datetime with a timezone (such as datetime.now(timezone.utc) + "
                                 f"timedelta(days=1)), got {kind}: {payload.safe_str(repr(value))[:80]}")
    try:
        utc = value.astimezone(timezone.utc)
    except OverflowError:
        utc = None
    if utc is None or utc > states.LATEST_DUE:
        raise InvalidInput(what, f"must be before {states.LATEST_DUE:%Y-%m-%d} (UTC), got {value.isoformat()}")
    return utc


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
        transactional = opts.get("transactional", False)
        if not isinstance(transactional, bool):
            raise DefinitionError(f"step {name}: transactional must be True or False, got {transactional!r}")
        if transactional and wait_for is not None:
            raise DefinitionError(f"step {name}: a transactional step cannot wait_for a signal")
        on_child_failure = opts.get("on_child_failure", "fail")
        if on_child_failure not in states.ON_CHILD_RUN_FAILURE:
            raise DefinitionError(f"step {name}: on_child_failure must be one of {states.ON_CHILD_RUN_FAILURE}, "
                                  f"got {on_child_failure!r}")
        wait_until = opts.get("wait_until")
        if wait_until is not None and not callable(wait_until):
            raise DefinitionError(f"step {name}: wait_until must be a callable of the workflow instance returning an"
                                  f" aware datetime, got {wait_until!r:.100}")
        if wait_until is not None and opts.get("wait") is not None:
            raise DefinitionError(f"step {name}: give wait or wait_until, not both")
        concurrency, rate = opts.get("concurrency"), opts.get("rate")
        if concurrency is not None and not isinstance(concurrency, Limit):
            raise DefinitionError(f"step {name}: concurrency must be a Limit(...), got {concurrency!r:.100}")
        if concurrency is not None and concurrency.on_busy != "queue":
            raise DefinitionError(f"step {name}: on_busy is for a class's limit (it decides start()); a step's "
                                  "limit always queues")
        if rate is not None and not isinstance(rate, Rate):
            raise DefinitionError(f"step {name}: rate must be a Rate(...), got {rate!r:.100}")
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
            transactional=transactional,
            on_child_failure=on_child_failure,
            wait=_duration(f"step {name}: wait", opts.get("wait")),
            wait_until=wait_until,
            concurrency=concurrency,
            rate=rate,
        )


_STEP_OPTIONS = frozenset(
    ("queue", "priority", "timeout", "on_error", "max_reattempts", "backoff", "wait_for", "wait_timeout", "on_timeout",
     "transactional", "on_child_failure", "wait", "wait_until", "concurrency", "rate")
)


@overload
def step(func: Callable[..., Any]) -> Any: ...
@overload
def step(func: None = None, **options: Any) -> Callable[[Callable[..., Any]], Any]: ...


def step(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """Declare a method as the next step of its workflow: ``@step`` or ``@step(on_error="reattempt")``.

    Options: ``queue``, ``priority`` (higher goes first: see docs/flow-control.md),
    ``concurrency`` (a :class:`~pgbus_flask.flow.Limit`: at most so many attempts at
    once), ``rate`` (a :class:`~pgbus_flask.flow.Rate`: at most so many starts per
    window), ``timeout`` (the attempt's stall deadline and RQ's job
    timeout), ``on_error`` (``"pause"``, ``"reattempt"``, ``"cancel"``,
    ``"skip"``), ``max_reattempts``, ``backoff`` (seconds, doubled each
    reattempt, or a callable of the reattempt number), ``wait_for`` (a signal
    name), ``wait_timeout`` and ``on_timeout`` (``"fail"``, ``"skip"``,
    ``"continue"``), ``transactional`` (the step's code runs inside the transaction
    that records its outcome and gets it as ``self.conn``: its writes commit exactly
    when the step completes), ``on_child_failure`` (for a step that returns
    ``self.start_child(...)``: ``"fail"``, the step fails when a child run is cancelled,
    or ``"continue"``, it completes with the cancelled ones marked), ``wait`` (a timedelta or
    seconds: the step is due that long after the step before it ended, or after start for the
    first step) or ``wait_until`` (a callable
    of the workflow instance returning the aware datetime the step is due; evaluated by the
    step's job in a worker, see docs/delays.md).
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


@dataclass(frozen=True)
class ChildStart:
    """What ``self.start_child(...)`` returns: a child run to start when the step's outcome is
    recorded (a step returns one, or a list of them), and to wait for."""

    klass: type[Workflow]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    subject: tuple[str, Any] | None = None


def child_starts(result: Any) -> list[ChildStart] | None:
    """The child runs a step's return value asks for (a ChildStart or a non-empty list of them),
    else None. A list that mixes them with other values is a mistake, said so."""
    if isinstance(result, ChildStart):
        return [result]
    if isinstance(result, (list, tuple)) and result and any(isinstance(r, ChildStart) for r in result):
        if not all(isinstance(r, ChildStart) for r in result):
            raise DefinitionError("a step returned a list that mixes start_child(...) with other values; "
                                  "return only start_child(...) results, or none")
        return list(result)
    return None


@dataclass(frozen=True)
class SleepRequest:
    """What ``self.sleep(...)`` or ``self.sleep_until(...)`` asked of the step after this one:
    due no earlier than ``seconds`` after this step completes, or than ``until``."""

    seconds: float | None = None
    until: datetime | None = None


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


#: Every workflow class with steps, by ``workflow_name``; filled by ``Workflow.__init_subclass__``.
REGISTRY: dict[str, type[Workflow]] = {}


def registered(name: str, imports: Iterable[str] = ()) -> type[Workflow]:
    """The workflow class registered as ``name``, importing ``imports`` first if needed."""
    klass = REGISTRY.get(name)
    if klass is None:
        for module in imports:
            importlib.import_module(module)
        klass = REGISTRY.get(name)
    if klass is None:
        raise UnknownWorkflow(name)
    return klass


def fan_out_function(path: str, imports: Iterable[str] = ()) -> Callable[..., Any]:
    """The function a fan-out child runs, named ``path`` (``module.function``), provided a registered
    workflow may hand it to ``fan_out``: a function defined in the module of a registered workflow
    class, or in a module ``imports`` (PGBUS_IMPORT) names. ChildFunctionNotAllowed otherwise.

    The name comes from the database (``pgbus_batches.func``), which is not trusted with code: the
    module is checked before anything is looked up, and nothing is imported but ``imports``
    (importing a module runs its code). The function must be the module's own (``__module__`` and
    ``__qualname__`` say so), not a name it imported from elsewhere (``from os import makedirs``).
    """
    imports = tuple(imports)
    for imported in imports:
        importlib.import_module(imported)  # the operator's modules: declares the workflows they hold
    module_name, _, name = path.rpartition(".") if isinstance(path, str) else ("", "", "")
    allowed = set(imports) | {klass.__module__ for klass in REGISTRY.values()}
    module = sys.modules.get(module_name) if module_name in allowed and name.isidentifier() else None
    func = getattr(module, name, None) if module is not None else None
    if (callable(func) and not isinstance(func, type) and getattr(func, "__module__", None) == module_name
            and getattr(func, "__qualname__", None) == name):
        return func  # type: ignore[no-any-return]
    shown = payload.safe_str(path if isinstance(path, str) else repr(path))
    raise ChildFunctionNotAllowed(shown if len(shown) <= 200 else shown[:199] + "…")


def registry() -> dict[str, type[Workflow]]:
    """Every registered workflow class by name (a copy)."""
    return dict(REGISTRY)


@contextmanager
def scoped_registry() -> Iterator[None]:
    """Workflow classes declared inside the ``with`` block stay registered only until it ends.

    For tests: a class a test declares (a scheduled one, say) would otherwise be started by
    every later test's sweep. On leaving, the registry is as it was on entering (a class the
    block replaced comes back), except for classes defined at the top level of a module the
    block imported: that module stays imported, and would not declare them again::

        with scoped_registry():
            class Nightly(Workflow):
                schedule = "0 3 * * *"
                ...
    """
    before = dict(REGISTRY)
    try:
        yield
    finally:
        for name, klass in list(REGISTRY.items()):
            if before.get(name) is klass or _defined_in_a_module(klass):
                continue
            if name in before:
                REGISTRY[name] = before[name]
            else:
                del REGISTRY[name]


def _defined_in_a_module(klass: type) -> bool:
    return getattr(sys.modules.get(klass.__module__), klass.__qualname__, None) is klass
