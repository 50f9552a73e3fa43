"""OpenTelemetry spans: ``start()`` and every step attempt, when the app traces.

With ``opentelemetry-api`` installed (the ``otel`` extra) and a tracer provider set (the app
configured the SDK, or runs under ``opentelemetry-instrument``):

* ``start()`` opens a **producer** span, ``pgbus start <class>``, a child of the span current
  where it is called (the request that starts the run), and keeps its W3C ``traceparent`` on
  the run (``pgbus_workflows.traceparent``);
* each step attempt runs in a **consumer** span, ``pgbus step <class>.<step>``, linked to that
  producer span (a step may run hours later, in another process: a link, not a parent), whose
  status is an error, with the exception recorded, when the step's code raised.

Both carry ``pgbus.workflow_id``, ``pgbus.workflow_class`` and ``pgbus.step`` (the producer's:
the first step), and the consumer ``pgbus.attempt``, with ``messaging.system`` ``pgbus`` and
``messaging.operation.type`` ``send`` / ``process``.

Without the package, or with no provider set (OpenTelemetry's proxy), :func:`tracer` is None and
nothing else here runs: the package is imported once, at the first call, and a step then pays
one call and an ``isinstance``.
"""

from __future__ import annotations

from typing import Any

#: ``opentelemetry.trace`` once imported; False when it is not installed; None until the first call.
_trace: Any = None
#: (the provider, its tracer) last used.
_cached: tuple[Any, Any] | None = None
_off: tuple[type, ...] = ()

SCOPE = "pgbus_flask"


def _load() -> Any:
    global _trace, _off
    try:
        from opentelemetry import trace
    except ImportError:
        _trace = False
        return False
    _off = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
    _trace = trace
    return trace


def tracer() -> Any:
    """The tracer pgbus's spans start from; None when OpenTelemetry is not installed or no
    tracer provider is set (nothing is traced then)."""
    global _cached
    trace = _trace if _trace is not None else _load()
    if trace is False:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, _off):
        return None
    cached = _cached
    if cached is None or cached[0] is not provider:
        cached = _cached = (provider, provider.get_tracer(SCOPE))
    return cached[1]


def start_span(tracer: Any, workflow_class: str, first_step: str) -> Any:
    """The producer span of a ``start()``, as a context manager that makes it current (and records
    an exception that leaves it); the run's id is set on it once known (:func:`started`)."""
    return tracer.start_as_current_span(
        f"pgbus start {workflow_class}", kind=_trace.SpanKind.PRODUCER,
        attributes={"messaging.system": "pgbus", "messaging.operation.type": "send",
                    "pgbus.workflow_class": workflow_class, "pgbus.step": first_step})


def traceparent(span: Any) -> str | None:
    """``span``'s W3C traceparent (``00-<trace id>-<span id>-<flags>``); None for a span that is
    not valid."""
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def started(span: Any, workflow_id: Any) -> None:
    span.set_attribute("pgbus.workflow_id", str(workflow_id))


def step_span(tracer: Any, run: dict[str, Any], step: dict[str, Any]) -> Any:
    """The consumer span of one step attempt, as a context manager that makes it current, linked to
    the producer span whose traceparent the run keeps (none when the run was started untraced)."""
    links = []
    parent = _span_context(run.get("traceparent"))
    if parent is not None:
        links.append(_trace.Link(parent))
    return tracer.start_as_current_span(
        f"pgbus step {run['workflow_class']}.{step['step_name']}", kind=_trace.SpanKind.CONSUMER, links=links,
        attributes={"messaging.system": "pgbus", "messaging.operation.type": "process",
                    "pgbus.workflow_id": str(run["workflow_id"]), "pgbus.workflow_class": run["workflow_class"],
                    "pgbus.step": step["step_name"], "pgbus.attempt": step["attempt"]})


def _span_context(traceparent: str | None) -> Any:
    """The span context a stored traceparent names; None without one, or for one that is not valid."""
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = TraceContextTextMapPropagator().extract({"traceparent": traceparent})
    span_context = _trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def step_raised(exc: BaseException) -> None:
    """Mark the current span (a step's consumer span) failed with ``exc``, the step's own exception
    that pgbus caught; nothing when nothing is traced."""
    if not _trace:
        return
    span = _trace.get_current_span()
    if span.is_recording():
        span.record_exception(exc)
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:1000]))
