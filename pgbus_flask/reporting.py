"""Error reporting: the failures pgbus handles by itself, told to ``PGBUS_ERROR_REPORTER`` and Sentry.

pgbus survives some failures on its own and only logs them: a step job that could not be
enqueued after commit (the sweep sends it again), a part of the sweep that raised (the next
sweep tries again), a signal receiver that raised, a webhook delivery given up. Logged only,
they are easy to miss; :func:`report` also hands each one to

* the callable ``PGBUS_ERROR_REPORTER`` names (``reporter(exception, context)``), and
* Sentry, when ``sentry_sdk`` is initialised in this process (the app called ``sentry_sdk.init``),
  as an event tagged with the run, its class, step and attempt.

A step's own exception (its code, its ``wait_until`` or a transactional step's ORM flush
raised) goes to both too, with ``where="step"``: the run records it and its error policy
applies as ever; the report is there so that the app's error tracker sees the app's bug with
the run it happened in. A reporter that wants only pgbus's own failures skips that ``where``.

The context a reporter gets, and what Sentry's event carries under the ``pgbus`` context:
``where`` (a short stable name: ``enqueue``, ``sweep``, ``step``, ``signal_receiver``,
``webhook_delivery``), ``run_id`` (text), ``workflow_class``, ``step``, ``attempt``, each None
when the failure concerns no one run. Sentry's tags are the same with a ``pgbus.`` prefix, set
only when known.

Nothing here raises: a reporter that raises, or a Sentry that fails, is logged. Nothing here
imports ``sentry_sdk``: a process that never imported it cannot have initialised it.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger("pgbus_flask")


def report(exc: BaseException, where: str, *, engine: Engine | None = None, run_id: object = None,
           workflow_class: str | None = None, step: str | None = None, attempt: int | None = None) -> None:
    """Tell ``PGBUS_ERROR_REPORTER`` and Sentry (when initialised) of ``exc``, which pgbus handled
    ``where`` (see the module's docstring). ``engine`` None: the current Flask app's, else the
    process default, if any (without one, only Sentry hears of it). Never raises."""
    try:
        context: dict[str, Any] = {
            "where": where, "run_id": None if run_id is None else str(run_id),
            "workflow_class": workflow_class, "step": step, "attempt": attempt,
        }
        reporter = _reporter_of(engine)
        if reporter is not None:
            try:
                reporter(exc, dict(context))
            except Exception:
                log.exception("pgbus: PGBUS_ERROR_REPORTER raised while reporting %s at %s",
                              type(exc).__name__, where)
        # Sentry last: the caller logs ``exc`` after this, and Sentry's dedupe integration then
        # drops the logging integration's copy of the event it just sent with the tags.
        _to_sentry(exc, context)
    except Exception:
        log.exception("pgbus: could not report %s at %s", type(exc).__name__, where)


def _reporter_of(engine: Engine | None) -> Any:
    """PGBUS_ERROR_REPORTER of ``engine``, else of the current app's engine, else the process default's."""
    if engine is None:
        engine = _current_engine()
    return engine.settings.error_reporter if engine is not None else None


def _current_engine() -> Engine | None:
    try:
        from flask import current_app

        found = current_app.extensions.get("pgbus")
    except RuntimeError:  # outside an application context
        found = None
    if found is not None:
        return found  # type: ignore[no-any-return]
    from . import engine as engine_module  # at call time: the engine reports through this module

    return engine_module._default


def sentry_active() -> bool:
    """Whether ``sentry_sdk`` is imported and initialised (a client that sends) in this process."""
    sentry: Any = sys.modules.get("sentry_sdk")
    return sentry is not None and bool(sentry.get_client().is_active())


def _to_sentry(exc: BaseException, context: dict[str, Any]) -> None:
    if not sentry_active():
        return
    sentry: Any = sys.modules["sentry_sdk"]
    tags = {f"pgbus.{key}": str(value) for key, value in context.items() if value is not None}
    sentry.capture_exception(exc, tags=tags, contexts={"pgbus": dict(context)})
