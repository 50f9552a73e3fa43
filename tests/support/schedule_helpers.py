"""Scheduled workflow classes for one test: declared in it, unregistered after it.

A scheduled class left registered would be started by every later test's sweep, so
the tests declare theirs through the ``declare`` fixture instead of in tests/workflows.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pgbus_flask import Workflow, step
from pgbus_flask.definition import scoped_registry

Declare = Callable[..., type[Workflow]]


def _tick_step(self: Workflow) -> dict[str, Any]:
    return {"tick": self.tick, "kwargs": {k: v for k, v in self.kwargs.items() if k != "tick"}}


@pytest.fixture
def declare() -> Iterator[Declare]:
    """Declare a scheduled workflow class named ``name`` (one step returning its tick) for this test only."""

    def make(name: str, schedule: Any, **attrs: Any) -> type[Workflow]:
        return type(name, (Workflow,), {"__qualname__": name, "schedule": schedule, **attrs,
                                        "record": step(_tick_step)})

    with scoped_registry():
        yield make
