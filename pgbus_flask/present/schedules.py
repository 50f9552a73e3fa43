"""Schedules in words: the schedule as a sentence, its state badge, the missed policy, the confirm
questions and the audit trail's sentences, and the overview's items. Each function takes the viewer's
:class:`~pgbus_flask.present.words.Words` (and ``now``); the dashboard binds them to its request
(:mod:`pgbus_flask.web.schedules`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from markupsafe import Markup, escape

from .. import schedules
from ..schedules import Schedule
from .sentences import HTML, PLAIN, TEXT, badge, fill, humanize, label
from .words import C_, N_, Name, Words, bdi, code, markup

if TYPE_CHECKING:
    from ..engine import Engine

ACTION_LABELS = {"pause": C_("action", "Pause schedule"), "resume": C_("action", "Resume schedule")}
STATE_LABELS = {"active": C_("schedule state", "Active"), "paused": C_("schedule state", "Paused"),
                "undeclared": C_("schedule state", "No longer declared")}
STATE_TONES = {"active": "green", "paused": "yellow", "undeclared": "gray"}
MISSED_LABELS = {"skip": C_("missed ticks", "Start the latest only"), "all": C_("missed ticks", "Start every one")}
EVENT_LABELS = {
    "declared": C_("schedule event", "Declared"), "changed": C_("schedule event", "Changed"),
    "undeclared": C_("schedule event", "No longer declared"), "paused": C_("schedule event", "Paused"),
    "resumed": C_("schedule event", "Resumed"),
}
CONFIRMS = {
    "pause": N_("Pause the schedule of %(workflow)s? No run starts for it until it is resumed."),
    ("resume", "skip"): N_("Resume the schedule of %(workflow)s? The ticks missed while it was paused start "
                           "no run; the next tick does."),
    ("resume", "all"): N_("Resume the schedule of %(workflow)s? Every tick missed while it was paused starts a "
                          "run, then every next one."),
}


#: An interval in words. Not a count of things (a plural message for "Every %(num)s hours" came out as
#: "Toutes les 1000000 d'heures", the form CLDR gives French for whole millions of things): "every
#: day" has a sentence of its own, and every other interval is said around CLDR's own unit ("6 hours",
#: "2 godziny"), with one message per unit so that a language can agree "every" with its gender.
INTERVAL_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))
INTERVAL_ONE = {"day": C_("interval", "Every day"), "hour": C_("interval", "Every hour"),
                "minute": C_("interval", "Every minute"), "second": C_("interval", "Every second")}
INTERVAL_MANY = {"day": C_("interval in days", "Every %(period)s"),
                 "hour": C_("interval in hours", "Every %(period)s"),
                 "minute": C_("interval in minutes", "Every %(period)s"),
                 "second": C_("interval in seconds", "Every %(period)s")}


def state_of(s: Schedule) -> str:
    return "undeclared" if not s.declared else "paused" if s.paused else "active"


def state_badge(words: Words, s: Schedule) -> Markup:
    state = state_of(s)
    return badge(label(words, STATE_LABELS, state), STATE_TONES[state], "schedule-state", state)


def timing(words: Words, s: Schedule | Mapping[str, Any]) -> Markup:
    """The schedule in words: "Every 5 minutes", or the cron text with its timezone."""
    kind, text, zone = ((s.kind, s.schedule, s.timezone) if isinstance(s, Schedule)
                        else (s["kind"], s["schedule"], s["timezone"]))
    if kind != "interval":
        return markup(words.ugettext("%(cron)s in %(timezone)s"), cron=code(text), timezone=bdi(zone))
    seconds = int(text)
    for unit, size in INTERVAL_UNITS:
        if seconds % size == 0:
            count = seconds // size
            if count == 1:
                return escape(words.label(INTERVAL_ONE, unit))
            return escape(words.label(INTERVAL_MANY, unit) % {"period": words.period(seconds)})
    raise AssertionError("a unit of one second divides every interval")


def confirm(words: Words, action: str, s: Schedule, to: str = PLAIN) -> str:
    key: Any = action if action == "pause" else (action, s.missed)
    return fill(words.ugettext(CONFIRMS[key]), to, workflow=Name(s.workflow_class))


def sentence(words: Words, event: Mapping[str, Any], to: str = HTML) -> str:
    """"Paused by dashboard:alice: supplier down", "Changed: every 60 seconds, now 0 2 * * * in UTC"."""
    name = event["event"]
    what = label(words, EVENT_LABELS, name) if name in EVENT_LABELS else humanize(name)
    if event["actor"] == schedules.SYSTEM:
        text: str = escape(what) if to == HTML else what
    else:
        text = fill(words.ugettext("%(event)s by %(actor)s"), to, event=escape(what) if to == HTML else what,
                    actor=event["actor"])
    details = event.get("details") or {}
    if name == "changed" and isinstance(details.get("before"), Mapping) and isinstance(details.get("after"), Mapping):
        before, after = timing(words, details["before"]), timing(words, details["after"])
        if to != HTML:
            before, after = Markup(before).striptags(), Markup(after).striptags()  # type: ignore[assignment]
        text = fill(words.ugettext("%(sentence)s: %(before)s, now %(after)s"), to, sentence=text, before=before,
                    after=after)
    elif name == "declared" and {"kind", "schedule", "timezone"} <= set(details):
        declared = timing(words, details) if to == HTML else timing(words, details).striptags()
        text = fill(words.ugettext("%(sentence)s: %(reason)s"), to, sentence=text, reason=declared)
    if event.get("reason"):
        text = fill(words.ugettext("%(sentence)s: %(reason)s"), to, sentence=text, reason=event["reason"])
    return text


def item(words: Words, s: Schedule, now: datetime, run_url: Callable[[Any], str] | None = None) -> dict[str, Any]:
    """One schedule as the overview's panel and its page show it."""
    return {"s": s, "timing": timing(words, s), "badge": state_badge(words, s),
            "missed": label(words, MISSED_LABELS, s.missed),
            "last_tick": last_tick(words, s, now, run_url), "paused": paused_line(words, s, now),
            "next_tick": words.time_tag(s.next_tick, now) if s.declared and not s.paused else Markup("—"),
            "actions": [{"action": a, "label": label(words, ACTION_LABELS, a), "confirm": confirm(words, a, s, TEXT)}
                        for a in s.available_actions]}


