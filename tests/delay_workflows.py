"""Workflows with durable delays (tests/db/test_delays.py); importable by worker processes
(PGBUS_IMPORT=tests.delay_workflows)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from pgbus_flask import Workflow, step

#: What :class:`ShipsWhenTold`'s wait_until does (a test flips it to see a retry evaluate it again).
BEHAVIOUR: dict[str, Any] = {"raise": False}


class WaitsBriefly(Workflow):
    """``second`` is due 1.5 s after ``first`` completes."""

    @step
    def first(self) -> str:
        return "first"

    @step(wait=1.5)
    def second(self) -> str:
        return "second"


class WaitsADay(Workflow):
    """``remind`` is due a day after ``order`` ends; ``close`` right after ``remind``."""

    @step
    def order(self) -> str:
        return "ordered"

    @step(wait=timedelta(days=1))
    def remind(self) -> str:
        return "reminded"

    @step
    def close(self) -> str:
        return "closed"


class StartsLater(Workflow):
    """Its first step is due an hour after start."""

    @step(wait=timedelta(hours=1))
    def begin(self) -> str:
        return "begun"

    @step
    def end(self) -> str:
        return "ended"


def _eta(workflow: Any) -> Any:
    return workflow.output_of("order")["eta"]


class ShipsAtEta(Workflow):
    """``ship`` is due at the moment ``order``'s output names (``eta_in`` seconds from then)."""

    @step
    def order(self) -> dict[str, Any]:
        return {"eta": datetime.now(timezone.utc) + timedelta(seconds=self.kwargs.get("eta_in", 86_400))}

    @step(wait_until=_eta)
    def ship(self) -> str:
        return f"shipped for {self.output_of('order')['eta'].isoformat()}"


def _told(workflow: Any) -> Any:
    if BEHAVIOUR["raise"]:
        raise LookupError("no ship date known yet")
    return workflow.kwargs["ship_at"]


class ShipsWhenTold(Workflow):
    """``ship`` is due at ``ship_at`` (a start argument); its wait_until raises while BEHAVIOUR says so."""

    @step
    def prepare(self) -> str:
        return "prepared"

    @step(wait_until=_told)
    def ship(self) -> str:
        return "shipped"


class StartsWhenTold(Workflow):
    """Its first step has a wait_until (``ship_at``, a start argument)."""

    @step(wait_until=lambda self: self.kwargs["ship_at"])
    def ship(self) -> str:
        return "shipped"

    @step
    def done(self) -> str:
        return "done"


class NaiveMoment(Workflow):
    @step
    def prepare(self) -> str:
        return "prepared"

    @step(wait_until=lambda self: datetime(2030, 1, 1, 9, 0))
    def ship(self) -> str:
        return "shipped"


class Naps(Workflow):
    """``nap`` completes and asks ``wake`` to wait: ``seconds`` or ``until`` (a start argument)."""

    @step
    def nap(self) -> str:
        if "until" in self.kwargs:
            self.sleep_until(self.kwargs["until"])
        else:
            self.sleep(self.kwargs.get("seconds", 86_400))
        return "napped"

    @step
    def wake(self) -> str:
        return "awake"


class SleepsAndWaits(Workflow):
    """``nap`` sleeps ``seconds``; ``wake`` has a wait of two hours of its own: the later counts."""

    @step
    def nap(self) -> str:
        self.sleep(self.kwargs["seconds"])
        return "napped"

    @step(wait=timedelta(hours=2))
    def wake(self) -> str:
        return "awake"


class SleepsTransactionally(Workflow):
    """A transactional step that sleeps: its writes commit with the completion, the next step waits."""

    @step(transactional=True)
    def nap(self) -> str:
        self.conn.execute("INSERT INTO app_naps (run) VALUES (%s)", (str(self.workflow_id),))
        self.sleep(timedelta(days=1))
        return "napped"

    @step
    def wake(self) -> str:
        return "awake"


class SleepsLast(Workflow):
    @step
    def first(self) -> str:
        return "first"

    @step
    def last(self) -> str:
        self.sleep(60)
        return "never stored"


class SleepsNaively(Workflow):
    @step
    def nap(self) -> str:
        self.sleep_until(datetime(2030, 1, 1))
        return "never stored"

    @step
    def wake(self) -> str:
        return "awake"


def count_child(n: int) -> int:
    return n * 10


class FansOutThenSleeps(Workflow):
    """A fan-out step that sleeps a day: the step after it is due a day after the step's code
    returned (its batch finishing sooner does not make it due)."""

    @step
    def fan(self) -> Any:
        self.sleep(timedelta(days=1))
        return self.fan_out(count_child, [(1,), (2,)])

    @step
    def after(self) -> Any:
        return self.output_of("fan")["results"]
