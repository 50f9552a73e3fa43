"""Error reporting (pgbus_flask/reporting.py): what pgbus handles by itself reaches PGBUS_ERROR_REPORTER
and Sentry, tagged with the run.

Sentry is the real sentry-sdk, initialised with a transport that keeps the envelopes it would send
(default integrations on, as an app has them: the logging integration sees pgbus's own log lines,
and each failure must still make one event). Redis "down" is a URL nothing listens on.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
import sentry_sdk
from redis.exceptions import ConnectionError as RedisConnectionError
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from pgbus_flask import Workflow, reporting, step
from pgbus_flask import engine as engine_module
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.errors import WaitUntilFailed
from pgbus_flask.sweep import sweep
from tests.support import settings_for, work
from tests.support.seeds import engine_sql as sql
from tests.workflows import FailsUntil, Reattempts, ThreeSteps

#: A Redis nothing listens on: every send fails at once (connection refused).
NO_REDIS = "redis://127.0.0.1:1/3"


class Reporter:
    """A PGBUS_ERROR_REPORTER that keeps what it was told; ``fails``: it raises after keeping it."""

    def __init__(self, fails: bool = False) -> None:
        self.calls: list[tuple[BaseException, dict[str, Any]]] = []
        self.fails = fails

    def __call__(self, exc: BaseException, context: dict[str, Any]) -> None:
        self.calls.append((exc, context))
        if self.fails:
            raise RuntimeError("the error tracker is down too")

    def at(self, where: str) -> list[tuple[BaseException, dict[str, Any]]]:
        return [(exc, context) for exc, context in self.calls if context["where"] == where]


class Capture(Transport):
    """sentry-sdk's transport, keeping each event instead of sending it."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        for item in envelope.items:
            event = item.get_event()
            if event is not None:
                self.events.append(dict(event))


@pytest.fixture
def sentry() -> Iterator[Capture]:
    transport = Capture()
    # release given: without it, sentry-sdk runs git to find one
    sentry_sdk.init(dsn="https://key@sentry.example.invalid/1", transport=transport, release="pgbus-test",
                    auto_enabling_integrations=False)
    try:
        yield transport
    finally:
        sentry_sdk.get_client().close()
        sentry_sdk.get_global_scope().set_client(None)


@contextmanager
def bus(pg_url: str, redis_url: str, reporter: Reporter | None, **extra: Any) -> Iterator[Engine]:
    """An engine made the process default, told of failures by ``reporter``."""
    engine = Engine(Settings.load(settings_for(pg_url, redis_url, PGBUS_ERROR_REPORTER=reporter, **extra)))
    engine.make_default()
    try:
        yield engine
    finally:
        engine.close()
        engine_module._default = None


def tags(event: dict[str, Any]) -> dict[str, str]:
    found = event.get("tags", {})
    pairs = found.items() if isinstance(found, dict) else found
    return {key: value for key, value in pairs if key.startswith("pgbus.")}


def exception_of(event: dict[str, Any]) -> tuple[str, str]:
    last = event["exception"]["values"][-1]
    return last["type"], last["value"]


def test_a_step_job_that_cannot_be_enqueued_is_reported_with_its_run(
        clean: None, pg_url: str, sentry: Capture, caplog: pytest.LogCaptureFixture) -> None:
    reporter = Reporter()
    with bus(pg_url, NO_REDIS, reporter):
        run = ThreeSteps.start(order_id=1, subject=("Order", 1))
        assert run.refresh().status == "ready"  # committed: the sweep sends it again once Redis is back
        [(exc, context)] = reporter.calls
        assert isinstance(exc, RedisConnectionError)
        assert context == {"where": "enqueue", "run_id": str(run.workflow_id), "workflow_class": "ThreeSteps",
                           "step": "reserve", "attempt": 1}
        [event] = sentry.events  # one event: the logging integration's copy of the log line is deduplicated
        assert tags(event) == {"pgbus.where": "enqueue", "pgbus.run_id": str(run.workflow_id),
                               "pgbus.workflow_class": "ThreeSteps", "pgbus.step": "reserve", "pgbus.attempt": "1"}
        assert exception_of(event)[0] == "ConnectionError"
        assert event["contexts"]["pgbus"]["run_id"] == str(run.workflow_id)
        assert "could not be enqueued on 'pgbus'; the sweep will resend it" in caplog.text  # still logged


