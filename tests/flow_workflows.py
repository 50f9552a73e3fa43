"""Workflow classes with flow control (docs/flow-control.md); importable by worker processes
(PGBUS_IMPORT=tests.flow_workflows)."""

from __future__ import annotations

import os
import time
from datetime import timedelta

from pgbus_flask import Limit, Rate, Workflow, step


def _pause(wf: Workflow) -> None:
    time.sleep(float(wf.kwargs.get("seconds", 0) or os.environ.get("PGBUS_TEST_STEP_SECONDS", 0)))


class TenantSync(Workflow):
    """At most 2 runs a tenant running a step at once."""

    concurrency = Limit(2, key=lambda wf: wf.kwargs["tenant"])

    @step
    def fetch(self) -> str:
        _pause(self)
        return "fetched"

    @step
    def store(self) -> str:
        _pause(self)
        return "stored"


class Charge(Workflow):
    """A step limit shared by name ("stripe") with :class:`Refund`."""

    @step
    def prepare(self) -> str:
        return "prepared"

    @step(concurrency=Limit(1, name="stripe"))
    def charge(self) -> str:
        _pause(self)
        return "charged"


class Refund(Workflow):
    @step(concurrency=Limit(1, name="stripe"))
    def refund(self) -> str:
        _pause(self)
        return "refunded"


class Refusing(Workflow):
    concurrency = Limit(1, key=lambda wf: wf.kwargs["tenant"], on_busy="refuse")

    @step
    def only(self) -> str:
        return "done"


class Debounced(Workflow):
    concurrency = Limit(1, key=lambda wf: wf.kwargs["tenant"], on_busy="replace")

    @step
    def only(self) -> dict[str, object]:
        _pause(self)
        return dict(self.kwargs)


class RateLimited(Workflow):
    @step(rate=Rate(5, per=timedelta(seconds=1), name="test-api"))
    def call(self) -> str:
        return "called"


class BadKey(Workflow):
    @step(concurrency=Limit(1, key=lambda wf: wf.kwargs["missing"]))
    def only(self) -> str:
        return "never"


class Prioritised(Workflow):
    @step
    def only(self) -> str:
        return "done"


class ChaosTenant(Workflow):
    """Two steps, at most 2 runs a tenant; a killed worker's attempt stalls after 3 s and is attempted again."""

    concurrency = Limit(2, key=lambda wf: wf.kwargs["tenant"])

    @step(timeout=timedelta(seconds=3), on_error="reattempt", max_reattempts=20, backoff=0)
    def work(self) -> str:
        time.sleep(float(self.kwargs.get("seconds", 0.2)))
        return "worked"

    @step(timeout=timedelta(seconds=3), on_error="reattempt", max_reattempts=20, backoff=0)
    def done(self) -> str:
        time.sleep(float(self.kwargs.get("seconds", 0.2)))
        return "done"
