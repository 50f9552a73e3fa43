"""What a worker runs for a fan-out child: only a function a registered workflow may hand to
``fan_out`` (defined in the module of a workflow class, or in a module PGBUS_IMPORT names),
never a name someone wrote into ``pgbus_batches.func``; such a child fails with
ChildFunctionNotAllowed, shown on the batch page, and nothing is imported or run."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from psycopg.types.json import Jsonb

from pgbus_flask import payload, runner
from pgbus_flask.definition import fan_out_function
from pgbus_flask.engine import Engine
from pgbus_flask.errors import ChildFunctionNotAllowed
from pgbus_flask.handle import Run
from pgbus_flask.jobs import run_child
from pgbus_flask.queries import batch_progress
from tests.support import work
from tests.support.webtools import engine_of, text_of
from tests.workflows import FansOut, vendor_child

NOT_ALLOWED = "pgbus_flask.errors.ChildFunctionNotAllowed"
BAIT = "tests.fan_out_bait"


def open_batch(engine: Engine, n: int) -> tuple[Run, int]:
    """A FansOut run whose step opened its batch of ``n`` children (queued, none run yet)."""
    run = FansOut.start(n=n)
    first = run.steps()[0]
    runner.run_attempt(engine, first["id"], first["job_id"])
    assert run.refresh().status == "waiting"
    return run, run.steps()[0]["batch_id"]


def rewrite(engine: Engine, batch_id: int, func: str, args: list[list[Any]]) -> None:
    """What an SQL injection in the host app could do: another function and arguments for every child."""
    assert engine.settings.database_url
    with psycopg.connect(engine.settings.database_url, autocommit=True) as conn:
        conn.execute("UPDATE pgbus_batches SET func = %s WHERE id = %s", (func, batch_id))
        for position, values in enumerate(args):
            conn.execute("UPDATE pgbus_batch_children SET args = %s WHERE batch_id = %s AND position = %s",
                         (Jsonb(payload.to_json(values)), batch_id, position))


def test_a_function_written_into_the_database_runs_nothing_and_fails_the_child(
        app: Flask, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = engine_of(app)
    targets = [tmp_path / "made-by-the-attacker", tmp_path / "and-another"]
    with app.app_context():
        run, batch_id = open_batch(engine, 2)
    rewrite(engine, batch_id, "os.makedirs", [[str(t)] for t in targets])

    with caplog.at_level(logging.WARNING, logger="pgbus_flask"):
        work(engine)  # a real RQ worker runs both children

    assert not any(t.exists() for t in targets)
    refusals = [r.getMessage() for r in caplog.records if "not run" in r.getMessage()]
    assert refusals == [f"pgbus: batch {batch_id} child {p} not run: os.makedirs is not a fan-out function of any"
                        " registered workflow (workers run only functions defined in the module of a registered"
                        " workflow class or in a module named by PGBUS_IMPORT); nothing was run" for p in (0, 1)]
    found = batch_progress(engine, batch_id)
    assert found is not None
    batch, children = found
    assert (batch["status"], batch["done"], batch["failed"]) == ("finished", 0, 2)
    expected = "os.makedirs is not a fan-out function of any registered workflow"
    for child in children:
        assert (child["status"], child["error_class"], child["error_code"]) == (
            "failed", NOT_ALLOWED, "child_function_not_allowed")
        assert child["error_message"].startswith(expected), child["error_message"]
        assert "PGBUS_IMPORT" in child["error_message"]
        assert child["error_params"] == {"func": "os.makedirs"}
    # The step fails as with any failed child (and the run pauses for a person).
    assert run.refresh().status == "paused"
    step = run.steps()[0]
    assert step["error_class"] == "pgbus_flask.errors.ChildJobFailed"
    assert "ChildFunctionNotAllowed" in step["error_message"] and expected in step["error_message"]

    run_child(batch_id, 0)  # a redelivered child: recorded once, still nothing run
    again = batch_progress(engine, batch_id)
    assert again is not None and (again[0]["done"], again[0]["failed"]) == (0, 2)
    assert not any(t.exists() for t in targets)

    page = app.test_client().get(f"/pgbus/batches/{batch_id}").get_data(as_text=True)
    rows = re.findall(r'<tr data-testid="batch-child" data-status="failed">.*?</tr>', page, re.S)
    assert len(rows) == 2
    for row in rows:
        assert "ChildFunctionNotAllowed" in row
        assert ("os.makedirs is not a fan-out function of any registered workflow: workers run only functions "
                "defined in the module of a workflow class or in a module named by PGBUS_IMPORT. Nothing was run."
                ) in text_of(row)
    german = app.test_client().get(f"/pgbus/batches/{batch_id}?locale=de").get_data(as_text=True)
    assert "ist keine Funktion, die ein registrierter Workflow als Jobs im Batch ausführen darf" in text_of(german)


def test_a_function_in_a_module_not_imported_is_refused_without_importing_it(engine: Engine,
                                                                              tmp_path: Path) -> None:
    assert BAIT not in sys.modules
    target = tmp_path / "bait"
    run, batch_id = open_batch(engine, 1)
    rewrite(engine, batch_id, f"{BAIT}.bait", [[str(target)]])
    work(engine)
    assert BAIT not in sys.modules, "the worker imported a module named only by the database"
    assert not target.exists()
    [child] = rows_of(engine, batch_id)
    assert (child["status"], child["error_class"]) == ("failed", NOT_ALLOWED)
    assert child["error_message"].startswith(f"{BAIT}.bait is not a fan-out function of any registered workflow")
    assert run.refresh().status == "paused"


def rows_of(engine: Engine, batch_id: int) -> list[dict[str, Any]]:
    found = batch_progress(engine, batch_id)
    assert found is not None
    return found[1]


@pytest.mark.parametrize("name", [
    "os.makedirs",
    "os.system",
    f"{BAIT}.bait",  # a module nothing imported
    "tests.workflows.step",  # a name the workflows' module imported from elsewhere (pgbus_flask.definition)
    "tests.workflows.FansOut",  # a class of that module, not a function
    "tests.workflows",  # no function named
    "tests.workflows.vendor_child.__call__",
    "tests.workflows.no_such_function",
    "",
    "vendor_child",
    "tests.fan_out_helpers.shout",  # PGBUS_IMPORT does not name it here
])
def test_names_a_worker_refuses(engine: Engine, name: str) -> None:
    imported = set(sys.modules)
    with pytest.raises(ChildFunctionNotAllowed) as refused:
        fan_out_function(name, engine.settings.imports)
    assert str(refused.value).startswith(f"{name} is not a fan-out function of any registered workflow")
    assert set(sys.modules) == imported, "nothing was imported"


def test_names_a_worker_runs(engine: Engine) -> None:
    assert fan_out_function("tests.workflows.vendor_child", engine.settings.imports) is vendor_child


@pytest.mark.settings(PGBUS_IMPORT="tests.fan_out_helpers")
def test_a_function_of_a_module_pgbus_import_names_runs(engine: Engine) -> None:
    from tests.fan_out_helpers import shout

    assert fan_out_function("tests.fan_out_helpers.shout", engine.settings.imports) is shout


def test_fan_out_refuses_a_function_no_worker_would_run(engine: Engine) -> None:
    """The step that asks for it fails at once, instead of every child failing later."""
    import os

    context = FansOut(engine=engine, workflow_id=None, args=(), kwargs={}, subject=None, attempt=1,
                      step_name="notify_vendors", outputs={})
    with pytest.raises(ChildFunctionNotAllowed, match=re.escape("os.makedirs is not a fan-out function")):
        context.fan_out(os.makedirs, [("/tmp/x",)])
    with pytest.raises(ChildFunctionNotAllowed, match=re.escape(f"{BAIT}.bait is not a fan-out function")):
        context.fan_out(f"{BAIT}.bait", [("/tmp/x",)])
    assert BAIT not in sys.modules
    assert context.fan_out(vendor_child, [(1, None)]).func == "tests.workflows.vendor_child"
