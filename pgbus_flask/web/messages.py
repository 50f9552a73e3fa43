"""The engine's own messages (:mod:`pgbus_flask.messages`) in the viewer's language.

A stored ``error_code`` and ``error_params`` (an event's ``message_code`` and
``message_params``) are rendered through the catalogs: names as ``<code>``,
moments as times in the viewer's timezone. Without a code (an error the app's
code raised), or with a code this version does not know, the stored text is
shown as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .i18n import N_, bdi, clock_tag, code, isolated, markup, ugettext

SYSTEM_MESSAGES: dict[str, str] = {
    "step_stalled": N_("Attempt %(attempt)s of %(step)s on %(worker)s passed its stall deadline (%(deadline_at)s) "
                       "without an outcome: its worker probably died."),
    "wait_timed_out": N_("No %(signal)s signal arrived by %(deadline_at)s."),
    "wait_timed_out_any": N_("No signal arrived by %(deadline_at)s."),
    "wait_timed_out_skipped": N_("The wait timed out."),
    "children_failed": N_("%(failed)s of %(total)s child jobs failed; the first was #%(position)s: %(error_class)s: "
                          "%(error)s"),
    "children_failed_unknown": N_("%(failed)s of %(total)s child jobs failed."),
    "child_lost": N_("Child job %(job)s ended as %(status)s in RQ without recording a result: its worker "
                     "probably died."),
    "unknown_workflow": N_("The workflow class %(workflow)s is not registered here (is its module in "
                           "PGBUS_IMPORT?)."),
    "unknown_step": N_("%(workflow)s has no step %(step)s."),
    "unknown_step_known": N_("%(workflow)s has no step %(step)s (its steps: %(known)s)."),
    "reattempt_requested": N_("The step asked to be attempted again."),
    "child_runs_cancelled": N_("%(cancelled)s of %(total)s child runs were cancelled; the first was %(workflow)s "
                               "%(run)s."),
    "wait_until_failed": N_("The wait_until of %(step)s failed: %(error_class)s: %(error)s"),
    "child_function_not_allowed": N_("%(func)s is not a fan-out function of any registered workflow: workers run "
                                     "only functions defined in the module of a workflow class or in a module "
                                     "named by PGBUS_IMPORT. Nothing was run."),
}

#: Parameters shown as code identifiers.
_NAMES = frozenset({"step", "signal", "workflow", "error_class", "job", "worker", "known", "run", "func"})


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _fallback(english: str | None, html: bool) -> str:
    """The stored English as it is: escaped later by the template (HTML), isolated in plain text."""
    return (english or "") if html else isolated(english or "")


def system_message(code_: str | None, params: Mapping[str, Any] | None, english: str | None,
                   now: datetime, *, html: bool = True) -> str:
    """The message of ``code_`` in the viewer's language (Markup when ``html``), else ``english``
    (escaped by the template, isolated in plain text)."""
    template = SYSTEM_MESSAGES.get(code_ or "")
    values = dict(params or {})
    if template is None or not isinstance(params, Mapping):
        return _fallback(english, html)
    args: dict[str, Any] = {}
    for key, value in values.items():
        moment = _moment(value) if key.endswith("_at") else None
        if moment is not None:
            args[key] = clock_tag(moment, now) if html else clock_tag(moment, now).striptags()
        elif key in _NAMES:
            args[key] = code(value if value is not None else "—") if html else isolated(value)
        else:
            args[key] = bdi(value if value is not None else "—") if html else isolated(value)
    try:
        if html:
            return markup(ugettext(template), **args)
        return ugettext(template) % args
    except (KeyError, TypeError, ValueError):  # parameters this version's sentence does not take
        return _fallback(english, html)