def test_a_sweep_part_that_raises_is_reported_and_the_others_run(clean: None, pg_url: str, sentry: Capture,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    reporter = Reporter()
    with bus(pg_url, NO_REDIS, reporter) as engine:
        run = ThreeSteps.start(order_id=2)
        sql(engine, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '1 hour',"
                    " enqueued_at = now() - interval '1 hour'")  # overdue: the sweep asks Redis about its job
        report = sweep(engine)
        assert [error.split(":")[0] for error in report.errors] == ["_overdue"]
        assert report.insights_folded > 0  # the parts after it ran
        [(exc, context)] = reporter.at("sweep")
        assert isinstance(exc, RedisConnectionError)
        assert context == {"where": "sweep", "run_id": None, "workflow_class": None, "step": None, "attempt": None}
        swept = [event for event in sentry.events if tags(event).get("pgbus.where") == "sweep"]
        assert len(swept) == 1 and tags(swept[0]) == {"pgbus.where": "sweep"}
        assert [tags(event)["pgbus.where"] for event in sentry.events] == ["enqueue", "sweep"]
        assert "pgbus sweep: _overdue failed" in caplog.text
        assert run.refresh().status == "ready"


def test_a_step_that_raises_is_reported_with_its_run_step_and_attempt(clean: None, pg_url: str, redis_url: str,
                                                                      sentry: Capture) -> None:
    reporter = Reporter()
    with bus(pg_url, redis_url, reporter) as engine:
        paused = FailsUntil.start(fail_until=1)
        retried = Reattempts.start()  # three attempts (max_reattempts=2), then it pauses
        work(engine)
        assert paused.refresh().status == "paused" and retried.refresh().status == "paused"
        told = sorted((c["workflow_class"], c["attempt"], c["run_id"], c["step"], type(e).__name__, str(e))
                      for e, c in reporter.at("step"))
        assert told == [
            ("FailsUntil", 1, str(paused.workflow_id), "capture", "TimeoutError", "gateway timed out on attempt 1"),
            *[("Reattempts", n, str(retried.workflow_id), "flaky", "ConnectionError", f"refused on attempt {n}")
              for n in (1, 2, 3)],
        ]
        assert len(reporter.calls) == 4  # nothing else
        events = sorted((tags(e)["pgbus.workflow_class"], tags(e)["pgbus.attempt"], tags(e)["pgbus.step"],
                         tags(e)["pgbus.where"], exception_of(e)) for e in sentry.events)
        assert events == [
            ("FailsUntil", "1", "capture", "step", ("TimeoutError", "gateway timed out on attempt 1")),
            *[("Reattempts", str(n), "flaky", "step", ("ConnectionError", f"refused on attempt {n}"))
              for n in (1, 2, 3)],
        ]
        assert {tags(e)["pgbus.run_id"] for e in sentry.events} == {str(paused.workflow_id),
                                                                   str(retried.workflow_id)}


class RaisesInTransaction(Workflow):
    @step(transactional=True)
    def book(self) -> None:
        self.conn.execute("SELECT 1")
        raise LookupError("no such ledger")


def _never(wf: Workflow) -> datetime:
    raise KeyError("ship_at")


class BadWaitUntil(Workflow):
    @step(wait_until=_never)
    def ship(self) -> str:
        return "shipped"


def test_a_transactional_step_and_a_wait_until_that_raise_are_reported(clean: None, pg_url: str, redis_url: str,
                                                                       sentry: Capture) -> None:
    reporter = Reporter()
    with bus(pg_url, redis_url, reporter) as engine:
        booked, shipped = RaisesInTransaction.start(), BadWaitUntil.start()
        work(engine)
        assert booked.refresh().status == "paused" and shipped.refresh().status == "paused"
        told = {c["workflow_class"]: (type(e), c["step"], c["attempt"]) for e, c in reporter.at("step")}
        assert told == {"RaisesInTransaction": (LookupError, "book", 1),
                        "BadWaitUntil": (WaitUntilFailed, "ship", 1)}
        assert len(sentry.events) == 2


def test_a_reporter_that_raises_is_logged_and_changes_nothing(clean: None, pg_url: str, redis_url: str,
                                                              sentry: Capture,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    reporter = Reporter(fails=True)
    with bus(pg_url, redis_url, reporter) as engine:
        run = FailsUntil.start(fail_until=1)
        work(engine)
        assert run.refresh().status == "paused"
        assert run.latest_step["error_class"] == "TimeoutError"  # type: ignore[index]
        assert len(reporter.calls) == 1
        assert "PGBUS_ERROR_REPORTER raised while reporting TimeoutError at step" in caplog.text
        # Sentry still hears of the step (and of the reporter's own failure, through the log line)
        assert [exception_of(e)[0] for e in sentry.events if tags(e)] == ["TimeoutError"]


def test_report_without_an_engine_uses_the_default_one_and_never_raises(
        clean: None, pg_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """The lead's callers (signal receivers, webhook deliveries) may pass no engine; without Sentry
    imported at all, the reporter alone hears of it."""
    monkeypatch.delitem(sys.modules, "sentry_sdk")
    reporter = Reporter()
    failure = ValueError("receiver failed")
    with bus(pg_url, redis_url, reporter):
        reporting.report(failure, "signal_receiver", run_id="r-1", workflow_class="Orders", step="charge")
    assert reporter.calls == [(failure, {"where": "signal_receiver", "run_id": "r-1", "workflow_class": "Orders",
                                         "step": "charge", "attempt": None})]
    reporting.report(failure, "webhook_delivery")  # no engine at all: nothing to tell, nothing raised
    assert len(reporter.calls) == 1
    broken = Reporter(fails=True)
    with bus(pg_url, redis_url, broken), caplog.at_level(logging.ERROR, "pgbus_flask"):
        reporting.report(failure, "webhook_delivery")
    assert "PGBUS_ERROR_REPORTER raised while reporting ValueError at webhook_delivery" in caplog.text


def test_sentry_not_initialised_gets_nothing_and_the_reporter_still_does(clean: None, pg_url: str,
                                                                         redis_url: str) -> None:
    assert not reporting.sentry_active()  # imported by this module, never initialised here
    reporter = Reporter()
    with bus(pg_url, redis_url, reporter) as engine:
        FailsUntil.start(fail_until=1)
        work(engine)
    assert [c["where"] for _, c in reporter.calls] == ["step"]
