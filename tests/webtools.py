"""Helpers for the dashboard tests: page text, CSRF tokens, direct SQL."""

from __future__ import annotations

import html
import re
from typing import Any

import psycopg
from flask import Flask
from flask.testing import FlaskClient

from pgbus_flask.engine import Engine


def text_of(page: str) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded, whitespace collapsed)."""
    inline = re.sub(r"</?(?:a|code|time|span|b|strong|em)\b[^>]*>", "", page)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", inline))).strip()


def engine_of(app: Flask) -> Engine:
    return app.extensions["pgbus"]  # type: ignore[no-any-return]


def sql(app: Flask, query: str, *params: Any) -> None:
    """Run one statement on the test database (for states only time can bring, such as overdue)."""
    url = engine_of(app).settings.database_url
    assert url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(query.encode(), params)


def csrf(client: FlaskClient, page: str = "/pgbus/") -> str:
    """Open ``page`` (which sets the CSRF cookie) and return the token its forms carry."""
    body = client.get(page).get_data(as_text=True)
    found = re.search(r'name="csrf_token" value="([^"]+)"', body)
    if found:
        return found.group(1)
    cookie = client.get_cookie("pgbus_csrf", path="/pgbus")
    assert cookie is not None, "no CSRF cookie was set"
    return cookie.value


def testids(page: str, name: str) -> int:
    """How many elements carry ``data-testid=name``."""
    return len(re.findall(rf'data-testid="{re.escape(name)}"', page))
