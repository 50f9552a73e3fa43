"""``GET /pgbus/api``: the JSON API's index, built from the routes the blueprint registered, so that an
endpoint added anywhere is listed and every listed address answers."""

from __future__ import annotations

import re

from flask import Flask

from pgbus_flask.engine import Engine
from pgbus_flask.web import api, make_blueprint

#: Endpoints a reader of the docs looks for, as the index must list them.
KNOWN = {
    ("GET", "/pgbus/api"), ("GET", "/pgbus/api/overview"), ("GET", "/pgbus/api/runs"),
    ("GET", "/pgbus/api/runs/<workflow_id>"), ("POST", "/pgbus/api/runs/<workflow_id>/actions/<action>"),
    ("GET", "/pgbus/api/runs/<workflow_id>/signals/<signal_id>"),
    ("GET", "/pgbus/api/runs/<workflow_id>/outputs/<step_name>"),
    ("GET", "/pgbus/api/attention"), ("GET", "/pgbus/api/limits"), ("GET", "/pgbus/api/batches/<batch_id>"),
    ("GET", "/pgbus/api/batches/<batch_id>/children/<position>"),
    ("GET", "/pgbus/api/classes/<workflow_class>/insights"),
    ("GET", "/pgbus/api/schedules"), ("GET", "/pgbus/api/schedules/<workflow_class>"),
    ("POST", "/pgbus/api/schedules/<workflow_class>/<action>"), ("GET", "/pgbus/api/notifications"),
}
#: A value for each variable of a path, to ask for it.
SAMPLES = {"workflow_id": "00000000-0000-0000-0000-000000000000", "action": "cancel", "signal_id": "1",
           "step_name": "reserve", "batch_id": "1", "position": "0", "workflow_class": "ThreeSteps"}


def test_the_index_lists_every_endpoint_with_its_method_and_a_line_saying_what_it_answers(app: Flask) -> None:
    client = app.test_client()
    response = client.get("/pgbus/api")
    assert response.status_code == 200 and response.is_json
    listed = response.get_json()["endpoints"]
    assert client.get("/pgbus/api/").get_json()["endpoints"] == listed
    found = {(e["method"], e["path"]) for e in listed}
    assert found >= KNOWN, KNOWN - found
    assert all(e["path"].startswith("/pgbus/api") and "path:" not in e["path"] for e in listed)
    assert [(e["path"], e["method"]) for e in listed] == sorted((e["path"], e["method"]) for e in listed)
    assert len(found) == len(listed), "each endpoint once"
    for entry in listed:
        assert set(entry) == {"path", "method", "description"}
        text = entry["description"]
        assert text and "\n" not in text and text.endswith("."), entry
        assert text in api.DESCRIPTIONS.values(), f"{entry}: add its line to pgbus_flask.web.api.DESCRIPTIONS"
    assert next(e for e in listed if e["path"] == "/pgbus/api/overview")["description"] == (
        "Runs by class and status, the runs that need attention by class and stuck reason, and the overview's totals.")


def test_every_listed_address_answers_and_nothing_else_under_the_api_does(app: Flask) -> None:
    """Each GET endpoint, its variables filled in, is served by its own view (a 200, or its own 404 for a
    run or batch that does not exist), never the "no address" answer of a path that names nothing."""
    client = app.test_client()
    for entry in client.get("/pgbus/api").get_json()["endpoints"]:
        if entry["method"] != "GET":
            continue
        path = re.sub(r"<([a-z_]+)>", lambda m: SAMPLES[m.group(1)], entry["path"])
        response = client.get(path)
        assert response.is_json and "has no address" not in response.get_json().get("error", ""), path
    nowhere = client.get("/pgbus/api/nowhere")
    assert nowhere.status_code == 404
    assert nowhere.get_json()["error"] == "The JSON API has no address /pgbus/api/nowhere."


def test_a_route_added_to_the_blueprint_is_listed_without_editing_the_index(engine: Engine) -> None:
    """The index reads the app's routes: one an app adds under the API shows up, with its view's docstring
    until it has a translated line, under the prefix and script root it is served at."""
    bp = make_blueprint(engine)

    def echo() -> dict[str, str]:
        """What the host app says.

        More lines that the index leaves out."""
        return {"echo": "yes"}

    bp.add_url_rule("/api/echo/<int:times>", "api_echo", echo, methods=["GET", "POST"])
    host = Flask("host_app")
    host.config.update(TESTING=True, SECRET_KEY="test")
    host.register_blueprint(bp, url_prefix="/ops/bus")
    listed = host.test_client().get("/ops/bus/api", base_url="http://localhost/shop").get_json()["endpoints"]
    echo_entries = [e for e in listed if "echo" in e["path"]]
    assert echo_entries == [
        {"path": "/shop/ops/bus/api/echo/<times>", "method": "GET", "description": "What the host app says."},
        {"path": "/shop/ops/bus/api/echo/<times>", "method": "POST", "description": "What the host app says."}]
    assert ("GET", "/shop/ops/bus/api/overview") in {(e["method"], e["path"]) for e in listed}
