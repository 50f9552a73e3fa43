"""The Flask-Login recipes of docs/dashboard.md: operators act as dashboard:<their id>, anonymous
visitors are refused."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask, abort, request
from flask_login import LoginManager, UserMixin, current_user, login_user, logout_user
from werkzeug.exceptions import Forbidden

from pgbus_flask.handle import Run

from .conftest import work
from .webtools import csrf, engine_of, text_of
from .workflows import FailsUntil, ThreeSteps


class User(UserMixin):
    def __init__(self, user_id: str, *, admin: bool) -> None:
        self.id = user_id
        self.is_admin = admin


USERS = {"7": User("7", admin=True), "8": User("8", admin=False)}

login_manager = LoginManager()
login_manager.login_view = "sign_in"
login_manager.user_loader(USERS.get)


def operator(request: Any) -> Any:
    # The one-line recipe (docs/dashboard.md), as a function so the marker can name it.
    return current_user.is_authenticated and current_user.get_id()


def admin_operator(request: Any) -> Any:
    """The longer recipe: anonymous visitors go to the sign-in page, only admins get in."""
    if not current_user.is_authenticated:
        abort(login_manager.unauthorized())
    if not current_user.is_admin:
        raise Forbidden("Only admins may open pgbus.")
    return current_user.get_id()


def with_sign_in(app: Flask) -> Flask:
    login_manager.init_app(app)

    @app.route("/sign-in", methods=["GET", "POST"])
    def sign_in() -> str:
        if request.method == "POST":
            login_user(USERS[request.form["id"]])
        return "sign in here"

    @app.post("/sign-out")
    def sign_out() -> str:
        logout_user()
        return "signed out"

    return app


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=operator)
def test_a_signed_in_operator_acts_under_their_id(app: Flask) -> None:
    with_sign_in(app)
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    client = app.test_client()
    client.post("/sign-in", data={"id": "7"})
    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert 'data-testid="actor">dashboard:7<' in page

    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    done = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel",
                       data={"csrf_token": token, "confirmed": "1", "reason": "customer called"})
    assert done.status_code == 303
    cancelled = Run(engine_of(app), run.workflow_id)
    assert cancelled.status == "cancelled"
    assert [(e["event"], e["actor"], e["reason"]) for e in cancelled.events() if e["event"] == "cancelled"] == [
        ("cancelled", "dashboard:7", "customer called")]


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=operator)
def test_anonymous_visitors_are_refused_and_change_nothing(app: Flask) -> None:
    with_sign_in(app)
    with app.app_context():
        run = FailsUntil.start(fail_until=1)
        work(engine_of(app))
    client = app.test_client()

    page = client.get("/pgbus/")
    assert page.status_code == 401
    assert "You are not allowed to use the pgbus dashboard: please sign in." in text_of(page.get_data(as_text=True))
    assert client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume", data={"confirmed": "1"}).status_code == 401

    client.post("/sign-in", data={"id": "7"})
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    client.post("/sign-out")
    refused = client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume",
                          data={"csrf_token": token, "confirmed": "1"})
    assert refused.status_code == 401, "signed out: the page's token is no pass"
    assert Run(engine_of(app), run.workflow_id).status == "paused"
    assert [e["event"] for e in Run(engine_of(app), run.workflow_id).events()].count("resumed") == 0


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=admin_operator)
def test_the_longer_recipe_sends_anonymous_visitors_to_sign_in_and_keeps_others_out(app: Flask) -> None:
    with_sign_in(app)
    client = app.test_client()
    to_sign_in = client.get("/pgbus/runs?status=paused")
    assert to_sign_in.status_code == 302
    assert to_sign_in.headers["Location"].startswith("/sign-in?next=")
    assert "%2Fpgbus%2Fruns" in to_sign_in.headers["Location"]

    client.post("/sign-in", data={"id": "8"})
    forbidden = client.get("/pgbus/runs")
    assert forbidden.status_code == 403
    assert "Only admins may open pgbus." in text_of(forbidden.get_data(as_text=True))

    client.post("/sign-in", data={"id": "7"})
    assert 'data-testid="actor">dashboard:7<' in client.get("/pgbus/runs").get_data(as_text=True)
