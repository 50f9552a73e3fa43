"""The insights page of a workflow class and its JSON (:mod:`pgbus_flask.insights`), and the
throughput chart: server-rendered SVG, no script, coloured by the stylesheet's variables so it
reads in light and dark mode. The page also shows what of the class needs a person now (its stuck
reasons and attention groups, linked as the attention page links them) and refreshes in place
like the other live pages (:mod:`.live`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from babel.numbers import format_percent
from babel.units import format_unit
from flask import Blueprint, request
from markupsafe import Markup
from werkzeug.exceptions import BadRequest

from .. import insights as engine_insights
from .. import queries, states
from ..errors import InvalidInput
from ..present import shapes
from . import inputs
from .i18n import N_, _babel_locale, clock, gettext, isolated, markup, number, ugettext

if TYPE_CHECKING:
    from ..engine import Engine
    from .views import Pages

WINDOW_LABELS = {"1h": N_("Last hour"), "24h": N_("Last 24 hours"), "7d": N_("Last 7 days"),
                 "30d": N_("Last 30 days")}
SERIES = (("started", N_("Runs started")), ("finished", N_("Runs finished")), ("failed", N_("Failed attempts")))


def ms_text(ms: float | None) -> str:
    """A duration in ms as the viewer's language writes it with a unit: "12 ms", "3.4 s", "2.5 min"."""
    if ms is None:
        return "—"
    locale = _babel_locale()
    if ms < 1000:
        return format_unit(round(ms, 1), "duration-millisecond", length="short", locale=locale)
    if ms < 60_000:
        return format_unit(round(ms / 1000, 1), "duration-second", length="short", locale=locale)
    if ms < 3_600_000:
        return format_unit(round(ms / 60_000, 1), "duration-minute", length="short", locale=locale)
    return format_unit(round(ms / 3_600_000, 1), "duration-hour", length="short", locale=locale)


def rate_text(rate: float | None) -> str:
    """A share (0..1) as the viewer's language writes a percentage, to a tenth of a percent: "12.3%",
    "12,3 %"; a share above 0 that would round to 0 keeps two significant digits ("0.01%")."""
    if rate is None:
        return "—"
    shown = round(rate, 3)
    if shown == 0 and rate > 0:
        shown = float(f"{rate:.2g}")
    return format_percent(shown, locale=_babel_locale(), decimal_quantization=False)


@dataclass
class ClassAttention:
    """What of one class needs a person now: its attention groups (the biggest first) and, per stuck
    reason (in :data:`pgbus_flask.states.STUCK_REASONS`' order), its runs and whether that count
    stopped at the cap."""

    groups: list[queries.AttentionGroup] = field(default_factory=list)
    reasons: list[tuple[str, int, bool]] = field(default_factory=list)


def class_attention(engine: Engine, workflow_class: str) -> ClassAttention:
    """The attention groups of ``workflow_class`` and its counts by stuck reason: the groups' sums when
    every group was read (one statement), else the stuck counts read apart."""
    groups = queries.attention_groups(engine, workflow_class)
    if len(groups) < queries.GROUP_LIMIT:
        runs: dict[str, int] = {}
        capped: set[str] = set()
        for group in groups:
            runs[group.reason] = runs.get(group.reason, 0) + group.count
            if group.capped:
                capped.add(group.reason)
    else:
        counts = queries.stuck_reason_counts(engine, workflow_class)
        runs = {reason: n for (_, reason), n in counts.items()}
        capped = {reason for (_, reason) in counts.capped}
    reasons = [(reason, runs[reason], reason in capped) for reason in states.STUCK_REASONS if runs.get(reason)]
    return ClassAttention(groups, reasons)


