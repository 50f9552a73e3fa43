"""Live refresh: which pages update in place, and what a refresh request must leave alone.

A live page (the overview, the runs list, a run, the attention view, a batch)
marks its regions with ``data-live="<name>"``; ``static/live.js`` asks for the
same URL every ``PGBUS_LIVE_REFRESH`` with the header ``X-Pgbus-Live: 1`` and
swaps in the regions whose HTML changed, except one the operator is busy in
(see docs/dashboard.md, "Live refresh"). The page is the same page a reload
would show, so without JavaScript nothing changes but the updates.

A refresh is a read the operator did not ask for: it must not take the notice
a form post left in the session for the next page, nor reset the language
cookie from a ``?locale=`` in this tab's URL after another tab chose another.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from babel.dates import format_timedelta
from flask import has_request_context, request
from markupsafe import Markup

from ..config import Settings
from . import i18n

HEADER = "X-Pgbus-Live"


def requested() -> bool:
    """Whether this request is a live refresh of a page already open (not a page view)."""
    return has_request_context() and request.headers.get(HEADER) == "1"


def interval_ms(settings: Settings) -> int | None:
    """How often this page refreshes, in milliseconds; None when live refresh is off or the page
    answers a form post (an error shown at the post's URL: that URL has no page to ask for again)."""
    if settings.live_refresh is None or request.method != "GET":
        return None
    return int(settings.live_refresh.total_seconds() * 1000)


def context(settings: Settings, now: datetime) -> dict[str, Any]:
    """What ``base.html`` needs to make a page live (``live_ms`` None: a page that stays as it is)."""
    live_ms = interval_ms(settings)
    if live_ms is None or settings.live_refresh is None:
        return {"live_ms": None}
    return {
        "live_ms": live_ms,
        # When the page's data was read: "Not updated since 14:02" once a refresh fails.
        "live_since": Markup('<time datetime="%s">%s</time>') % (
            now.astimezone(timezone.utc).isoformat(), i18n.clock(now, now)),
        "live_period": format_timedelta(settings.live_refresh, threshold=2, locale=i18n.current_locale()),
    }
