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
    workflow, step, reason, error_class = group
    data = {"workflow_class": workflow, "step": step, "reason": reason, "error_class": error_class or None,
            "runs": runs, "new_runs": entered if event_type == GROUP_GREW else None,
            "error_message": error_message if event_type != GROUP_RESOLVED else None,
            "url": group_url(settings, group)}
    return {**data, "sentence": say(words_of(settings), event_type, data)}


def run_message(settings: Any, notice: dict[str, Any]) -> dict[str, Any]:
    """The data of a message about one run (finished, cancelled, a step failed), with its sentence."""
    run = str(notice["workflow_id"])
    data = {"run_id": run, "workflow_class": notice["workflow_class"], "step": notice["step"],
            "attempt": notice["attempt"], "error_class": notice["error_class"],
            "error_message": notice["error_message"], "url": run_url(settings, run)}
    return {**data, "sentence": say(words_of(settings), PER_RUN[notice["kind"]], data)}


def test_message(settings: Any, actor: str) -> dict[str, Any]:
    data = {"actor": actor, "url": settings.dashboard_url or None}
    return {**data, "sentence": say(words_of(settings), TEST, data)}


def say(words: Words, event_type: str, data: dict[str, Any]) -> str:
    """The sentence of a message from its data, in ``words``: what the target was sent (in
    PGBUS_DEFAULT_LOCALE), and what the Notifications page says of it (in the viewer's language)."""
    if event_type == TEST:
        return words.pgettext(*_TEST, actor=data.get("actor") or "")
    if event_type in (RUN_FINISHED, RUN_CANCELLED, STEP_FAILED):
        shown = {"workflow": data["workflow_class"], "run": str(data["run_id"])[:8], "step": data["step"] or "",
                 "attempt": words.number(data["attempt"] or 1)}
        text = {RUN_FINISHED: _FINISHED, RUN_CANCELLED: _CANCELLED, STEP_FAILED: _STEP_FAILED}[event_type]
        sentence = words.pgettext(*text, **shown)
        if event_type == STEP_FAILED and data["error_class"]:
            sentence += "\n" + _error_line(words, data)
        return sentence
    shown = {"workflow": data["workflow_class"], "step": data["step"],
             "reason": label(words, STUCK_REASON_LABELS, data["reason"])}
    runs = int(data["runs"])
    if event_type == GROUP_OPENED:
        sentence = words.ngettext(*_OPENED, runs, count=words.number(runs), **shown)
    elif event_type == GROUP_GREW:
        entered = int(data["new_runs"])
        sentence = words.ngettext(*_GREW, entered, count=words.number(entered), total=words.number(runs), **shown)
    else:
        return words.pgettext(*_RESOLVED, **shown)
    return sentence + ("\n" + _error_line(words, data) if data["error_class"] else "")


def _error_line(words: Words, data: dict[str, Any]) -> str:
    error = data["error_class"] + (f": {data['error_message']}" if data.get("error_message") else "")
    return words.pgettext(*_ERROR, error=error)


def body(target_format: str, event_type: str, data: dict[str, Any], at: datetime, settings: Any) -> dict[str, Any]:
    """The JSON a target receives: Standard Webhooks' ``{"type", "timestamp", "data"}``, or Slack's text."""
    if target_format == "slack":
        text = data["sentence"]
        if data.get("url"):
            text += f"\n<{data['url']}|{words_of(settings).pgettext(*_OPEN_LINK)}>"
        return {"text": text}
    return {"type": event_type, "timestamp": at.isoformat(), "data": data}
