"""The Notifications page: the webhook targets (never their secrets), the last deliveries with their
status, and "send a test" (POST, CSRF, the actor recorded on the delivery); and the same, read only,
in the JSON API (``GET <prefix>/api/notifications``). See docs/notifications.md.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, g, redirect, request, url_for
from werkzeug.exceptions import BadRequest
from werkzeug.wrappers import Response

from .. import notify
from ..engine import Engine
from ..present import shapes
from . import api, notices
from .helpers import label
from .i18n import C_, clock_tag, ugettext, words
from .views import Pages, render

#: A delivery's status as the page says it.
STATUS_LABELS = {
    "pending": C_("delivery status", "Retrying"),
    "sending": C_("delivery status", "Sending"),
    "delivered": C_("delivery status", "Delivered"),
    "failed": C_("delivery status", "Failed"),
}


class NotificationPages:
    def __init__(self, engine: Engine, pages: Pages) -> None:
        self.engine = engine
        self.pages = pages

    def page(self) -> str:
        """The webhook targets and the newest deliveries."""
        self.pages.sync_clock()
        data = shapes.notifications(self.engine, words())
        for delivery in data["deliveries"]:
            delivery["status_label"] = label(STATUS_LABELS, delivery["status"])
            delivery["next_tag"] = (clock_tag(delivery["next_attempt_at"], g.pgbus_now)
                                    if delivery["status"] == "pending" and delivery["attempts"] else None)
            delivery["made_tag"] = clock_tag(delivery["created_at"], g.pgbus_now)
        return render("pgbus/notifications.html", live=True, targets=data["targets"],
                      deliveries=data["deliveries"], interval=data["interval"],
                      notice=notices.take("notify_test"))

    def send_test(self) -> Response:
        """Send a test message to one target (the form's ``target``)."""
        name = request.form.get("target", "")
        try:
            notify.send_test(self.engine, name, g.pgbus_actor)
        except notify.UnknownTarget:
            raise BadRequest(ugettext("No webhook target has that name.")) from None
        notices.keep("notify_test", target=name)
        return redirect(url_for(".notifications"), 303)

    def api_list(self) -> Response:
        """The webhook targets (no secrets) and the newest deliveries."""
        data: dict[str, Any] = shapes.notifications(self.engine, words())
        return api.reply(data)


def register(bp: Blueprint, engine: Engine, pages: Pages) -> NotificationPages:
    """Add the Notifications page, its test button and its JSON to ``bp`` (before the API's catch-all)."""
    views = NotificationPages(engine, pages)
    bp.add_url_rule("/notifications", "notifications", views.page)
    bp.add_url_rule("/notifications/test", "notify_test", views.send_test, methods=["POST"])
    bp.add_url_rule(f"{api.PREFIX}/notifications", "api_notifications", views.api_list)
    return views