def chart(result: engine_insights.Insights, now: datetime) -> Markup:
    """Grouped bars per bucket (started, finished, failed attempts), an axis with the first and
    last bucket's time, a <title> on each bar; sized by the viewBox, so it scales to any width.

    Time runs left to right in every language, as on the run's timeline (docs/decisions.md, "Charts
    in a right-to-left page"): the drawing sits in a ``dir="ltr"`` box, so that its text anchors
    (the counts end at the axis, the last time ends at the right edge) mean left and right in Arabic
    and Hebrew too; the legend after it follows the page."""
    buckets = result.buckets
    if not buckets:
        return Markup("")
    width, height, top, bottom, left = 720, 180, 8, 24, 40
    plot = height - top - bottom
    peak = max([1] + [max(b.started, b.finished, b.failed) for b in buckets])
    slot = (width - left) / len(buckets)
    bar = max(slot / 4, 1)
    labels = {key: gettext(text) for key, text in SERIES}
    parts = [Markup('<div dir="ltr"><svg class="insights-chart" viewBox="0 0 %s %s" role="img"'
                    ' aria-labelledby="chart-title" data-testid="throughput-chart" preserveAspectRatio="none">')
             % (width, height),
             Markup('<title id="chart-title">%s</title>') % isolated(gettext(
                 "Runs started, runs finished and failed attempts per bucket"))]
    for tick in (0, peak):
        y = top + plot - plot * tick / peak
        parts.append(Markup('<line class="grid" x1="%s" x2="%s" y1="%.1f" y2="%.1f"/>') % (left, width, y, y))
        parts.append(Markup('<text class="axis" x="%s" y="%.1f" text-anchor="end">%s</text>')
                     % (left - 4, y + 4, number(tick)))
    for i, b in enumerate(buckets):
        x0 = left + i * slot + slot / 8
        when = clock(b.start, now)
        for j, (key, _) in enumerate(SERIES):
            value = getattr(b, key)
            if not value:
                continue
            h = plot * value / peak
            parts.append(Markup('<rect class="series-%s" x="%.1f" y="%.1f" width="%.1f" height="%.1f">'
                                '<title>%s: %s, %s</title></rect>')
                         % (key, x0 + j * bar, top + plot - h, bar, h, when, labels[key], number(value)))
    parts.append(Markup('<text class="axis" x="%s" y="%s">%s</text>')
                 % (left, height - 6, clock(buckets[0].start, now)))
    parts.append(Markup('<text class="axis" x="%s" y="%s" text-anchor="end">%s</text>')
                 % (width, height - 6, clock(buckets[-1].start, now)))
    parts.append(Markup("</svg></div>"))
    return Markup("").join(parts)


def legend() -> Markup:
    items = [Markup('<li><span class="swatch series-%s" aria-hidden="true"></span>%s</li>') % (key, gettext(text))
             for key, text in SERIES]
    return Markup('<ul class="legend">%s</ul>') % Markup("").join(items)


def read_window() -> str:
    try:
        return engine_insights.window_of(inputs.text(request.args, "window"))
    except InvalidInput:
        raise BadRequest(markup(ugettext("Unknown window %(value)s: choose one of %(choices)s."),
                                value=inputs.shown(request.args.get("window", "")),
                                choices=", ".join(engine_insights.WINDOWS))) from None


class InsightsPages:
    def __init__(self, engine: Engine, pages: Pages) -> None:
        self.engine = engine
        self.pages = pages

    def read(self, workflow_class: str, window: str) -> engine_insights.Insights:
        klass = self.pages.klass(workflow_class)
        names = [s.name for s in klass.steps] if klass is not None else None
        return engine_insights.insights(self.engine, workflow_class, window, names)

    def page(self, workflow_class: str) -> str:
        from .views import render

        window = read_window()
        self.pages.sync_clock()
        result = self.read(workflow_class, window)
        reached_max = max([s.reached for s in result.steps] + [1])
        return render("pgbus/insights.html", live=True, result=result, window=window,
                      windows=engine_insights.WINDOWS, window_labels=WINDOW_LABELS, chart=chart(result, result.until),
                      legend=legend(), reached_max=reached_max, ms=ms_text, rate=rate_text,
                      step_statuses=states.ONGOING, attention=class_attention(self.engine, workflow_class),
                      window_span=_span_words(engine_insights.WINDOWS[window][1]))

    def api(self, workflow_class: str) -> Any:
        from .api import reply

        window = read_window()
        return reply(shapes.insights(self.read(workflow_class, window)))


def _span_words(width: timedelta) -> str:
    from babel.dates import format_timedelta

    return format_timedelta(width, locale=_babel_locale())


def register(bp: Blueprint, engine: Engine, pages: Pages) -> None:
    views = InsightsPages(engine, pages)
    bp.add_url_rule("/classes/<workflow_class>/insights", "insights", views.page)
    bp.add_url_rule("/api/classes/<workflow_class>/insights", "api_insights", views.api)
