"""The demo shop: a small Flask app with the dashboard at ``/pgbus``, subject pages and the ERP switch."""

from __future__ import annotations

import os
import re
from collections import deque
from datetime import datetime
from typing import Any
from urllib.parse import quote

from flask import Flask, redirect, request, url_for
from markupsafe import Markup, escape

from .. import PgBus
from .services import DEMO_SETTINGS, SUBJECT_PATHS, Services, notify_settings
from .workflows import erp_online, set_erp_online


def subject_url(subject_type: str, subject_id: str) -> str | None:
    """The demo's page of a subject: a same-site path such as ``/orders/1042``."""
    kind = SUBJECT_PATHS.get(subject_type)
    return f"/{kind}/{quote(str(subject_id), safe='')}" if kind else None


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}}
@media (prefers-color-scheme:dark){{body{{background:#111;color:#eee}}a{{color:#8ab4f8}}}}</style></head>
<body><p><a href="/pgbus/">← pgbus dashboard</a></p><h1>{title}</h1>{body}</body></html>"""


def said(text: str) -> Markup:
    """A Slack message's text as HTML: its lines, and its ``<url|label>`` links."""
    parts, last = [], 0
    for found in re.finditer(r"<(https?://[^|>]+)\|([^>]*)>", text):
        parts.append(escape(text[last:found.start()]))
        parts.append(Markup('<a href="{}">{}</a>').format(found.group(1), found.group(2)))
        last = found.end()
    parts.append(escape(text[last:]))
    return Markup("").join(parts).replace("\n", Markup("<br>"))


def page(title: str, body: Markup | str) -> str:
    return PAGE.format(title=escape(title), body=body if isinstance(body, Markup) else escape(body))


def create_app(services: Services, hosts: tuple[str, ...] = ()) -> Flask:
    """The demo shop: the dashboard at ``/pgbus``, subject pages, and the ERP switch at ``/erp``.

    ``hosts``: names the dashboard answers at besides loopback ones (``PGBUS_DASHBOARD_HOSTS``).
    """
    app = Flask("pgbus_demo")
    app.config.update(
        SECRET_KEY=os.urandom(24).hex(),
        PGBUS_DATABASE_URL=services.database_url,
        PGBUS_REDIS_URL=services.redis_url,
        PGBUS_DASHBOARD_PUBLIC=True,
        PGBUS_DASHBOARD_HOSTS=hosts,
        PGBUS_SUBJECT_URL=subject_url,
        **DEMO_SETTINGS,
        **notify_settings(services),
    )
    bus = PgBus(app)
    chat: deque[tuple[str, str]] = deque(maxlen=100)  # (when, text): what the workers told the pretend chat
    seen: set[str] = set()  # the webhook-ids received

    @app.get("/")
    def index() -> Any:
        return redirect("/pgbus/")

    @app.get("/erp")
    def erp() -> str:
        online = erp_online(bus.engine.redis)
        state = "online" if online else "down"
        body = Markup(
            "<p>The pretend ERP is <strong>{state}</strong>. While it is down, <code>InvoiceSync</code> runs fail "
            "at <code>sync_to_erp</code> with <code>TimeoutError</code> and pause. Bring it back, then resume "
            "them from the dashboard's attention page.</p>"
            '<form method="post"><input type="hidden" name="online" value="{value}">'
            '<button type="submit">{label}</button></form>'
        ).format(state=state, value="0" if online else "1",
                 label="Take the ERP down" if online else "Bring the ERP back online")
        return page("ERP status", body)

    @app.post("/erp")
    def erp_switch() -> Any:
        set_erp_online(bus.engine.redis, request.form.get("online") == "1")
        return redirect(url_for("erp"), code=303)

    @app.post("/chat/hook")
    def chat_hook() -> Any:
        """The pretend chat's incoming webhook: a Slack-shaped message (``{"text": ...}``)."""
        message = request.get_json(silent=True)
        if not isinstance(message, dict) or not isinstance(message.get("text"), str):
            return {"error": "expected a JSON object with a text"}, 400
        # pgbus sends a message again with the same webhook-id when an answer came too late: once is enough
        webhook_id = request.headers.get("webhook-id", "")
        if webhook_id and webhook_id in seen:
            return "", 204
        seen.add(webhook_id)
        chat.appendleft((datetime.now().strftime("%H:%M:%S"), message["text"]))
        return "", 204

    @app.get("/chat")
    def chat_page() -> str:
        if not chat:
            return page("Pretend chat", Markup(
                "<p>Nothing yet. When runs need a person, the workers tell this page (a webhook target in "
                "Slack's shape: see the dashboard's <a href=\"/pgbus/notifications\">Notifications</a>).</p>"))
        items = Markup("").join(Markup("<li><small>{}</small><br>{}</li>").format(when, said(text))
                                for when, text in chat)
        return page("Pretend chat", Markup("<ul>{}</ul>").format(items))

    @app.get("/<kind>/<path:subject_id>")
    def subject_page(kind: str, subject_id: str) -> Any:
        types = {path: name for name, path in SUBJECT_PATHS.items()}
        if kind not in types:
            return page("Not found", "No such page in the demo shop."), 404
        body = Markup("<p>This is the demo shop's page of {kind} <code>{id}</code>: in a real app, the record "
                      "a workflow run works on.</p>").format(kind=types[kind], id=subject_id)
        return page(f"{types[kind]} {subject_id}", body)

    return app
