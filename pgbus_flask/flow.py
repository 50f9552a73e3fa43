"""Flow control as a workflow declares it: concurrency limits, rate limits and priorities.

``Limit`` and ``Rate`` are values a class or a step carries (``concurrency = Limit(2, key=...)``,
``@step(concurrency=Limit(5, name="stripe"), rate=Rate(10, per=timedelta(seconds=1)))``); the runner
takes and gives back their slots (``runner/limits.py``) and the SQL functions of migration 0017 keep
the line of waiters. docs/flow-control.md says what counts and what happens after a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from . import payload, states
from .errors import DefinitionError, InvalidInput

#: What ``Limit(on_busy=...)`` accepts: wait for a slot, refuse the start, or replace the arguments
#: of the key's run that has not started yet (debounce).
ON_BUSY = ("queue", "refuse", "replace")
#: The most starts a rate counts in one window (its row keeps each start of the window).
RATE_CAPACITY_LIMIT = 1000
#: The priority bands steps are sent in: a positive priority goes to ``<queue>.high``, a negative
#: one to ``<queue>.low``, which pgbus-worker reads before and after ``<queue>``.
HIGH_SUFFIX, LOW_SUFFIX = ".high", ".low"


def _checked_name(name: Any, what: str) -> str | None:
    if name is None:
        return None
    if not isinstance(name, str) or not name.strip() or len(name.encode()) > states.NAME_LIMIT:
        raise DefinitionError(f"{what}: name must be a non-empty text of at most {states.NAME_LIMIT} bytes, "
                              f"got {name!r:.80}")
    return name


@dataclass(frozen=True)
class Limit:
    """At most ``capacity`` at once: runs of a class (``concurrency`` on the class) running a step,
    or attempts of a step (``@step(concurrency=...)``) in progress, per value of ``key`` (a callable
    of the workflow instance: ``lambda wf: wf.kwargs["tenant"]``; None: one key for all). Limits
    with the same ``name`` share their slots across classes. ``on_busy`` (class limits only): what
    ``start()`` does when the key has no free slot, see :data:`ON_BUSY`."""

    capacity: int
    key: Callable[[Any], Any] | None = field(default=None, compare=False)
    name: str | None = None
    on_busy: str = "queue"

    def __post_init__(self) -> None:
        if not isinstance(self.capacity, int) or isinstance(self.capacity, bool) or self.capacity < 1:
            raise DefinitionError(f"Limit: capacity must be a positive int, got {self.capacity!r:.80}")
        if self.key is not None and not callable(self.key):
            raise DefinitionError(f"Limit: key must be a callable of the workflow instance, got {self.key!r:.80}")
        _checked_name(self.name, "Limit")
        if self.on_busy not in ON_BUSY:
            raise DefinitionError(f"Limit: on_busy must be one of {ON_BUSY}, got {self.on_busy!r:.80}")

    def key_of(self, instance: Any) -> str:
        """The key of ``instance`` (a workflow instance) as stored: '' without a key callable."""
        if self.key is None:
            return ""
        try:
            value = self.key(instance)
        except Exception as exc:
            raise InvalidInput("concurrency key", f"the key callable raised {type(exc).__name__}: "
                                                  f"{payload.safe_str(str(exc))[:200]}") from exc
        if value is None:
            return ""
        text = value if isinstance(value, str) else str(value)
        return payload.check_text(text, "concurrency key", max_bytes=states.KEY_LIMIT) or ""


@dataclass(frozen=True)
class Rate:
    """At most ``count`` attempts start in any window of ``per``, across every worker, for the steps
    that name this rate (``name``; the step's own name by default). A step over the rate waits,
    its run ``waiting``, until the rate's wake-up sends it."""

    count: int
    per: timedelta = timedelta(seconds=1)
    name: str | None = None

    def __post_init__(self) -> None:
        count = self.count
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= RATE_CAPACITY_LIMIT:
            raise DefinitionError(f"Rate: count must be an int from 1 to {RATE_CAPACITY_LIMIT} (a rate keeps each "
                                  f"start of its window), got {self.count!r:.80}")
        per = self.per
        if isinstance(per, (int, float)) and not isinstance(per, bool):
            object.__setattr__(self, "per", timedelta(seconds=per))
        if not isinstance(self.per, timedelta) or self.per <= timedelta(0) or self.per > timedelta(days=1):
            raise DefinitionError(f"Rate: per must be a timedelta (or seconds) above 0 and at most a day, "
                                  f"got {per!r:.80}")
        _checked_name(self.name, "Rate")


def checked_priority(value: Any, what: str) -> int | None:
    """``value`` as a priority (an int; None: not given); InvalidInput naming ``what`` otherwise."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not -1_000_000 <= value <= 1_000_000:
        raise InvalidInput(what, f"must be an int from -1000000 to 1000000, got {payload.safe_str(repr(value))[:80]}")
    return value


def band(queue: str, priority: int | None) -> str:
    """The RQ queue a step of ``priority`` is sent to (see :data:`HIGH_SUFFIX`)."""
    if priority and priority > 0:
        return queue + HIGH_SUFFIX
    if priority and priority < 0:
        return queue + LOW_SUFFIX
    return queue


def banded(queues: list[str]) -> list[str]:
    """The queues a worker of ``queues`` reads, in order: every high band, the queues, every low band."""
    base = [q for q in queues if not q.endswith((HIGH_SUFFIX, LOW_SUFFIX))]
    extra = [q for q in queues if q not in base]
    return ([q + HIGH_SUFFIX for q in base] + base + [q + LOW_SUFFIX for q in base]
            + [q for q in extra if q not in base])
