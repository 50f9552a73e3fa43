"""A scheduled class for the process test only (tests/processes/test_schedule_processes.py): its workers
import it through PGBUS_IMPORT; the test process never does, so no other test's sweep starts it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, ClassVar

from pgbus_flask import Workflow, step


class EverySecond(Workflow):
    schedule = timedelta(seconds=1)
    schedule_missed = "all"  # every tick must have its run: a late sweep catches up, it does not skip
    schedule_kwargs: ClassVar[dict[str, Any]] = {"source": "process test"}

    @step
    def record(self) -> dict[str, Any]:
        return {"tick": self.tick, "source": self.kwargs["source"]}
