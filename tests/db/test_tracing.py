"""Tracing (pgbus_flask/tracing.py): start() makes a producer span whose traceparent the run keeps, and
each step attempt a consumer span linked to it, through the OpenTelemetry SDK's in-memory exporter.

The SDK's provider is set as the process's global one for a test and taken away after it (the SDK
allows one global provider a process: the fixture puts OpenTelemetry's globals back as it found them).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

from pgbus_flask import tracing
from pgbus_flask.engine import Engine
from pgbus_flask.errors import SubjectConflict
from tests.support import work
from tests.workflows import FailsUntil, Reattempts, ThreeSteps


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """An SDK tracer provider, global for this test, keeping the spans it ends."""
    found = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(found))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    trace.set_tracer_provider(provider)
    yield found
    provider.shutdown()


def spans(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.kind == kind]


def stored_traceparent(pg_url: str, workflow_id: Any) -> str | None:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT traceparent FROM pgbus_workflows WHERE workflow_id = %s", (workflow_id,)).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def traceparent_of(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


@pytest.mark.parametrize("inline", [
    pytest.param("on", id="inline-on"),
    pytest.param("off", id="inline-off", marks=pytest.mark.settings(PGBUS_INLINE_STEPS=0)),
])
def test_a_run_continues_the_trace_of_the_request_that_started_it(engine: Engine, pg_url: str,
                                                                  exporter: InMemorySpanExporter,
                                                                  inline: str) -> None:
    with trace.get_tracer("the app").start_as_current_span("POST /orders") as request:
        run = ThreeSteps.start(7, order_id=21)
    work(engine)
    assert run.refresh().status == "finished"

    [producer] = spans(exporter, SpanKind.PRODUCER)
    assert producer.name == "pgbus start ThreeSteps"
    assert producer.parent is not None and producer.parent.span_id == request.get_span_context().span_id
    assert producer.context.trace_id == request.get_span_context().trace_id
    assert dict(producer.attributes or {}) == {
        "messaging.system": "pgbus", "messaging.operation.type": "send", "pgbus.workflow_class": "ThreeSteps",
        "pgbus.step": "reserve", "pgbus.workflow_id": str(run.workflow_id)}
    assert stored_traceparent(pg_url, run.workflow_id) == traceparent_of(producer)

    consumers = spans(exporter, SpanKind.CONSUMER)
    assert [span.name for span in consumers] == [
        "pgbus step ThreeSteps.reserve", "pgbus step ThreeSteps.charge", "pgbus step ThreeSteps.ship"]
    for span, name in zip(consumers, ("reserve", "charge", "ship"), strict=True):
        assert dict(span.attributes or {}) == {
            "messaging.system": "pgbus", "messaging.operation.type": "process",
            "pgbus.workflow_id": str(run.workflow_id), "pgbus.workflow_class": "ThreeSteps", "pgbus.step": name,
            "pgbus.attempt": 1}
        [link] = span.links
        assert (link.context.trace_id, link.context.span_id) == (producer.context.trace_id,
                                                                 producer.context.span_id)
        assert span.parent is None  # a trace of its own, linked to the start: nothing was current in the worker
        assert span.status.status_code == StatusCode.UNSET


def test_a_step_that_raises_has_a_failed_span_per_attempt(engine: Engine, exporter: InMemorySpanExporter) -> None:
    paused = FailsUntil.start(fail_until=1)
    retried = Reattempts.start()
    work(engine)
    assert paused.refresh().status == "paused" and retried.refresh().status == "paused"
    found = sorted((span.name, (span.attributes or {})["pgbus.attempt"], span.status.status_code,
                    [event.attributes["exception.type"] for event in span.events if event.attributes])
                   for span in spans(exporter, SpanKind.CONSUMER))
    assert found == [
        ("pgbus step FailsUntil.capture", 1, StatusCode.ERROR, ["TimeoutError"]),
        *[("pgbus step Reattempts.flaky", n, StatusCode.ERROR, ["ConnectionError"]) for n in (1, 2, 3)],
    ]


def test_a_start_that_fails_records_it_on_its_span(engine: Engine, exporter: InMemorySpanExporter) -> None:
    ThreeSteps.start(order_id=1, subject=("Order", 1))
    with pytest.raises(SubjectConflict):
        ThreeSteps.start(order_id=1, subject=("Order", 1))
    failed = [span for span in spans(exporter, SpanKind.PRODUCER) if span.status.status_code == StatusCode.ERROR]
    assert len(failed) == 1 and "pgbus.workflow_id" not in (failed[0].attributes or {})


def test_a_run_started_untraced_has_steps_with_no_link(engine: Engine, pg_url: str,
                                                       request: pytest.FixtureRequest) -> None:
    run = ThreeSteps.start(order_id=3)  # no provider yet: OpenTelemetry's proxy, nothing traced
    assert tracing.tracer() is None
    assert stored_traceparent(pg_url, run.workflow_id) is None
    exporter = request.getfixturevalue("exporter")  # the app starts tracing before the steps run
    work(engine)
    assert run.refresh().status == "finished"
    consumers = spans(exporter, SpanKind.CONSUMER)
    assert len(consumers) == 3 and all(not span.links for span in consumers)
    assert spans(exporter, SpanKind.PRODUCER) == []


def test_without_opentelemetry_nothing_changes(engine: Engine, pg_url: str, exporter: InMemorySpanExporter,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """As if opentelemetry-api were not installed (its import fails), even with a provider set."""
    for name in [name for name in sys.modules if name == "opentelemetry" or name.startswith("opentelemetry.")]:
        monkeypatch.setitem(sys.modules, name, None)  # type: ignore[arg-type]
    monkeypatch.setattr(tracing, "_trace", None)
    monkeypatch.setattr(tracing, "_cached", None)
    run = FailsUntil.start(fail_until=1)
    ok = ThreeSteps.start(order_id=4)
    work(engine)
    assert tracing.tracer() is None and tracing._trace is False
    assert ok.refresh().status == "finished" and run.refresh().status == "paused"
    assert stored_traceparent(pg_url, ok.workflow_id) is None
    assert exporter.get_finished_spans() == ()