def paused_line(words: Words, s: Schedule, now: datetime) -> Markup | None:
    """"Paused by cli:alice 3 minutes ago: supplier API down"."""
    if s.paused_at is None:
        return None
    if s.paused_reason:
        return markup(words.ugettext("Paused by %(actor)s %(ago)s: %(reason)s"), actor=bdi(s.paused_by),
                      ago=words.time_tag(s.paused_at, now), reason=bdi(s.paused_reason))
    return markup(words.ugettext("Paused by %(actor)s %(ago)s"), actor=bdi(s.paused_by),
                  ago=words.time_tag(s.paused_at, now))


def overview_items(words: Words, engine: Engine, now: datetime,
                   run_url: Callable[[Any], str] | None = None) -> list[dict[str, Any]]:
    """Every schedule, as the overview lists them."""
    return [item(words, s, now, run_url) for s in schedules.list_schedules(engine)]


def last_tick(words: Words, s: Schedule, now: datetime, run_url: Callable[[Any], str] | None = None) -> Markup:
    """The last tick as a time, linked to its run while the run exists."""
    if s.last_tick is None:
        return Markup("—")
    when = words.time_tag(s.last_tick, now)
    if s.last_run_id is None or s.last_run_status is None or run_url is None:
        return when
    return Markup('<a href="%s" data-testid="schedule-last-run">%s</a>') % (run_url(s.last_run_id), when)
