"""The example shop (examples/shop) end to end, as its README runs it.

Its own commands create the tables and the users; a customer signs in and orders
through the shop's pages; a real ``pgbus-worker --app shop:create_app`` runs the
workflows; an operator finds the declined order in the dashboard's attention view
and resumes it with a real form POST. PostgreSQL and Redis are the test servers.
"""

from __future__ import annotations

import html
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import select

from pgbus_flask import engine as engine_module
from pgbus_flask.testing import wait_until
from tests.support import ROOT
from tests.support.procs import describe, workers
from tests.support.webtools import engine_of, text_of

EXAMPLE = os.path.join(ROOT, "examples", "shop")
sys.path.insert(0, EXAMPLE)
shop: Any = importlib.import_module("shop")

PASSWORD = "correct horse battery staple"


@pytest.fixture
def shop_app(clean: None, pg_url: str, redis_url: str) -> Iterator[Flask]:
    """The shop on the test services, set up with its README's commands."""
    app = shop.create_app({"SECRET_KEY": "shop-test", "PGBUS_DATABASE_URL": pg_url, "PGBUS_REDIS_URL": redis_url})
    cli = app.test_cli_runner()
    for args, given in ((["init-db"], None), (["pgbus", "migrate"], None),
                        (["add-user", "ada@example.com", "--operator"], f"{PASSWORD}\n{PASSWORD}\n"),
                        (["add-user", "bob@example.com"], f"{PASSWORD}\n{PASSWORD}\n")):
        result = cli.invoke(args=args, input=given)
        assert result.exit_code == 0, f"flask {' '.join(args)}: {result.output}"
    yield app
    with app.app_context():
        shop.db.session.remove()
        shop.db.drop_all()
        shop.db.engine.dispose()
    engine_of(app).close()
    engine_module._default = None


def user_id(app: Flask, email: str) -> int:
    with app.app_context():
        found = shop.db.session.scalar(select(shop.User.id).filter_by(email=email))
        shop.db.session.remove()
    return int(found)


def form_token(page: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found, "the page has no form with a CSRF token"
    return html.unescape(found.group(1))


def sign_in(app: Flask, email: str) -> FlaskClient:
    client = app.test_client()
    token = form_token(client.get("/login").get_data(as_text=True))
    response = client.post("/login", data={"csrf_token": token, "email": email, "password": PASSWORD})
    assert response.status_code == 302 and response.headers["Location"] == "/", response.get_data(as_text=True)
    return client


def order_amount(client: FlaskClient, amount: str) -> int:
    """Place an order from the orders page's form; returns its id (from the notice)."""
    token = form_token(client.get("/").get_data(as_text=True))
    response = client.post("/orders", data={"csrf_token": token, "amount": amount}, follow_redirects=True)
    assert response.status_code == 200
    placed = re.search(r"Order (\d+) placed\.", response.get_data(as_text=True))
    assert placed, text_of(response.get_data(as_text=True))
    return int(placed.group(1))


def status_shown(client: FlaskClient, order_id: int) -> str:
    """The status the customer sees for an order on the orders page."""
    page = client.get("/").get_data(as_text=True)
    row = re.search(rf'<tr id="order-{order_id}">(.*?)</tr>', page, re.S)
    assert row, f"order {order_id} is not on the page"
    return text_of(row.group(1)).split()[-1]


def runs_of(pg_url: str, order_id: int) -> list[tuple[str, str]]:
    """(run id, status) of the runs whose subject is the order."""
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT workflow_id::text, status FROM pgbus_workflows WHERE workflow_class = 'ShopOrder'"
                            " AND subject_type = 'Order' AND subject_id = %s", (str(order_id),)).fetchall()
    return [(r[0], r[1]) for r in rows]


def orders_in_table(pg_url: str) -> int:
    with psycopg.connect(pg_url) as conn:
        return int(conn.execute("SELECT count(*) FROM shop_orders").fetchone()[0])  # type: ignore[index]


def queued(app: Flask) -> int:
    return int(engine_of(app).queue("shop").count)


