"""The dashboard blueprint (filled in by the dashboard issue)."""

from __future__ import annotations

from flask import Blueprint

from ..engine import Engine


def make_blueprint(engine: Engine) -> Blueprint:
    bp = Blueprint("pgbus", __name__)

    @bp.get("/")
    def overview() -> str:
        return "pgbus"

    return bp
