"""The dashboard's words, said in the viewer's language: the functions of
:mod:`pgbus_flask.present.sentences` bound to this request's :func:`~pgbus_flask.web.i18n.words`
(and, for the batch link of a sentence, to the blueprint's URLs).

The labels, tones and sentences themselves live in :mod:`pgbus_flask.present.sentences` (the verbs'
words in :mod:`pgbus_flask.verbs`); the pages and templates call them through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from flask import url_for
from markupsafe import Markup

from .. import verbs
from ..present import sentences
from ..present.sentences import (
    ACTION_LABELS,
    BADGE_LABELS,
    BULK_BY_REASON,
    CHILD_STATUS_LABELS,
    CHILD_TONES,
    DASHBOARD_ACTIONS,
    EVENT_LABELS,
    EVENTS_WITH_TIME,
    HTML,
    LIMIT_KIND_LABELS,
    NEXT_MESSAGES,
    PLAIN,
    PRIMARY_ACTIONS,
    RESUME_LABELS,
    RUN_STATUS_LABELS,
    RUN_STATUS_TONES,
    SIGNAL_STATUS_LABELS,
    SIGNAL_TONES,
    STEP_STATUS_LABELS,
    STEP_TONES,
    STUCK_REASON_LABELS,
    STUCK_REASON_TONES,
    TEXT,
    badge,
    dashboard_actions,
    due_moment,
    fill,
    humanize,
    primary_action,
    safe_url,
    subject_label,
    subject_link,
)
from ..present.state import Presentation
from ..queries import AttentionGroup
from ..runner import ResumePlan
from .i18n import words

__all__ = [
    "ACTION_LABELS", "BADGE_LABELS", "BULK_BY_REASON", "CHILD_STATUS_LABELS", "CHILD_TONES",
    "DASHBOARD_ACTIONS", "EVENTS_WITH_TIME", "EVENT_LABELS", "HTML", "LIMIT_KIND_LABELS", "NEXT_MESSAGES", "PLAIN",
    "PRIMARY_ACTIONS",
    "RESUME_LABELS", "RUN_STATUS_LABELS", "RUN_STATUS_TONES", "SIGNAL_STATUS_LABELS", "SIGNAL_TONES",
    "STEP_STATUS_LABELS", "STEP_TONES", "STUCK_REASON_LABELS", "STUCK_REASON_TONES", "TEXT", "action_button",
    "action_confirm", "attention_badge", "audit_sentence", "badge", "batch_url", "bulk_button", "bulk_confirm",
    "bulk_tone", "capacity_text",
    "child_badge", "dashboard_actions", "due_moment", "fill", "group_runs_url", "humanize", "label", "next_sentence",
    "primary_action", "resume_label", "run_badge", "safe_url", "signal_badge", "status_badge", "step_badge",
    "subject_label", "subject_link", "verb_tone",
]


def batch_url(batch_id: Any) -> str:
    """The dashboard's page of a fan-out batch."""
    return url_for("pgbus.batch", batch_id=batch_id)


def group_runs_url(group: AttentionGroup) -> str:
    """The runs list showing one attention group's runs (what the attention page and insights link a group to)."""
    return url_for("pgbus.runs", workflow_class=group.workflow_class, reason=group.reason, step=group.step_name,
                   error_class=group.error_class)


def label(labels: Mapping[str, tuple[str, str]], key: str | None) -> str:
    """The translated label of ``key`` in its role (the key itself when it has none)."""
    return sentences.label(words(), labels, key)


def run_badge(presentation: Presentation) -> Markup:
    return sentences.run_badge(words(), presentation)


def attention_badge(reason: str) -> Markup:
    return sentences.attention_badge(words(), reason)


def status_badge(status: str) -> Markup:
    return sentences.status_badge(words(), status)


def step_badge(status: str) -> Markup:
    return sentences.step_badge(words(), status)


def signal_badge(status: str) -> Markup:
    return sentences.signal_badge(words(), status)


def child_badge(status: str) -> Markup:
    return sentences.child_badge(words(), status)


def next_sentence(presentation: Presentation, now: datetime) -> Markup:
    """The "what happens next" sentence, with names as ``<code>``, moments as ``<time>`` and a batch linked."""
    return sentences.next_sentence(words(), presentation, now, batch_url)


def capacity_text(kind: str, capacity: int, per_seconds: float | None) -> str:
    """A limit's or a rate's capacity in words: "2 at once", "10 a second"."""
    return sentences.capacity_text(words(), kind, capacity, per_seconds)


def action_button(action: str, plan: ResumePlan | None, open_step: str | None) -> str:
    return sentences.action_button(words(), action, plan, open_step)


def resume_label(plan: ResumePlan | None) -> str:
    return sentences.resume_label(words(), plan)


def audit_sentence(event: Mapping[str, Any], to: str = PLAIN, now: datetime | None = None) -> str:
    return sentences.audit_sentence(words(), event, to, now)


def bulk_button(action: str, n: int, capped: bool = False) -> str:
    return sentences.bulk_button(words(), action, n, capped)


def verb_tone(action: str, primary: bool) -> str:
    return sentences.verb_tone(action, primary)


def bulk_tone(action: str) -> str:
    return sentences.verb_tone(action, verbs.BY_NAME[action].primary)


def bulk_confirm(action: str, group: AttentionGroup, to: str = PLAIN) -> str:
    return sentences.bulk_confirm(words(), action, group, to)


def action_confirm(action: str, workflow_class: str, step: str | None, to: str = PLAIN,
                   open_step: bool = True, children: int = 0) -> str:
    return sentences.action_confirm(words(), action, workflow_class, step, to, open_step, children)
