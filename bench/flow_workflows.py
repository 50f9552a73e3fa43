"""Workflow classes of ``bench.flow`` (imported by its ``pgbus-worker`` processes:
``PGBUS_IMPORT=bench.flow_workflows``), each beside the same class without flow control.

Steps that do work sleep the milliseconds their run was started with (``ms=[a, b]``, one a step)
and return the wall-clock span of their own code (``{"t0": ..., "t1": ...}``, ``time.time()``):
that span lies inside the time the attempt held its slot (the claim committed before the code
ran, the outcome commits after it), so ``bench.flow`` can check a limit from it without the
database's transaction-start timestamps.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from pgbus_flask import Limit, Rate, Workflow, step

#: The capacity of the limits that are declared but never bind (part 1).
HUGE = 10_000
#: A capacity no tenant of part 1 reaches (it has fewer runs than that), to tell the cost of a limit
#: from the cost of its capacity.
SMALL = 64
#: A tenant's limit (parts 2, 3 and 5) and the rate of part 4.
PER_TENANT = 2
RATE = 50
#: Part 5: a step's stall deadline, and how often a killed attempt is tried again.
CHAOS_TIMEOUT = timedelta(seconds=3)
CHAOS_REATTEMPTS = 50


def _tenant(wf: Workflow) -> Any:
    return wf.kwargs["tenant"]


def _work(wf: Workflow, index: int) -> dict[str, float]:
    t0 = time.time()
    ms = wf.kwargs.get("ms") or ()
    if len(ms) > index and ms[index]:
        time.sleep(ms[index] / 1000)
    return {"t0": t0, "t1": time.time()}


# Part 1: five no-op steps (bench.steps' FiveNoop), with limits that never bind. (A subclass does
# not inherit its parent's steps, so each class spells them out.)

class Free5(Workflow):
    @step
    def s1(self) -> None: ...

    @step
    def s2(self) -> None: ...

    @step
    def s3(self) -> None: ...

    @step
    def s4(self) -> None: ...

    @step
    def s5(self) -> None: ...


class Class5(Workflow):
    """A class limit of one key that never binds."""

    concurrency = Limit(HUGE)

    @step
    def s1(self) -> None: ...

    @step
    def s2(self) -> None: ...

    @step
    def s3(self) -> None: ...

    @step
    def s4(self) -> None: ...

    @step
    def s5(self) -> None: ...


class Keyed5(Workflow):
    """A class limit per tenant that never binds."""

    concurrency = Limit(HUGE, key=_tenant)

    @step
    def s1(self) -> None: ...

    @step
    def s2(self) -> None: ...

    @step
    def s3(self) -> None: ...

    @step
    def s4(self) -> None: ...

    @step
    def s5(self) -> None: ...


class Small5(Workflow):
    """A class limit per tenant with a small capacity, never binding (fewer runs a tenant than that)."""

    concurrency = Limit(SMALL, key=_tenant)

    @step
    def s1(self) -> None: ...

    @step
    def s2(self) -> None: ...

    @step
    def s3(self) -> None: ...

    @step
    def s4(self) -> None: ...

    @step
    def s5(self) -> None: ...


class Stepped5(Workflow):
    """A class limit and a step limit (on s3), neither binding."""

    concurrency = Limit(HUGE)

    @step
    def s1(self) -> None: ...

    @step
    def s2(self) -> None: ...

    @step(concurrency=Limit(HUGE, name="bench-wide"))
    def s3(self) -> None: ...

    @step
    def s4(self) -> None: ...

    @step
    def s5(self) -> None: ...


# Parts 2 and 3: two steps that sleep, at most 2 runs a tenant.

class TenantFree(Workflow):
    @step
    def fetch(self) -> dict[str, float]:
        return _work(self, 0)

    @step
    def store(self) -> dict[str, float]:
        return _work(self, 1)


class TenantLimited(Workflow):
    concurrency = Limit(PER_TENANT, key=_tenant)

    @step
    def fetch(self) -> dict[str, float]:
        return _work(self, 0)

    @step
    def store(self) -> dict[str, float]:
        return _work(self, 1)


# Part 4: one step under a rate.

class ApiFree(Workflow):
    @step
    def call(self) -> None: ...


class ApiRated(Workflow):
    @step(rate=Rate(RATE, per=timedelta(seconds=1), name="bench-api"))
    def call(self) -> None: ...


# Part 5: the tenants' workflow with a short stall deadline and reattempts, for a worker killed
# in the middle of a step (backoff 0: a reattempted run keeps its slot, see migration 0017).

_CHAOS: dict[str, Any] = {"timeout": CHAOS_TIMEOUT, "on_error": "reattempt", "max_reattempts": CHAOS_REATTEMPTS,
                          "backoff": 0}


class ChaosFree(Workflow):
    @step(**_CHAOS)
    def fetch(self) -> dict[str, float]:
        return _work(self, 0)

    @step(**_CHAOS)
    def store(self) -> dict[str, float]:
        return _work(self, 1)


class ChaosLimited(Workflow):
    concurrency = Limit(PER_TENANT, key=_tenant)

    @step(**_CHAOS)
    def fetch(self) -> dict[str, float]:
        return _work(self, 0)

    @step(**_CHAOS)
    def store(self) -> dict[str, float]:
        return _work(self, 1)
