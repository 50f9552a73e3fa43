"""Helpers for the dashboard tests: page text, CSRF tokens, direct SQL."""

from __future__ import annotations

import html
import re
from typing import Any

import psycopg
from flask import Flask
from flask.testing import FlaskClient

from pgbus_flask import attention
from pgbus_flask.engine import Engine

# A clock time as the pages write it in English: "2:09 PM" today, "Dec 5, 2026, 12:16 AM" on another day (a
# moment a few minutes away crosses midnight when the suite runs near it).
CLOCK = r"(?:[A-Z][a-z]{2} \d{1,2}, \d{4}, )?\d{1,2}:\d{2}(?:\s?[AP]M)?"


def text_of(page: str) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded, whitespace collapsed)."""
    inline = re.sub(r"</?(?:a|bdi|code|time|span|b|strong|em)\b[^>]*>", "", page)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", inline))).strip()


def engine_of(app: Flask) -> Engine:
    return app.extensions["pgbus"]  # type: ignore[no-any-return]


def sql(app: Flask, query: str, *params: Any) -> None:
    """Run one statement on the test database (for states only time can bring, such as overdue), then
    bring the runs' attention columns up to date with it, as if the runner had written it."""
    url = engine_of(app).settings.database_url
    assert url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(query.encode(), params)
        attention.refresh_all(conn)


def csrf(client: FlaskClient, page: str = "/pgbus/") -> str:
    """Open ``page`` (which sets the CSRF cookie) and return the token its forms carry.

    The token is signed, not the cookie's value: pages without a form carry it in
    ``<meta name="csrf-token">``.
    """
    body = client.get(page).get_data(as_text=True)
    found = (re.search(r'name="csrf_token" value="([^"]+)"', body)
             or re.search(r'<meta name="csrf-token" content="([^"]+)"', body))
    assert found is not None, f"{page} carries no CSRF token"
    assert client.get_cookie("pgbus_csrf", path="/pgbus") is not None, "no CSRF cookie was set"
    return html.unescape(found.group(1))


def count_testid(page: str, name: str) -> int:
    """How many elements carry ``data-testid=name``."""
    return len(re.findall(rf'data-testid="{re.escape(name)}"', page))


def work_some(engine: Engine, jobs: int) -> None:
    """Run at most ``jobs`` queued jobs (to leave a batch half done)."""
    from tests.support import CountingWorker

    worker = CountingWorker([engine.queue(n) for n in engine.queue_names()], connection=engine.redis)
    worker.work(burst=True, max_jobs=jobs, logging_level="WARNING")


def seed_every_state(app: Flask) -> dict[str, str]:
    """One run in every state the presenter knows; returns ``{state: workflow_id}``."""
    from tests.support import work
    from tests.workflows import FailsUntil, FansOut, PausesItself, ThreeSteps, WaitsForever, WaitsForPayment

    engine = engine_of(app)
    ids: dict[str, str] = {}
    with app.app_context():
        ids["paused_error"] = str(FailsUntil.start(fail_until=9, subject=("Order", 1)).workflow_id)
        ids["stalled"] = str(FailsUntil.start(fail_until=9, subject=("Order", 2)).workflow_id)
        ids["paused_manual"] = str(PausesItself.start().workflow_id)
        ids["waiting_signal_deadline"] = str(WaitsForPayment.start(subject=("Order", 3)).workflow_id)
        ids["waiting_signal"] = str(WaitsForever.start().workflow_id)
        ids["finished"] = str(ThreeSteps.start(order_id=4, subject=("Order", 4)).workflow_id)
        cancelled = ThreeSteps.start(order_id=5, subject=("Order", 5))
        cancelled.cancel(actor="cli:bob", reason="customer left")
        ids["cancelled"] = str(cancelled.workflow_id)
        work(engine)
        sql(app, "UPDATE pgbus_workflow_steps SET error_class = %s WHERE workflow_id = %s",
            "pgbus_flask.errors.StepStalled", ids["stalled"])
        ids["waiting_batch"] = str(FansOut.start(n=3).workflow_id)
        work_some(engine, 1)  # the step opens the batch
        work_some(engine, 2)  # two of its three children
        for state, order in (("queued", 6), ("overdue", 7), ("scheduled", 8), ("running", 9),
                             ("possibly_stalled", 10)):
            ids[state] = str(ThreeSteps.start(order_id=order, subject=("Order", order)).workflow_id)
    sql(app, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '10 minutes' WHERE workflow_id = %s",
        ids["overdue"])
    sql(app, "UPDATE pgbus_workflow_steps SET scheduled_at = now() + interval '1 hour' WHERE workflow_id = %s",
        ids["scheduled"])
    for state, stall in (("running", "now() + interval '10 minutes'"), ("possibly_stalled",
                                                                        "now() - interval '1 minute'")):
        sql(app, "UPDATE pgbus_workflows SET status = 'running' WHERE workflow_id = %s", ids[state])
        sql(app, "UPDATE pgbus_workflow_steps SET status = 'in_progress', started_at = now() - interval '2 minutes',"
            f" worker = 'host:1', stall_at = {stall} WHERE workflow_id = %s", ids[state])
    return ids


def form_fields(form_html: str) -> dict[str, str]:
    """The name/value pairs of the ``<input>`` elements in a form (as a browser would submit them)."""
    fields = {}
    for tag in re.findall(r"<input\b[^>]*>", form_html):
        name = re.search(r'\bname="([^"]*)"', tag)
        value = re.search(r'\bvalue="([^"]*)"', tag)
        if name:
            fields[html.unescape(name.group(1))] = html.unescape(value.group(1)) if value else ""
    return fields
