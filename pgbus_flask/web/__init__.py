"""The dashboard blueprint: pages for operators, localized in the ``pgbus`` Babel domain.

``PgBus(app)`` registers :func:`make_blueprint` at ``PGBUS_DASHBOARD_PREFIX``.
Templates live under ``pgbus/`` in the ``pgbus_flask.templates`` package, so
a host app overrides any page by putting a file at the same path in its own
templates folder.

The request hooks and the template context are in :mod:`.hooks`, the error
pages in :mod:`.errors`; both find the engine in ``current_app.extensions["pgbus"]``.
"""

from __future__ import annotations

from importlib.resources import files

from flask import Blueprint
from flask.blueprints import BlueprintSetupState

from ..engine import Engine
from . import api, embed, errors, hooks, insights, notification_pages, schedule_pages, security, views
from . import metrics as scrape
from .hooks import FRAME_HEADERS

__all__ = ["FRAME_HEADERS", "make_blueprint"]


def make_blueprint(engine: Engine) -> Blueprint:
    """The dashboard of ``engine`` as a blueprint named ``pgbus``.

    An app that mounts it without ``PgBus(app)`` gets ``engine`` as its
    ``app.extensions["pgbus"]``, where the hooks and error pages look for it."""
    templates = files("pgbus_flask.templates")
    bp = Blueprint("pgbus", __name__, template_folder=str(templates),
                   static_folder=str(templates / "pgbus" / "static"), static_url_path="/static")
    security.exempt_from_host_csrf(bp)  # its forms carry the dashboard's own token

    def adopt_engine(state: BlueprintSetupState) -> None:
        state.app.extensions.setdefault("pgbus", engine)

    bp.record_once(adopt_engine)
    bp.record_once(hooks.connect_frame_guard)
    bp.before_request(hooks.before_request)
    bp.after_request(hooks.after_request)
    bp.context_processor(hooks.template_context)
    errors.register(bp)

    pages = views.register(bp, engine)
    insights.register(bp, engine, pages)  # before the API's catch-all rule
    schedule_pages.register(bp, engine, pages)
    notification_pages.register(bp, engine, pages)
    embed.register(bp, engine)
    api.register(bp, engine, pages)
    scrape.register(bp, engine)
    return bp
