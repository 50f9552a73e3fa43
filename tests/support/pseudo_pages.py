"""The pages of the pseudo-locale tests (tests/web/test_pseudo_locale.py, tests/browser/test_browser_pseudo.py):
an app whose ``en`` has the pseudo catalog before it, the rows every page shows, and the pages' addresses."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from flask import Flask, render_template_string
from flask.testing import FlaskClient

from pgbus_flask import PgBus
from pgbus_flask.handle import PAGE_SIZE
from pgbus_flask.sweep import sweep
from tests.child_workflows import Fulfilment
from tests.support import settings_for, work
from tests.support.schedule_helpers import Declare
from tests.support.seeds import in_line, seed_insights, stall_and_time_out
from tests.support.webhooks import with_a_delivery
from tests.support.webtools import engine_of, seed_every_state, sql
from tests.workflows import FailsUntil, ThreeSteps

#: A host app's layout with pgbus's stats card and nav link (docs/dashboard.md, "In your own layout").
LAYOUT = """{% from "pgbus/embed.html" import pgbus_nav_link, pgbus_stats_card %}
<!doctype html><html><head><link rel="icon" href="data:,"></head>
<body><nav>{{ pgbus_nav_link() }}</nav><main>{{ pgbus_stats_card() }}</main></body></html>"""
#: The operator the dashboard's auth names.
ACTOR = "ops.lead"
#: What the tests type into addresses and forms besides what the database then holds: a class that does
#: not exist, a step, a text search, the insights windows (the values the error message lists).
TYPED = ("Nope", "reserve", "Order", "Order 1", "1h", "24h", "7d", "30d", "1y", "explode", "bogus", "nowhere")


def app_with(folder: str, pg_url: str, redis_url: str) -> Flask:
    """The test app with ``folder`` as its ``PGBUS_TRANSLATIONS`` (the pseudo catalog before the shipped
    ``en``), an operator signed in, two pending signals at most a run, and a host page (``/host``) with the
    stats card and nav link."""
    app = Flask("pgbus_pseudo_app")
    app.config.update(TESTING=True, SECRET_KEY="test",
                      **settings_for(pg_url, redis_url, PGBUS_TRANSLATIONS=folder, PGBUS_MAX_PENDING_SIGNALS=2,
                                     PGBUS_DASHBOARD_AUTH=lambda request: ACTOR))
    PgBus(app)

    @app.get("/host")
    def host() -> str:
        return render_template_string(LAYOUT)

    return app


def children(app: Flask) -> dict[str, str]:
    """A parent waiting on two child runs, one of them paused on its error."""
    with app.app_context():
        parent = Fulfilment.start(parcels=[1, 2], failing=[2], subject=("Order", 77))
        work(engine_of(app))
        kids = parent.refresh().children()
    failed = next(str(k["workflow_id"]) for k in kids if k["status"] == "paused")
    return {"parent": str(parent.workflow_id), "child_paused": failed}


def odd_runs(app: Flask) -> dict[str, str]:
    """A run on an older definition, one whose class this process cannot import, and one with more
    attempts than the timeline draws one bar each for (it draws stretches of time instead)."""
    with app.app_context():
        outdated, missing = (ThreeSteps.start(order_id=n) for n in (40, 41))
        polls = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    sql(app, "UPDATE pgbus_workflows SET definition_digest = 'older' WHERE workflow_id = %s", outdated.workflow_id)
    for table in ("pgbus_workflows", "pgbus_workflow_steps"):
        sql(app, f"UPDATE {table} SET workflow_class = 'gone.Vanished' WHERE workflow_id = %s", missing.workflow_id)
    sql(app, "INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,"
        " started_at, finished_at, error_class, error_message, worker)"
        " SELECT workflow_id, workflow_class, 'capture', 100 + i, 'failed', now() - (i || ' minutes')::interval,"
        " now() - (i || ' minutes')::interval, now() - (i || ' minutes')::interval + interval '2 seconds',"
        " 'RuntimeError', 'still failing', 'host:9'"
        " FROM pgbus_workflows, generate_series(1, %s) AS i WHERE workflow_id = %s", PAGE_SIZE + 5,
        polls.workflow_id)
    return {"outdated": str(outdated.workflow_id), "class_missing": str(missing.workflow_id),
            "many_attempts": str(polls.workflow_id)}


def schedules(app: Flask, declare: Declare) -> None:
    """Two schedules, one of which has started a run."""
    declare("Nightly", "0 2 * * *", schedule_timezone="Europe/Berlin")
    declare("Every5", timedelta(minutes=5))
    engine = engine_of(app)
    with app.app_context():
        sweep(engine)
        sql(app, "UPDATE pgbus_schedules SET next_tick = next_tick - interval '5 minutes' WHERE workflow_class = %s",
            "Every5")
        sweep(engine)


def get(client: FlaskClient, url: str) -> Any:
    return client.get(url + ("&" if "?" in url else "?") + "locale=en")


def seed_pages(app: Flask, declare: Declare) -> dict[str, str]:
    """A run in every state, and the rows every other page shows (insights, limits, schedules, a webhook
    delivery, a parent with children, a run with many attempts); ``{name: workflow_id}``."""
    ids = {**seed_every_state(app), **stall_and_time_out(app), "in_line": in_line(app), **children(app),
           **odd_runs(app)}
    seed_insights(app)
    schedules(app, declare)
    with_a_delivery(app.extensions["pgbus"])
    return ids


def page_urls(client: FlaskClient, ids: dict[str, str]) -> dict[str, str]:
    """Every page a GET shows, by name: lists with their filters, each run, the error pages."""
    run_page = get(client, f"/pgbus/runs/{ids['waiting_batch']}").get_data(as_text=True)
    batch = re.search(r'href="(/pgbus/batches/\d+)"', run_page)
    assert batch
    urls = {
        "overview": "/pgbus/", "runs": "/pgbus/runs", "runs paused": "/pgbus/runs?status=paused",
        "runs by class": "/pgbus/runs?workflow_class=FailsUntil",
        "runs by reason": "/pgbus/runs?reason=paused_error", "runs by step": "/pgbus/runs?step=reserve",
        "runs by text": "/pgbus/runs?text=Order", "runs by subject": "/pgbus/runs?subject=Order%201",
        "runs, none match": "/pgbus/runs?workflow_class=Nope",
        "attention": "/pgbus/attention", "attention of a class": "/pgbus/attention?workflow_class=FailsUntil",
        "limits": "/pgbus/limits", "notifications": "/pgbus/notifications", "batch": batch.group(1),
        "insights": "/pgbus/classes/FailsUntil/insights", "insights 7d": "/pgbus/classes/ThreeSteps/insights?window=7d",
        "insights, nothing ran": "/pgbus/classes/Nope/insights",
        "schedule": "/pgbus/schedules/Every5", "schedule never ticked": "/pgbus/schedules/Nightly",
        "stats card": "/host",
        "400 unknown status": "/pgbus/runs?status=bogus", "400 unknown reason": "/pgbus/runs?reason=bogus",
        "400 control character": "/pgbus/runs?text=a%01b", "400 not a number": "/pgbus/batches/x",
        "400 unknown window": "/pgbus/classes/FailsUntil/insights?window=1y",
        "404 run": "/pgbus/runs/00000000-0000-0000-0000-000000000000", "404 batch": "/pgbus/batches/999999",
        "404 page": "/pgbus/nowhere", "404 schedule": "/pgbus/schedules/Nope",
        "405 wrong method": f"/pgbus/runs/{ids['paused_error']}/actions/cancel",
    }
    urls.update({f"run {state}": f"/pgbus/runs/{run_id}" for state, run_id in ids.items()})
    return urls
