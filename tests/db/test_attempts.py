"""Step attempts: outcomes, error policies, reattempt counting, duplicates and late completions."""

from __future__ import annotations

import pytest

from pgbus_flask import runner
from pgbus_flask.engine import Engine
from tests.support import work
from tests.workflows import CancelsOnError, FailsUntil, FiveNoop, PausesItself, Reattempts, SkipsOnError, ThreeSteps


def attempts(run: object) -> list[tuple[str, int, str, str | None]]:
    return [(s["step_name"], s["attempt"], s["status"], s["outcome"]) for s in run.steps()]  # type: ignore[attr-defined]


def test_error_pauses_by_default_and_keeps_class_message_and_backtrace(engine: Engine) -> None:
    run = FailsUntil.start(fail_until=1)
    work(engine)
    run.refresh()
    assert run.status == "paused"
    step = run.steps()[-1]
    assert step["error_class"] == "TimeoutError"
    assert step["error_message"] == "gateway timed out on attempt 1"
    assert "Traceback" in step["backtrace"] and "workflows.py" in step["backtrace"]
    assert step["worker"] and step["started_at"] and step["stall_at"] > step["started_at"]
    paused = [e for e in run.events() if e["event"] == "paused"][-1]
    assert paused["actor"] == "system" and paused["reason"].startswith("TimeoutError: gateway timed out")


def test_reattempts_count_consecutively_then_pause(engine: Engine) -> None:
    run = Reattempts.start()
    for _ in range(4):
        work(engine)
    run.refresh()
    assert run.status == "paused"
    assert attempts(run) == [("flaky", 1, "failed", "reattempted"), ("flaky", 2, "failed", "reattempted"),
                             ("flaky", 3, "failed", "failed")]
    # An operator's resume ends the run of reattempts: the count starts again.
    run.resume(reason="retry after fix")
    for _ in range(4):
        work(engine)
    run.refresh()
    assert [a[3] for a in attempts(run)][3:] == ["reattempted", "reattempted", "failed"]


def test_reattempt_succeeds(engine: Engine) -> None:
    run = Reattempts.start(fail_until=1)
    for _ in range(3):
        work(engine)
    assert run.refresh().status == "finished"
    assert [a[2] for a in attempts(run)] == ["failed", "completed"]


def test_on_error_cancel_and_skip(engine: Engine) -> None:
    doomed = CancelsOnError.start()
    optional = SkipsOnError.start()
    work(engine)
    assert doomed.refresh().status == "cancelled"
    assert optional.refresh().status == "finished"
    assert attempts(optional) == [("optional", 1, "skipped", "failed"), ("last", 1, "completed", "completed")]


def test_step_pauses_itself_and_resume_retries(engine: Engine) -> None:
    run = PausesItself.start()
    work(engine)
    run.refresh()
    assert run.status == "paused"
    assert run.events()[-1]["reason"] == "needs a manual look"
    run.resume()
    work(engine)
    assert run.refresh().status == "finished"


def test_every_step_job_delivered_three_times_completes_once(engine: Engine) -> None:
    engine.deliveries = 3
    runs = [FiveNoop.start() for _ in range(5)] + [ThreeSteps.start(order_id=i) for i in range(5)]
    for _ in range(6):
        work(engine)
    with engine.db.connection() as conn:
        rows = conn.execute(
            "SELECT workflow_id, step_name, count(*) FILTER (WHERE status = 'completed'), count(*)"
            " FROM pgbus_workflow_steps GROUP BY 1, 2").fetchall()
    assert len(rows) == 5 * 5 + 5 * 3
    assert all(done == 1 and total == 1 for _, _, done, total in rows)
    assert all(r.refresh().status == "finished" for r in runs)


def test_late_completion_after_cancel_is_ignored(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=1)
    claim = runner.claim_attempt(engine, run.latest_step["id"], "job-1")  # type: ignore[index]
    assert claim is not None
    run.refresh().cancel(actor="cli:bob", reason="fraud")
    before = attempts(run)
    runner.record_outcome(engine, claim, result={"reserved": 1})
    run.refresh()
    assert run.status == "cancelled"
    assert attempts(run) == before == [("reserve", 1, "cancelled", "cancelled")]
    assert run.events()[-1]["event"] == "late_completion_ignored"


def test_duplicate_and_early_claims_are_noops(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=1)
    step_id = run.latest_step["id"]  # type: ignore[index]
    assert runner.claim_attempt(engine, step_id, "a") is not None
    assert runner.claim_attempt(engine, step_id, "b") is None
    assert runner.claim_attempt(engine, 10**9, "c") is None


def test_unserializable_output_fails_the_step(engine: Engine) -> None:
    from pgbus_flask import Workflow, step

    class ReturnsSet(Workflow):
        @step
        def bad(self) -> object:
            return {1, 2}

    run = ReturnsSet.start()
    work(engine)
    run.refresh()
    assert run.status == "paused"
    assert run.steps()[-1]["error_class"] == "pgbus_flask.errors.ArgumentsNotSerializable"


def test_unknown_workflow_class_pauses_with_a_clear_error(engine: Engine) -> None:
    run = ThreeSteps.start(order_id=1)
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflows SET workflow_class = 'Vanished' WHERE workflow_id = %s",
                     (run.workflow_id,))
    work(engine)
    run.refresh()
    assert run.status == "paused"
    assert run.steps()[-1]["error_class"] == "pgbus_flask.errors.UnknownWorkflow"


@pytest.mark.parametrize("option", [{"on_error": "explode"}, {"max_reattempts": -1}, {"bogus": 1},
                                    {"wait_timeout": 5}])
def test_bad_step_options_are_named(option: dict[str, object]) -> None:
    from pgbus_flask import Workflow, step
    from pgbus_flask.errors import DefinitionError

    with pytest.raises(DefinitionError):
        class Bad(Workflow):
            @step(**option)
            def only(self) -> None: ...


def test_outcome_survives_terminated_database_connections(engine: Engine, pg_url: str) -> None:
    from tests.workflows import CutsDatabaseConnections

    run = CutsDatabaseConnections.start(url=pg_url)
    for _ in range(3):
        work(engine)
    run.refresh()
    assert run.status == "finished"
    assert [(s["step_name"], s["status"]) for s in run.steps()] == [("cut", "completed"), ("after", "completed")]
