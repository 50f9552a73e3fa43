"""The Flask-Login recipes of docs/dashboard.md: operators act as dashboard:<their id>, anonymous
visitors are refused."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from flask import Flask, abort, request
from flask_login import LoginManager, UserMixin, current_user, login_user, logout_user
from werkzeug.exceptions import Forbidden

from pgbus_flask.handle import Run
from pgbus_flask.web import security
from tests.support import ROOT, work
from tests.support.webtools import csrf, engine_of, text_of
from tests.workflows import FailsUntil, ThreeSteps


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


def current_user_itself(request: Any) -> Any:
    # Looks right, but Flask-Login's anonymous user is truthy: a configuration error, not a name.
    return current_user


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=current_user_itself)
def test_returning_current_user_itself_is_a_500_naming_its_type(app: Flask, caplog: pytest.LogCaptureFixture,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(security, "_MISCONFIGURED_LOGGED", set())  # as in a fresh process
    with_sign_in(app)
    with app.app_context():
        run = FailsUntil.start(fail_until=1)
        work(engine_of(app))
    client = app.test_client()
    with caplog.at_level("ERROR", logger="pgbus_flask.web"):
        page = client.get(f"/pgbus/runs/{run.workflow_id}")
        assert page.status_code == 500
        text = text_of(page.get_data(as_text=True))
        assert "PGBUS_DASHBOARD_AUTH returned AnonymousUserMixin; return the user's id or None." in text
        assert "dashboard:" not in text and "fail_until" not in text, "nothing of the run is shown"
        refused = client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume", data={"confirmed": "1"})
        assert refused.status_code == 500
        client.post("/sign-in", data={"id": "7"})
        signed_in = client.get("/pgbus/")
        assert signed_in.status_code == 500 and "returned User;" in text_of(signed_in.get_data(as_text=True))
        assert client.get("/pgbus/").status_code == 500
    after = Run(engine_of(app), run.workflow_id)
    assert after.status == "paused" and "resumed" not in [e["event"] for e in after.events()]
    logged = [r.getMessage() for r in caplog.records if "PGBUS_DASHBOARD_AUTH returned" in r.getMessage()]
    assert len(logged) == 2, "once per type"
    assert "flask_login.mixins.AnonymousUserMixin" in logged[0] and "test_flask_login.User" in logged[1]


def readme_one_liner() -> Any:
    """The Flask-Login line README.md shows, made into the function it describes."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        found = re.search(r"`(lambda request: current_user[^`]*)`", f.read())
    assert found, "README.md shows the Flask-Login one-liner"
    return eval(found.group(1), {"current_user": current_user})  # the README's own text


README_AUTH = readme_one_liner()


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=README_AUTH)
def test_the_readme_one_liner_refuses_anonymous_visitors_and_names_operators(app: Flask) -> None:
    with_sign_in(app)
    client = app.test_client()
    anonymous = client.get("/pgbus/")
    assert anonymous.status_code == 401
    assert "please sign in" in text_of(anonymous.get_data(as_text=True))
    client.post("/sign-in", data={"id": "8"})
    assert 'data-testid="actor">dashboard:8<' in client.get("/pgbus/").get_data(as_text=True)
