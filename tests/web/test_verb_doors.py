"""Every door offers every verb of the table (pgbus_flask/verbs.py), with the same rules.

The doors: the run handle's typed methods, the CLI's commands, the JSON API's routes, the
dashboard's buttons and confirm pages, and the MCP write tools. Each is built from the table; these
tests read each door as its users meet it and compare it with the table: the verb is there, with its
parameters, the statuses that allow it, whether it needs the workflow class, and whether it is
confirmed first.
"""

from __future__ import annotations

import inspect
from typing import Any

import click
import pytest
from flask import Flask

from pgbus_flask import runner, verbs
from pgbus_flask.cli import pgbus_cli
from pgbus_flask.errors import ActionNotAllowed
from pgbus_flask.handle import Run
from pgbus_flask.present import moment
from pgbus_flask.runner.allowed import CONDITIONS
from pgbus_flask.web import api, helpers
from tests.support import work
from tests.support.webtools import csrf, engine_of, sql
from tests.workflows import FailsUntil, ThreeSteps

mcp_server = pytest.importorskip("pgbus_flask.mcp_server")

RUN_VERBS = [pytest.param(verb, id=verb.name) for verb in verbs.RUN_VERBS]
#: The keyword arguments every verb takes besides its own parameters.
COMMON = ("actor", "reason", "session")


def test_the_table_is_whole() -> None:
    assert set(verbs.ACTIONS) == set(verbs.BY_NAME) and len(verbs.ACTIONS) == len(verbs.VERBS)
    assert tuple(v for v in verbs.VERBS if v.name != "signal") == verbs.RUN_VERBS
    for verb in verbs.VERBS:
        assert verb.allowed_from and set(verb.allowed_from) <= set(verbs.states.RUN_STATUSES), verb.name
        assert set(verb.needs) <= set(CONDITIONS), verb.name
        assert verb.label[0] == "action" and verb.label[1], verb.name
        assert verb.help and verb.description, verb.name
        assert (verb.button is not None) == verb.asks_confirmation, verb.name
        for param in verb.params:
            assert param.kind in (verbs.STEP, verbs.MOMENT) and param.help, (verb.name, param.name)
    assert len({v.shown for v in verbs.VERBS}) == len(verbs.VERBS)


@pytest.mark.parametrize("verb", RUN_VERBS)
def test_the_runner_does_each_verb(verb: verbs.Verb) -> None:
    function = getattr(runner.verbs, verb.name)
    params = list(inspect.signature(function).parameters)
    assert params[:2] == ["engine", "workflow_id"]
    assert len([p for p in params[2:] if p not in ("actor", "reason")]) == len(verb.params)
    assert getattr(runner, verb.name) is function


@pytest.mark.parametrize("verb", RUN_VERBS)
def test_the_handle_has_a_typed_method_for_each_verb(verb: verbs.Verb) -> None:
    method = getattr(Run, verb.name)
    signature = inspect.signature(method)
    own = [p for name, p in signature.parameters.items() if name != "self" and name not in COMMON]
    assert [p.name for p in own] == [p.name for p in verb.params]
    assert [p.default is inspect.Parameter.empty for p in own] == [p.required for p in verb.params]
    assert all(name in signature.parameters for name in COMMON)
    returns = str(signature.return_annotation)
    assert returns == ("ResumePlan" if verb.returns == verbs.PLAN else "Run"), returns


@pytest.mark.parametrize("verb", RUN_VERBS)
def test_the_cli_has_a_command_for_each_verb(verb: verbs.Verb) -> None:
    command = pgbus_cli.commands[verb.command]
    params = {p.name: p for p in command.params}
    assert isinstance(params["workflow_id"], click.Argument)
    assert isinstance(params["reason"], click.Option)
    for param in verb.params:
        found = params[param.name]
        assert isinstance(found, click.Argument if param.required else click.Option), param.name
        assert (found.type.name == "datetime") == (param.kind == verbs.MOMENT)
    assert set(params) == {"workflow_id", "reason", *(p.name for p in verb.params)}
    assert (command.help or "").startswith(verb.help)


def test_the_api_takes_every_verb_and_the_dashboard_has_a_button_for_each_confirmed_one() -> None:
    assert tuple(v.name for v in verbs.RUN_VERBS) == api.API_ACTIONS
    assert set(helpers.DASHBOARD_ACTIONS) == {v.name for v in verbs.VERBS if v.asks_confirmation}
    assert set(helpers.ACTION_LABELS) == set(verbs.ACTIONS)
    questions = {name: helpers.action_confirm(name, "Order", "capture") for name in helpers.DASHBOARD_ACTIONS}
    assert all("?" in question for question in questions.values()), questions
    assert len(set(questions.values())) == len(questions)
    assert set(helpers.PRIMARY_ACTIONS) == {v.name for v in verbs.VERBS if v.primary}


@pytest.mark.parametrize("verb", RUN_VERBS)
def test_the_mcp_server_has_a_write_tool_for_each_verb(verb: verbs.Verb) -> None:
    tool = mcp_server.tools(True)[verb.name].as_mcp()
    assert f"Allowed when the run is {', '.join(verb.allowed_from)}." in (tool.description or "")
    assert ("workflow class importable" in (tool.description or "")) == verb.needs_class
    assert tool.annotations is not None and tool.annotations.destructive_hint == verb.destructive
    assert tool.input_schema["required"] == ["workflow_id", *(p.name for p in verb.params if p.required), "reason"]
    for param in verb.params:
        schema = tool.input_schema["properties"][param.name]
        assert (schema.get("format") == "date-time") == (param.kind == verbs.MOMENT)


# -- the same rules, met through every door -------------------------------------------------------------


