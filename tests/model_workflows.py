"""The small workflow classes tests/db/test_model.py starts: one per kind of step the engine knows.

Their steps fail, pause or reattempt as the run's keyword arguments say, so the
state machine picks a run's behaviour when it starts it. Kept apart from
tests/workflows.py so that the model's class names (``Model*``) stay its own.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from pgbus_flask import Limit, Workflow, step

#: The signal every waiting step of these classes waits for.
SIGNAL = "go"
#: Long enough that only the test moves a deadline past (it updates the stored column).
WAIT = timedelta(hours=1)


def model_child(index: int, fail_at: int | None) -> str:
    """A fan-out child: fails at position ``fail_at``."""
    if index == fail_at:
        raise RuntimeError(f"child {index} failed")
    return f"child {index}"


class ModelPlain(Workflow):
    """Two plain steps; ``second`` fails (error policy: pause) on attempts up to ``fail_until``."""

    @step
    def first(self) -> dict[str, Any]:
        return {"attempt": self.attempt}

    @step
    def second(self) -> str:
        if self.attempt <= self.kwargs.get("fail_until", 0):
            raise ValueError(f"second failed on attempt {self.attempt}")
        return "second"


class ModelReattempt(Workflow):
    """Every error policy but pause: reattempt (2 at most, no backoff), then skip, then cancel."""

    @step(on_error="reattempt", max_reattempts=2, backoff=0)
    def flaky(self) -> str:
        if self.attempt <= self.kwargs.get("fail_until", 0):
            raise ConnectionError(f"refused on attempt {self.attempt}")
        if self.kwargs.get("ask") and self.attempt == 1:
            self.reattempt(0)
        return "ok"

    @step(on_error="skip")
    def tidy(self) -> str:
        if self.kwargs.get("tidy_fails"):
            raise ValueError("tidy failed")
        return "tidy"

    @step(on_error="cancel")
    def close(self) -> str:
        if self.kwargs.get("close_fails") and self.attempt == 1:
            raise ValueError("close failed")
        return "closed"


class ModelSelfPause(Workflow):
    """``check`` pauses the run itself on its first attempt; resume retries it."""

    @step
    def check(self) -> str:
        if self.attempt == 1:
            self.pause("needs a manual look")
        return "checked"

    @step
    def done(self) -> str:
        return "done"


class ModelWaitFail(Workflow):
    """Waits for ``go``; a timed-out wait fails the step, which is reattempted once."""

    @step
    def prepare(self) -> str:
        return "prepared"

    @step(wait_for=SIGNAL, wait_timeout=WAIT, on_error="reattempt", max_reattempts=1, backoff=0)
    def confirm(self) -> Any:
        assert self.received_signal is not None
        return self.received_signal.payload


class ModelWaitSkip(Workflow):
    """Waits for ``go``; a timed-out wait skips the step."""

    @step(wait_for=SIGNAL, wait_timeout=WAIT, on_timeout="skip")
    def confirm(self) -> Any:
        return self.received_signal.payload if self.received_signal else None

    @step
    def after(self) -> str:
        return "after"


class ModelWaitContinue(Workflow):
    """Waits for ``go``; a timed-out wait runs the step with no signal. It fails when told to."""

    @step(wait_for=SIGNAL, wait_timeout=WAIT, on_timeout="continue")
    def confirm(self) -> Any:
        if self.kwargs.get("fail_until", 0) >= self.attempt:
            raise ValueError("confirm failed")
        return self.received_signal.payload if self.received_signal else "no signal"


class ModelWaitForever(Workflow):
    """Waits for ``go`` with no deadline (needs attention once it waited past the waiting threshold)."""

    @step(wait_for=SIGNAL)
    def confirm(self) -> Any:
        assert self.received_signal is not None
        return self.received_signal.payload

    @step
    def after(self) -> str:
        return "after"


class ModelFanOut(Workflow):
    """Fans out ``n`` children (one may fail) with the child failure policy given."""

    @step
    def spread(self) -> Any:
        n, fail_at = self.kwargs.get("n", 2), self.kwargs.get("fail_at")
        return self.fan_out(model_child, [(i, fail_at) for i in range(n)],
                            on_child_failure=self.kwargs.get("policy", "fail"))

    @step
    def gather(self) -> str:
        return "gathered"


#: The capacity of the model's limits: one, so that any two runs of a key contend.
MODEL_CAPACITY = 1


class ModelLimited(Workflow):
    """At most one run a key running a step (the key: ``tenant``, "t" by default); ``second`` also
    takes a slot of "model-shared", which :class:`ModelShared` names too, and fails (pause) on
    attempts up to ``fail_until``."""

    concurrency = Limit(MODEL_CAPACITY, key=lambda wf: wf.kwargs.get("tenant", "t"))

    @step
    def first(self) -> str:
        return "first"

    @step(concurrency=Limit(MODEL_CAPACITY, name="model-shared"))
    def second(self) -> str:
        if self.attempt <= self.kwargs.get("fail_until", 0):
            raise ValueError(f"second failed on attempt {self.attempt}")
        return "second"


class ModelShared(Workflow):
    """One step that takes the slot of "model-shared"; reattempts once on failure."""

    @step(concurrency=Limit(MODEL_CAPACITY, name="model-shared"), on_error="reattempt", max_reattempts=1, backoff=0)
    def only(self) -> str:
        if self.attempt <= self.kwargs.get("fail_until", 0):
            raise ValueError(f"only failed on attempt {self.attempt}")
        return "only"


CLASSES: tuple[type[Workflow], ...] = (
    ModelPlain, ModelReattempt, ModelSelfPause, ModelWaitFail, ModelWaitSkip, ModelWaitContinue, ModelWaitForever,
    ModelFanOut, ModelLimited, ModelShared,
)

#: The classes whose runs contend for the same slots.
CONTENDING: tuple[type[Workflow], ...] = (ModelLimited, ModelShared)
