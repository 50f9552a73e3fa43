"""A transactional step that starts child runs: its writes commit with the children, or roll back
with a child that cannot start (found in review)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from pgbus_flask import Workflow, step
from pgbus_flask.engine import Engine

from .conftest import work


@pytest.fixture
def app_table(engine: Engine, pg_url: str) -> Iterator[None]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS tx_children_rows (note text)")
        conn.execute("TRUNCATE tx_children_rows")
    yield
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS tx_children_rows")


def rows(engine: Engine) -> list[str]:
    with engine.db.connection() as conn:
        return [r[0] for r in conn.execute("SELECT note FROM tx_children_rows")]


class TxParcel(Workflow):
    """A child that sits waiting on a signal (ongoing until told)."""

    @step(wait_for="go")
    def hold(self) -> str:
        return "held"


class TxParent(Workflow):
    """A transactional step that writes to the app's table, then starts a child whose subject is taken."""

    @step(transactional=True)
    def book_and_delegate(self) -> Any:
        self.conn.execute("INSERT INTO tx_children_rows (note) VALUES ('booked')")
        return self.start_child(TxParcel, subject=("Parcel", "p-1"))

    @step
    def done(self) -> str:
        return "done"


def test_a_transactional_step_commits_its_writes_with_its_children(engine: Engine, app_table: None) -> None:
    run = TxParent.start()
    work(engine)
    run.refresh()
    assert run.status == "waiting" and len(run.children()) == 1
    assert rows(engine) == ["booked"]


def test_transactional_step_whose_child_cannot_start_rolls_its_writes_back(engine: Engine, app_table: None) -> None:
    # An ongoing run already holds the subject the child asks for: the child cannot start.
    TxParcel.start(subject=("Parcel", "p-1"))
    run = TxParent.start()
    work(engine)
    run.refresh()
    failed = run.steps()[-1]
    assert failed["status"] == "failed" and "SubjectConflict" in (failed["error_class"] or "")
    # DESIGN 5 (Transactional steps): writes roll back with an error.
    assert rows(engine) == [], "the failed transactional step's app write was committed"


def test_transactional_step_retried_after_a_child_start_failure_writes_once(engine: Engine, app_table: None) -> None:
    blocker = TxParcel.start(subject=("Parcel", "p-1"))
    run = TxParent.start()
    work(engine)
    run.refresh()
    assert run.status == "paused"
    blocker.cancel(actor="cli:ops", reason="free the subject")
    run.resume(actor="cli:ops", reason="retry")
    work(engine)
    run.refresh()
    assert run.status == "waiting"
    # DESIGN 5: "Effects on that database happen once".
    assert rows(engine) == ["booked"], f"app rows: {rows(engine)}"
