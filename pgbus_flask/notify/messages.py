"""What a webhook message says: its Standard Webhooks body, or a Slack incoming webhook's text.

Sentences are said in ``PGBUS_DEFAULT_LOCALE`` and ``PGBUS_TIMEZONE`` (the catalogs of the dashboard,
with ``PGBUS_TRANSLATIONS`` before them); a link to the dashboard needs ``PGBUS_DASHBOARD_URL``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from ..present.sentences import STUCK_REASON_LABELS, label
from ..present.words import Words, words_for, zone
from ..verbs import C_, NP_

#: The webhook event types (the body's ``type``).
GROUP_OPENED = "attention_group.opened"
GROUP_GREW = "attention_group.grew"
GROUP_RESOLVED = "attention_group.resolved"
RUN_FINISHED = "run.finished"
RUN_CANCELLED = "run.cancelled"
STEP_FAILED = "step.failed"
TEST = "test"
EVENT_TYPES = (GROUP_OPENED, GROUP_GREW, GROUP_RESOLVED, RUN_FINISHED, RUN_CANCELLED, STEP_FAILED, TEST)
#: The outbox kind of a one-message-each notice, and its event type.
PER_RUN = {"run_finished": RUN_FINISHED, "run_cancelled": RUN_CANCELLED, "step_failed": STEP_FAILED}

_OPENED = NP_("%(count)s %(workflow)s run needs attention at %(step)s: %(reason)s",
            "%(count)s %(workflow)s runs need attention at %(step)s: %(reason)s")
_GREW = NP_("%(count)s more %(workflow)s run needs attention at %(step)s: %(reason)s, %(total)s in all",
          "%(count)s more %(workflow)s runs need attention at %(step)s: %(reason)s, %(total)s in all")
_RESOLVED = C_("notification", "Resolved: no %(workflow)s run needs attention at %(step)s (%(reason)s) any more")
_ERROR = C_("notification", "Error: %(error)s")
_FINISHED = C_("notification", "%(workflow)s run %(run)s finished")
_CANCELLED = C_("notification", "%(workflow)s run %(run)s was cancelled")
_STEP_FAILED = C_("notification", "Step %(step)s of %(workflow)s run %(run)s failed (attempt %(attempt)s)")
_TEST = C_("notification", "Test message from pgbus, sent by %(actor)s")
_OPEN_LINK = C_("notification", "Open in the dashboard")


def words_of(settings: Any) -> Words:
    return words_for(settings.default_locale, zone(settings.timezone), tuple(settings.translations))


def group_url(settings: Any, group: tuple[str, str, str, str]) -> str | None:
    """The runs list of one attention group in the dashboard (what its page links the group to)."""
    base = settings.dashboard_url
    if not base:
        return None
    query = {"workflow_class": group[0], "reason": group[2], "step": group[1]}
    if group[3]:
        query["error_class"] = group[3]
    return f"{base.rstrip('/')}/runs?{urlencode(query)}"


def run_url(settings: Any, run_id: Any) -> str | None:
    base = settings.dashboard_url
    return f"{base.rstrip('/')}/runs/{run_id}" if base else None


def group_message(settings: Any, event_type: str, group: tuple[str, str, str, str], *, runs: int, entered: int,
                  error_message: str | None) -> dict[str, Any]:
    """The data of a message about an attention group, with its sentence."""
    words = words_of(settings)
    workflow, step, reason, error_class = group
    shown = {"workflow": workflow, "step": step, "reason": label(words, STUCK_REASON_LABELS, reason)}
    if event_type == GROUP_OPENED:
        sentence = words.ngettext(*_OPENED, runs, count=words.number(runs), **shown)
    elif event_type == GROUP_GREW:
        sentence = words.ngettext(*_GREW, entered, count=words.number(entered), total=words.number(runs), **shown)
    else:
        sentence = words.pgettext(*_RESOLVED, **shown)
    if error_class and event_type != GROUP_RESOLVED:
        sentence += "\n" + words.pgettext(*_ERROR, error=error_class + (f": {error_message}" if error_message else ""))
    return {"workflow_class": workflow, "step": step, "reason": reason, "error_class": error_class or None,
            "runs": runs, "new_runs": entered if event_type == GROUP_GREW else None,
            "error_message": error_message if event_type != GROUP_RESOLVED else None,
            "sentence": sentence, "url": group_url(settings, group)}


def run_message(settings: Any, notice: dict[str, Any]) -> dict[str, Any]:
    """The data of a message about one run (finished, cancelled, a step failed), with its sentence."""
    words = words_of(settings)
    run = str(notice["workflow_id"])
    shown = {"workflow": notice["workflow_class"], "run": run[:8], "step": notice["step"] or "",
             "attempt": words.number(notice["attempt"] or 1)}
    text = {"run_finished": _FINISHED, "run_cancelled": _CANCELLED, "step_failed": _STEP_FAILED}[notice["kind"]]
    sentence = words.pgettext(*text, **shown)
    if notice["kind"] == "step_failed" and notice["error_class"]:
        error = notice["error_class"] + (f": {notice['error_message']}" if notice["error_message"] else "")
        sentence += "\n" + words.pgettext(*_ERROR, error=error)
    return {"run_id": run, "workflow_class": notice["workflow_class"], "step": notice["step"],
            "attempt": notice["attempt"], "error_class": notice["error_class"],
            "error_message": notice["error_message"], "sentence": sentence, "url": run_url(settings, run)}


def test_message(settings: Any, actor: str) -> dict[str, Any]:
    words = words_of(settings)
    return {"sentence": words.pgettext(*_TEST, actor=actor), "url": settings.dashboard_url or None}


def body(target_format: str, event_type: str, data: dict[str, Any], at: datetime, settings: Any) -> dict[str, Any]:
    """The JSON a target receives: Standard Webhooks' ``{"type", "timestamp", "data"}``, or Slack's text."""
    if target_format == "slack":
        text = data["sentence"]
        if data.get("url"):
            text += f"\n<{data['url']}|{words_of(settings).pgettext(*_OPEN_LINK)}>"
        return {"text": text}
    return {"type": event_type, "timestamp": at.isoformat(), "data": data}
