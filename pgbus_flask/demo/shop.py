"""The demo shop: a small Flask app with the dashboard at ``/pgbus``, subject pages and the ERP switch."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from flask import Flask, redirect, request, url_for
from markupsafe import Markup, escape

from .. import PgBus
from .services import DEMO_SETTINGS, SUBJECT_PATHS, Services
from .workflows import erp_online, set_erp_online


def subject_url(subject_type: str, subject_id: str) -> str | None:
    """The demo's page of a subject: a same-site path such as ``/orders/1042``."""
    kind = SUBJECT_PATHS.get(subject_type)
    return f"/{kind}/{quote(str(subject_id), safe='')}" if kind else None


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}}
@media (prefers-color-scheme:dark){{body{{background:#111;color:#eee}}a{{color:#8ab4f8}}}}</style></head>
<body><p><a href="/pgbus/">← pgbus dashboard</a></p><h1>{title}</h1>{body}</body></html>"""


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
    )
    bus = PgBus(app)

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

    @app.get("/<kind>/<path:subject_id>")
    def subject_page(kind: str, subject_id: str) -> Any:
        types = {path: name for name, path in SUBJECT_PATHS.items()}
        if kind not in types:
            return page("Not found", "No such page in the demo shop."), 404
        body = Markup("<p>This is the demo shop's page of {kind} <code>{id}</code>: in a real app, the record "
                      "a workflow run works on.</p>").format(kind=types[kind], id=subject_id)
        return page(f"{types[kind]} {subject_id}", body)

    return app
