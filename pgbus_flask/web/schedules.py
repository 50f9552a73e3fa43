"""Schedules in the dashboard's words: the functions of :mod:`pgbus_flask.present.schedules` bound to this
request's words (and to the blueprint's URLs, for the link to a schedule's last run). The pages and the
JSON API that use them are :mod:`pgbus_flask.web.schedule_pages`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from flask import url_for
from markupsafe import Markup

from ..engine import Engine
from ..present import schedules as said
from ..present.schedules import (
    ACTION_LABELS,
    CONFIRMS,
    EVENT_LABELS,
    MISSED_LABELS,
    STATE_LABELS,
    STATE_TONES,
    state_of,
)
from ..present.sentences import HTML, PLAIN
from ..schedules import Schedule
from .i18n import words

__all__ = ["ACTION_LABELS", "CONFIRMS", "EVENT_LABELS", "MISSED_LABELS", "STATE_LABELS", "STATE_TONES", "confirm",
           "item", "last_tick", "overview_items", "paused_line", "run_url", "sentence", "state_badge", "state_of",
           "timing"]


def run_url(workflow_id: Any) -> str:
    """The dashboard's page of a run."""
    return url_for("pgbus.run", workflow_id=workflow_id)


def state_badge(s: Schedule) -> Markup:
    return said.state_badge(words(), s)


def timing(s: Schedule | Mapping[str, Any]) -> Markup:
    """The schedule in words: "Every 5 minutes", or the cron text with its timezone."""
    return said.timing(words(), s)


def confirm(action: str, s: Schedule, to: str = PLAIN) -> str:
    return said.confirm(words(), action, s, to)


def sentence(event: Mapping[str, Any], to: str = HTML) -> str:
    """"Paused by dashboard:alice: supplier down", "Changed: every 60 seconds, now 0 2 * * * in UTC"."""
    return said.sentence(words(), event, to)


def item(s: Schedule, now: datetime) -> dict[str, Any]:
    """One schedule as the overview's panel and its page show it."""
    return said.item(words(), s, now, run_url)


def paused_line(s: Schedule, now: datetime) -> Markup | None:
    return said.paused_line(words(), s, now)


def overview_items(engine: Engine, now: datetime) -> list[dict[str, Any]]:
    """Every schedule, as the overview lists them."""
    return said.overview_items(words(), engine, now, run_url)


def last_tick(s: Schedule, now: datetime) -> Markup:
    """The last tick as a time, linked to its run while the run exists."""
    return said.last_tick(words(), s, now, run_url)