def _params(verb: verbs.Verb, run: Run) -> dict[str, str]:
    """Values for a verb's parameters that the verb takes (the moment the run was made, its current step)."""
    moment = run.row["created_at"].replace(microsecond=0).isoformat()
    return {p.name: moment if p.kind == verbs.MOMENT else run.current_step for p in verb.params}


def _by_handle(app: Flask, run: Run, verb: verbs.Verb) -> str | None:
    with app.app_context():
        try:
            params: dict[str, Any] = _params(verb, run)
            params.update({p.name: moment(params[p.name]) for p in verb.params if p.kind == verbs.MOMENT})
            Run(engine_of(app), run.workflow_id).act(verb.name, actor="app", reason="try", **params)
        except ActionNotAllowed as exc:
            return str(exc)
    return None


def _by_cli(app: Flask, run: Run, verb: verbs.Verb) -> str | None:
    args = ["pgbus", verb.command, str(run.workflow_id), "--reason", "try"]
    for param in verb.params:
        value = _params(verb, run)[param.name]
        args += [value] if param.required else [f"--{param.name}", value]
    result = app.test_cli_runner().invoke(args=args)
    return result.output if result.exit_code == 1 else None


def _by_api(app: Flask, run: Run, verb: verbs.Verb) -> str | None:
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    response = client.post(f"/pgbus/api/runs/{run.workflow_id}/actions/{verb.name}",
                           data={"csrf_token": token, "reason": "try", **_params(verb, run)})
    return str(response.get_json()["error"]) if response.status_code == 409 else None


def _by_dashboard(app: Flask, run: Run, verb: verbs.Verb) -> str | None:
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{run.workflow_id}")
    response = client.post(f"/pgbus/runs/{run.workflow_id}/actions/{verb.name}",
                           data={"csrf_token": token, "reason": "try", "confirmed": "1", **_params(verb, run)})
    return response.get_data(as_text=True) if response.status_code == 409 else None


def _call(app: Flask) -> Any:
    """What an MCP tool is called with: the engine, and the caller."""
    from pgbus_flask.mcp_server.base import Call

    return Call(engine_of(app), "mcp:tests")


def _by_mcp(app: Flask, run: Run, verb: verbs.Verb) -> str | None:
    tool = mcp_server.tools(True)[verb.name]
    with app.app_context():
        try:
            tool.answer(_call(app), {"workflow_id": str(run.workflow_id), "reason": "try",
                                                    **_params(verb, run)})
        except ActionNotAllowed as exc:
            return str(exc)
    return None


DOORS = {"handle": _by_handle, "cli": _by_cli, "api": _by_api, "mcp": _by_mcp}


@pytest.mark.parametrize("door", list(DOORS))
def test_every_door_refuses_what_the_status_or_the_class_does_not_allow(app: Flask, door: str) -> None:
    """A finished run (the status allows only rerun) and a paused run whose class cannot be imported here
    (the verbs needing it are refused): each door refuses exactly the verbs the table refuses, and changes
    nothing."""
    with app.app_context():
        finished = ThreeSteps.start(order_id=1)
        paused = FailsUntil.start(fail_until=5)
    work(engine_of(app))
    sql(app, "UPDATE pgbus_workflows SET workflow_class = 'GoneWorkflow' WHERE workflow_id = %s",
        paused.workflow_id)
    finished.refresh()
    paused.refresh()
    assert finished.status == "finished" and paused.status == "paused" and not paused.class_loaded
    for verb in verbs.RUN_VERBS:
        if finished.status not in verb.allowed_from:
            said = DOORS[door](app, finished, verb)
            assert said is not None, (door, verb.name, "finished")
            assert finished.refresh().status == "finished"
        if verb.needs_class and "paused" in verb.allowed_from:
            said = DOORS[door](app, paused, verb)
            assert said is not None and "cannot be imported here" in said, (door, verb.name, said)
            assert paused.refresh().status == "paused"


def test_the_dashboard_refuses_the_same(app: Flask) -> None:
    """The dashboard's buttons (the verbs that ask for confirmation) refuse what the table refuses; a verb
    without a button has no route there."""
    with app.app_context():
        finished = ThreeSteps.start(order_id=1)
    work(engine_of(app))
    finished.refresh()
    for verb in verbs.RUN_VERBS:
        if verb.asks_confirmation and finished.status not in verb.allowed_from:
            assert _by_dashboard(app, finished, verb) is not None, verb.name
    client = app.test_client()
    token = csrf(client, f"/pgbus/runs/{finished.workflow_id}")
    for verb in verbs.RUN_VERBS:
        response = client.post(f"/pgbus/runs/{finished.workflow_id}/actions/{verb.name}",
                               data={"csrf_token": token, "reason": "try", "step": "reserve"})
        # unconfirmed: a question first (the verbs with a button), or no such action
        assert response.status_code == (200 if verb.asks_confirmation else 404), verb.name
        if verb.asks_confirmation:
            assert 'data-testid="confirm-sentence"' in response.get_data(as_text=True)
    assert finished.refresh().status == "finished"


def test_every_door_sees_the_same_allowed_verbs(app: Flask) -> None:
    """The handle's available_actions, the JSON API's and the MCP server's show_run agree (one function)."""
    with app.app_context():
        run = FailsUntil.start(fail_until=1)
    work(engine_of(app))
    run.refresh()
    client = app.test_client()
    by_api = client.get(f"/pgbus/api/runs/{run.workflow_id}").get_json()["available_actions"]
    with app.app_context():
        data: Any = mcp_server.tools(False)["show_run"].answer(_call(app),
                                                                {"workflow_id": str(run.workflow_id)})[0]
    assert run.available_actions == by_api == data["available_actions"]
    assert run.available_actions == [name for name in verbs.ACTIONS if name in run.available_actions]
