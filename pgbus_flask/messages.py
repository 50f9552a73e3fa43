"""Messages the engine itself writes, as a code and parameters beside the English text.

A stalled attempt, a wait that timed out, child jobs that failed or were lost, a
class or step this process does not know: the engine stores the English sentence
(``error_message``, an event's ``reason``; what the CLI, the JSON API and logs show)
and, beside it, ``error_code`` and ``error_params`` (an event's ``details`` keep them
as ``message_code`` and ``message_params``). The dashboard renders the code through
its catalogs in the viewer's language, with the moments in the viewer's timezone
(``pgbus_flask.web.messages``). Errors raised by the app's own step code have no code:
their text is the app's, shown as it is.

Parameters are JSON: names, numbers, and moments as ISO 8601 text (keys ending in
``_at``), so a page can format them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

#: code -> the English sentence (``%(name)s`` placeholders), as stored in ``error_message``.
ENGLISH: dict[str, str] = {
    "step_stalled": "attempt %(attempt)s of %(step)s on %(worker)s passed its stall deadline %(deadline_at)s"
                    " without an outcome (its worker probably died)",
    "wait_timed_out": "no %(signal)s signal by %(deadline_at)s",
    "wait_timed_out_any": "no signal by %(deadline_at)s",
    "wait_timed_out_skipped": "wait timed out",
    "children_failed": "%(failed)s of %(total)s child jobs failed; first: #%(position)s %(error_class)s: %(error)s",
    "children_failed_unknown": "%(failed)s of %(total)s child jobs failed",
    "child_lost": "child job %(job)s ended as %(status)s in RQ without recording a result"
                  " (its worker probably died)",
    "unknown_workflow": "workflow class %(workflow)r is not registered here (is its module in PGBUS_IMPORT?)",
    "unknown_step": "%(workflow)s has no step %(step)r",
    "unknown_step_known": "%(workflow)s has no step %(step)r (steps: %(known)s)",
    "reattempt_requested": "reattempt requested by the step",
    "parent_cancelled": "its parent run %(run)s was cancelled",
    "child_runs_cancelled": "%(cancelled)s of %(total)s child runs were cancelled; first: %(workflow)s %(run)s",
    "wait_until_failed": "the wait_until of %(step)s failed: %(error_class)s: %(error)s",
    "child_function_not_allowed": "%(func)s is not a fan-out function of any registered workflow (workers run"
                                  " only functions defined in the module of a registered workflow class or in a"
                                  " module named by PGBUS_IMPORT); nothing was run",
}


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def params(**values: Any) -> dict[str, Any]:
    """``values`` as storable JSON parameters (moments as ISO text)."""
    return {key: _json(value) for key, value in values.items()}


def english(code: str, values: dict[str, Any]) -> str:
    """The English sentence of ``code`` with ``values`` filled in."""
    return ENGLISH[code] % values


class Coded:
    """Mixed into an exception whose text is an engine message: ``message_code`` and
    ``message_params`` say it again as a code, for the dashboard's catalogs."""

    message_code: str
    message_params: dict[str, Any]

    def _coded(self, code: str, **values: Any) -> str:
        self.message_code = code
        self.message_params = params(**values)
        return english(code, self.message_params)


def code_of(exc: BaseException | None) -> tuple[str | None, dict[str, Any] | None]:
    """``(code, params)`` of an engine message, ``(None, None)`` for any other exception."""
    code = getattr(exc, "message_code", None)
    if isinstance(code, str) and code in ENGLISH:
        return code, dict(getattr(exc, "message_params", None) or {})
    return None, None
