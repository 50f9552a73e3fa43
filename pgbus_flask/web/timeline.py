"""The timeline chart: each attempt of a run as a bar on a time axis, drawn as inline SVG.

A bar is split into segments (waited, queued, waiting, ran ok, ran failed,
running, cancelled); the intervals the run spent paused get a row of their
own. A run with more than :data:`MAX_BARS` attempts (a step that polls every
minute for days) gets one bar per step instead, drawn from an aggregate
(:func:`render_buckets`): each stretch of time is coloured by how most of the
attempts that began in it ended. Every bar and segment has a ``<title>``; the
legend is translated. Readable without JavaScript; colours come from CSS
classes (light and dark).

Time runs left to right in every language, Arabic and Hebrew too (docs/decisions.md, "Charts in a
right-to-left page"): the drawing sits in its own left-to-right box (``dir="ltr"``, which is also the
box that scrolls on a phone, so that it opens at the labels and the start of time), while the legend
after it follows the page's direction. A label longer than its column is shortened with an ellipsis
and clipped to the column (the whole name is in the row's ``<title>``), so it never runs into a bar.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from markupsafe import Markup

from .. import states
from ..handle import PAGE_SIZE, AttemptBucket
from ..present.words import Name
from .helpers import STEP_STATUS_LABELS
from .i18n import C_, current_tz, duration, gettext, identifier, isolated, listed, ngettext, number, pgettext

SERIES = ("waited", "queued", "waiting", "paused", "ran_ok", "ran_failed", "running", "cancelled")
#: What a stretch of an attempt's bar shows, in the words of a step attempt's status (the legend sits
#: beside the steps table: "Cancelled" is one word in both, agreed with the same noun); the paused
#: stretches are the run's, on a row of their own, in a run's words.
SERIES_LABELS = {
    "waited": C_("step status", "Waited"), "queued": C_("step status", "Queued"),
    "waiting": C_("step status", "Waiting"), "paused": C_("run status", "Paused"),  # the run's pauses (own row)
    "ran_ok": C_("step status", "Ran OK"), "ran_failed": C_("step status", "Ran, failed"),
    "running": C_("step status", "Running"), "cancelled": C_("step status", "Cancelled"),
}

#: The series an attempt's last stretch is drawn in, by its step status.
FINAL_SERIES = {"completed": "ran_ok", "failed": "ran_failed", "in_progress": "running", "cancelled": "cancelled",
                "skipped": "cancelled"}

#: The series a step status is drawn in, in the order that wins a tie in a stretch of the aggregate.
STATUS_SERIES = {"in_progress": "running", "failed": "ran_failed", "waiting": "waiting", "scheduled": "queued",
                 "completed": "ran_ok", "cancelled": "cancelled", "skipped": "cancelled"}

#: Up to this many attempts (a page of them), one bar each; beyond, one bar per step drawn from an aggregate.
MAX_BARS = PAGE_SIZE
#: The stretches of time an aggregate bar is cut into.
BUCKETS = 60

WIDTH = 760
LABEL_W = 170
ROW_H = 22
BAR_H = 14
AXIS_H = 24
#: The characters a step label holds in its column (11 px monospace, about 6.6 units a character).
LABEL_CHARS = 24


@dataclass(frozen=True)
class Segment:
    series: str
    start: datetime
    end: datetime


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def attempt_segments(step: Mapping[str, Any], now: datetime) -> list[Segment]:
    """The segments of one attempt, in time order.

    A step that parked (``waiting_since``) and was then woken by its signal
    was scheduled and claimed again on the same row: ``scheduled_at`` is
    then the wake-up and ``started_at`` the second claim.
    """
    created = _aware(step.get("created_at") or step["scheduled_at"])
    scheduled = _aware(step["scheduled_at"])
    started = _aware(step["started_at"]) if step.get("started_at") else None
    waiting_since = _aware(step["waiting_since"]) if step.get("waiting_since") else None
    end = _aware(step["finished_at"]) if step.get("finished_at") else now
    status = step["status"]
    final = FINAL_SERIES.get(status)
    out: list[Segment] = []

    def add(series: str, start: datetime, stop: datetime) -> None:
        out.append(Segment(series, start, max(start, stop)))

    if waiting_since is not None and started is not None and started > waiting_since:
        add("ran_ok", created, waiting_since)  # the first pass, up to parking
        woken = min(max(scheduled, waiting_since), started)
        add("waiting", waiting_since, woken)
        add("queued", woken, started)
        add(final or "ran_ok", started, end)
        return out
    if scheduled > created:
        add("waited", created, min(scheduled, end))
    queue_from = max(created, scheduled)
    queue_to = started or end
    if queue_to > queue_from:
        add("queued", queue_from, queue_to)
    if started is None:
        if status in ("cancelled", "skipped") and step.get("finished_at"):
            add("cancelled", end, end)
        return out
    if waiting_since is not None:
        add("ran_ok", started, waiting_since)
        add("waiting", max(started, waiting_since), end)
        if status != "waiting" and step.get("finished_at") and final:
            add(final, end, end)
    else:
        add(final or "ran_ok", started, end)
    return out


def paused_intervals(events: Sequence[Mapping[str, Any]], now: datetime) -> list[Segment]:
    """When the run was paused: from each ``paused`` event to the next resume, cancel or rerun."""
    out: list[Segment] = []
    since: datetime | None = None
    for event in events:
        kind = event["event"]
        if kind == "paused" and since is None:
            since = _aware(event["created_at"])
        elif kind in states.PAUSE_EVENTS[1:] and since is not None:
            out.append(Segment("paused", since, _aware(event["created_at"])))
            since = None
    if since is not None:
        out.append(Segment("paused", since, now))
    return out


def _clock(moment: datetime, tenths: bool = False) -> str:
    local = moment.astimezone(current_tz())
    return local.strftime("%H:%M:%S") + (f".{local.microsecond // 100_000}" if tenths else "")


#: One drawn bar: its whole name (its tooltip), its label (shortened to fit its column), and its segments
#: as (series, start, end, tooltip).
Bar = tuple[str, str, list[tuple[str, datetime, datetime, str]]]


def _tip(name: str, seg: Segment) -> str:
    seconds = (seg.end - seg.start).total_seconds()
    return gettext("%(step)s: %(what)s, %(duration)s (%(start)s–%(end)s)", step=name,
                   what=pgettext(*SERIES_LABELS[seg.series]), duration=duration(seconds), start=_clock(seg.start),
                   end=_clock(seg.end))


def _bars(rows: Sequence[tuple[str, str, Sequence[Segment]]]) -> list[Bar]:
    """Bars of rows given as (name, what follows the name in its label, segments)."""
    return [(_label(name, suffix), _label(name, suffix, LABEL_CHARS),
             [(seg.series, seg.start, seg.end, _tip(_label(name, suffix), seg)) for seg in segments])
            for name, suffix, segments in rows]


def render(steps: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]], now: datetime) -> Markup:
    """The chart as an ``<svg>`` element followed by its legend (an empty string for no attempts):
    one bar per attempt of ``steps``, and the paused stretches the ``events`` show."""
    if not steps:
        return Markup("")
    now = _aware(now)
    rows: list[tuple[str, str, Sequence[Segment]]] = [
        (Name(s["step_name"]), f" #{s['attempt']}", attempt_segments(s, now)) for s in steps
    ]
    paused = paused_intervals(events, now)
    if paused:
        rows.append((pgettext(*SERIES_LABELS["paused"]), "", paused))
    return _chart(_bars(rows))


def _label(name: str, suffix: str = "", fit: int | None = None) -> str:
    """``name`` (isolated: a step's :class:`~pgbus_flask.present.words.Name` left to right, so a name
    mixing Arabic or Hebrew with Latin keeps its order; our own words in their own direction) and
    ``suffix``; with ``fit``, the name shortened with an ellipsis so that the two hold ``fit`` characters."""
    text = name
    if fit is not None and len(name) + len(suffix) > fit:
        text = name[:max(fit - len(suffix) - 1, 1)] + "…"
    return f"{identifier(text) if isinstance(name, Name) else isolated(text)}{suffix}"


def bucket_series(statuses: Mapping[str, int]) -> str:
    """The series of a stretch: the step status most of its attempts have (ties: the first in
    :data:`STATUS_SERIES`, so a running or failed attempt is not hidden by an equal number of others)."""
    order = list(STATUS_SERIES)
    status = max(statuses, key=lambda s: (statuses[s], -order.index(s) if s in order else -len(order)))
    return STATUS_SERIES.get(status, "ran_ok")


def render_buckets(buckets: Sequence[AttemptBucket], events: Sequence[Mapping[str, Any]], start: datetime,
                   end: datetime, stretches: int = BUCKETS) -> Markup:
    """The chart of a run with many attempts: one bar per step, cut into ``stretches`` equal stretches
    of time from ``start`` to ``end`` (:meth:`pgbus_flask.handle.Run.attempt_buckets`), each
    coloured by :func:`bucket_series`, with the paused stretches the ``events`` show."""
    if not buckets:
        return Markup("")
    start, end = _aware(start), _aware(end)
    width = (end - start) / stretches
    rows: dict[str, list[tuple[str, datetime, datetime, str]]] = {}
    shown: dict[str, str] = {}
    labels = {status: pgettext(*label) for status, label in STEP_STATUS_LABELS.items()}
    for b in buckets:
        name = _label(Name(b.step_name))
        shown[name] = _label(Name(b.step_name), fit=LABEL_CHARS)
        n = sum(b.statuses.values())
        counts = listed([gettext("%(status)s: %(num)s", status=labels.get(status, status), num=number(count))
                         for status, count in sorted(b.statuses.items(), key=lambda item: -item[1])])
        attempts = ngettext("%(num)s attempt", "%(num)s attempts", n)
        tip = gettext("%(step)s: %(attempts)s (%(counts)s), %(start)s–%(end)s", step=name, attempts=attempts,
                      counts=counts, start=_clock(_aware(b.first)), end=_clock(_aware(b.last)))
        lo = start + width * b.index
        rows.setdefault(name, []).append((bucket_series(b.statuses), lo, lo + width, tip))
    bars: list[Bar] = [(name, shown[name], segments) for name, segments in rows.items()]
    paused = paused_intervals(events, end)
    if paused:
        bars += _bars([(pgettext(*SERIES_LABELS["paused"]), "", paused)])
    total = sum(sum(b.statuses.values()) for b in buckets)
    caption = ngettext("%(num)s attempt in all: each stretch of a bar shows how most of the attempts that began "
                       "in it ended.",
                       "%(num)s attempts in all: each stretch of a bar shows how most of the attempts that began "
                       "in it ended.", total)
    return _chart(bars, (start, end)) + Markup('<p class="muted small" data-testid="timeline-aggregate">%s</p>'
                                               ) % caption


def _chart(bars: Sequence[Bar], span_of: tuple[datetime, datetime] | None = None) -> Markup:
    """Bars on a shared time axis (from the earliest to the latest moment drawn, or ``span_of``)."""
    if span_of is not None:
        t0, t1 = span_of
    else:
        moments = [m for _, _, segs in bars for seg in segs for m in (seg[1], seg[2])]
        t0, t1 = min(moments), max(moments)
    span = max((t1 - t0).total_seconds(), 1.0)
    plot_w = WIDTH - LABEL_W - 10

    def x(moment: datetime) -> float:
        return LABEL_W + (moment - t0).total_seconds() / span * plot_w

    height = AXIS_H + ROW_H * len(bars) + 6
    title = gettext("Timeline of the run's attempts")
    parts = [Markup('<div class="timeline-scroll" dir="ltr">'
                    '<svg class="pgbus-timeline" data-testid="timeline" role="img" viewBox="0 0 %d %d" '
                    'width="100%%" xmlns="http://www.w3.org/2000/svg"><title>%s</title>'
                    '<clipPath id="pgbus-tl-labels"><rect width="%d" height="%d"/></clipPath>')
             % (WIDTH, height, title, LABEL_W - 6, height)]
    for i in range(5):
        moment = t0 + timedelta(seconds=span * i / 4)
        tx = x(moment)
        anchor = "start" if i == 0 else ("end" if i == 4 else "middle")
        parts.append(Markup('<line class="tl-grid" x1="%.1f" x2="%.1f" y1="%d" y2="%d"/>'
                            '<text class="tl-tick" x="%.1f" y="14" text-anchor="%s">%s</text>')
                     % (tx, tx, AXIS_H - 4, height, tx, anchor, _clock(moment, tenths=span < 10)))
    for index, (name, label, segments) in enumerate(bars):
        y = AXIS_H + index * ROW_H
        parts.append(Markup('<g class="tl-row" data-testid="timeline-bar"><title>%s</title><text class="tl-label" '
                            'x="4" y="%d" clip-path="url(#pgbus-tl-labels)">%s</text>') % (name, y + BAR_H - 2, label))
        for series, start, end, tip in segments:
            width = max(x(end) - x(start), 2.0)
            parts.append(Markup('<rect class="tl-%s" x="%.1f" y="%d" width="%.1f" height="%d" rx="2">'
                                '<title>%s</title></rect>') % (series, x(start), y, width, BAR_H, tip))
        parts.append(Markup("</g>"))
    parts.append(Markup("</svg></div>"))
    legend = [Markup('<ul class="pgbus-legend" data-testid="timeline-legend">')]
    for series in SERIES:
        legend.append(Markup('<li><svg width="12" height="12" aria-hidden="true"><rect class="tl-%s" width="12" '
                             'height="12" rx="2"/></svg> %s</li>') % (series, pgettext(*SERIES_LABELS[series])))
    legend.append(Markup("</ul>"))
    return Markup("").join([*parts, *legend])
