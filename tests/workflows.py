"""Workflow classes the tests start; importable by worker processes (PGBUS_IMPORT=tests.workflows)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from pgbus_flask import Workflow, step


class ThreeSteps(Workflow):
    @step
    def reserve(self) -> dict[str, Any]:
        return {"reserved": self.kwargs.get("order_id"), "args": list(self.args)}

    @step
    def charge(self) -> int:
        return int(self.output_of("reserve")["reserved"] or 0) * 2

    @step
    def ship(self) -> str:
        return f"shipped {self.output_of('charge')}"


class FiveNoop(Workflow):
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


class FailsUntil(Workflow):
    """``capture`` raises TimeoutError on attempts up to ``fail_until``."""

    @step
    def capture(self) -> str:
        if self.attempt <= self.kwargs.get("fail_until", 1):
            raise TimeoutError(f"gateway timed out on attempt {self.attempt}")
        return "captured"

    @step
    def notify(self) -> str:
        return "notified"


class Reattempts(Workflow):
    @step(on_error="reattempt", max_reattempts=2, backoff=0)
    def flaky(self) -> str:
        if self.attempt <= self.kwargs.get("fail_until", 99):
            raise ConnectionError(f"refused on attempt {self.attempt}")
        return "ok"


class CancelsOnError(Workflow):
    @step(on_error="cancel")
    def doomed(self) -> None:
        raise ValueError("no such account")


class SkipsOnError(Workflow):
    @step(on_error="skip")
    def optional(self) -> None:
        raise ValueError("optional part failed")

    @step
    def last(self) -> str:
        return "done"


class PausesItself(Workflow):
    @step
    def check(self) -> str:
        if self.attempt == 1:
            self.pause("needs a manual look")
        return "checked"


class WaitsForPayment(Workflow):
    @step
    def invoice(self) -> str:
        return "invoiced"

    @step(wait_for="payment_confirmed", wait_timeout=timedelta(hours=2))
    def confirm(self) -> Any:
        assert self.received_signal is not None
        return {"paid": self.received_signal.payload, "signal": self.received_signal.name}

    @step
    def ship(self) -> str:
        return "shipped"


class ShortWait(Workflow):
    """Waits 1 s for ``go``; ``on_timeout`` from the class attribute."""

    @step(wait_for="go", wait_timeout=timedelta(seconds=1))
    def wait_fail(self) -> Any:
        return self.received_signal.payload if self.received_signal else "no signal"

    @step
    def after(self) -> str:
        return "after"


class ShortWaitSkip(Workflow):
    @step(wait_for="go", wait_timeout=timedelta(seconds=1), on_timeout="skip")
    def wait_skip(self) -> Any:
        return "ran"

    @step
    def after(self) -> str:
        return "after"


class ShortWaitContinue(Workflow):
    @step(wait_for="go", wait_timeout=timedelta(seconds=1), on_timeout="continue")
    def wait_continue(self) -> Any:
        return "ran without signal" if self.received_signal is None else "ran with signal"


class WaitsForever(Workflow):
    @step(wait_for="go")
    def wait(self) -> Any:
        return self.received_signal.payload if self.received_signal else None


def vendor_child(index: int, fail_at: int | None = None) -> str:
    if fail_at is not None and index == fail_at:
        raise RuntimeError(f"vendor {index} is down")
    return f"vendor {index} notified"


class FansOut(Workflow):
    @step
    def notify_vendors(self) -> Any:
        fail_at = self.kwargs.get("fail_at")
        policy = self.kwargs.get("on_child_failure", "fail")
        return self.fan_out(vendor_child, [(i, fail_at) for i in range(self.kwargs.get("n", 12))],
                            on_child_failure=policy)

    @step
    def summarize(self) -> Any:
        return self.output_of("notify_vendors")["done"]


class Sleeps(Workflow):
    """A step that sleeps ``seconds`` (for crash tests): its stall deadline is 2 s."""

    @step(timeout=timedelta(seconds=2))
    def slow(self) -> str:
        time.sleep(self.kwargs.get("seconds", 30))
        return "woke"

    @step
    def after(self) -> str:
        return "after"


class CutsDatabaseConnections(Workflow):
    """Its first step terminates every other connection to the database (the worker's pool too)."""

    @step
    def cut(self) -> str:
        import psycopg

        with psycopg.connect(self.kwargs["url"], autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                         " WHERE datname = current_database() AND pid <> pg_backend_pid()")
        return "cut"

    @step
    def after(self) -> str:
        return "after"