#: The README's two ways to start the worker: with the app, or with its settings in the environment.
WORKER_STARTS = {
    "app": (("--app", "shop:create_app", "--no-sweep", "--no-scheduler"), {}),
    "import": (("--no-sweep", "--no-scheduler"), {"PGBUS_IMPORT": "shop"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("start", list(WORKER_STARTS))
def test_the_shop_from_order_to_operator(shop_app: Flask, pg_url: str, redis_url: str, tmp_path: Path,
                                         start: str) -> None:
    ada, bob = user_id(shop_app, "ada@example.com"), user_id(shop_app, "bob@example.com")
    anonymous = shop_app.test_client()
    assert anonymous.get("/").status_code == 302, "the shop asks to sign in first"
    assert anonymous.get("/pgbus/").status_code == 401, "anonymous visitors are refused the dashboard"

    customer = sign_in(shop_app, "bob@example.com")
    assert customer.get("/pgbus/attention").status_code == 403, "a customer is not an operator"

    # An order and its run commit together; the first step job is sent after the commit.
    small = order_amount(customer, "25.00")
    assert [status for _, status in runs_of(pg_url, small)] == ["ready"]
    assert status_shown(customer, small) == "placed"
    assert queued(shop_app) == 1

    # An order rolled back takes its run with it, and sends nothing.
    with shop_app.app_context():
        lost = shop.place_order(shop.db.session.get(shop.User, bob), Decimal("30.00"))
        lost_id = lost.id
        shop.db.session.rollback()
        shop.db.session.remove()
    assert runs_of(pg_url, lost_id) == []
    assert orders_in_table(pg_url) == 1
    assert queued(shop_app) == 1

    args, env = WORKER_STARTS[start]
    with workers(pg_url, redis_url, tmp_path, count=1, args=args,
                 env={"PYTHONPATH": os.pathsep.join([EXAMPLE, ROOT]), **env}) as procs:

        def wait(condition: Callable[[], bool], message: str) -> None:
            try:
                wait_until(condition, timeout=30, message=message)
            except TimeoutError as exc:
                raise AssertionError(f"{exc}\n{describe(procs)}") from None

        wait(lambda: status_shown(customer, small) == "shipped",
             "the worker charges, marks paid and ships the small order")
        assert [status for _, status in runs_of(pg_url, small)] == ["finished"]

        # Over the review limit: the charge is declined and the run pauses for a person.
        big = order_amount(customer, "5000.00")
        wait(lambda: [s for _, s in runs_of(pg_url, big)] == ["paused"], "the declined order's run pauses")
        assert status_shown(customer, big) == "placed"

        operator = sign_in(shop_app, "ada@example.com")
        attention = operator.get("/pgbus/attention").get_data(as_text=True)
        group = re.search(r'<section[^>]*data-testid="attention-group" data-class="ShopOrder" data-step="charge"'
                          r' data-reason="paused_error">(.*?)</section>', attention, re.S)
        assert group, text_of(attention)
        assert "held for review. Call the customer, then resume." in text_of(group.group(1))
        runs_link = re.search(r'<a href="([^"]+)" data-testid="group-runs-link">', group.group(1))
        assert runs_link
        runs_page = operator.get(html.unescape(runs_link.group(1))).get_data(as_text=True)
        listed = re.findall(r'data-testid="run-row" data-workflow-id="([^"]+)" data-status="paused"', runs_page)
        [(run_id, _)] = runs_of(pg_url, big)
        assert listed == [run_id]

        run_page = operator.get(f"/pgbus/runs/{run_id}").get_data(as_text=True)
        form = re.search(r'<form method="post" action="([^"]+)"[^>]*data-testid="action-resume"[^>]*>(.*?)</form>',
                         run_page, re.S)
        assert form, text_of(run_page)
        assert "Retry charge" in text_of(form.group(2))
        done = operator.post(html.unescape(form.group(1)), data={
            "csrf_token": form_token(form.group(2)), "confirmed": "1", "reason": "called the customer: it is theirs"})
        assert done.status_code == 303, text_of(done.get_data(as_text=True))

        wait(lambda: status_shown(customer, big) == "shipped", "the resumed order is charged and shipped")
        assert [status for _, status in runs_of(pg_url, big)] == ["finished"]

    run_page = text_of(operator.get(f"/pgbus/runs/{run_id}").get_data(as_text=True))
    assert f"Resumed by dashboard:{ada} (charge #1): called the customer: it is theirs" in run_page
    with shop_app.app_context():
        run = shop.bus.run(run_id)
        events, attempts = run.events(), [(s["step_name"], s["attempt"], s["status"]) for s in run.steps()]
        paid = shop.db.session.get(shop.Order, big)
        assert (paid.status, paid.charge_id) == ("shipped", f"ch_{run_id[:12]}")
        shop.db.session.remove()
    assert [(e["event"], e["actor"]) for e in events if e["event"] == "resumed"] == [("resumed", f"dashboard:{ada}")]
    assert attempts == [("charge", 1, "failed"), ("charge", 2, "completed"), ("mark_paid", 1, "completed"),
                        ("ship", 1, "completed")], "the resume retried the charge, then the run went on"
    assert "No run needs attention." in text_of(operator.get("/pgbus/attention").get_data(as_text=True))
