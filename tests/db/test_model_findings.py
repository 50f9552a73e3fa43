"""Engine bugs the model-based test (tests/db/test_model.py) found, each as a plain reproduction.

Each test states what a rule of docs/architecture.md asks for; each failed before its fix, and keeps
the bug from coming back without depending on hypothesis finding it again.
"""

from __future__ import annotations

from pgbus_flask import ActionNotAllowed, runner
from pgbus_flask.engine import Engine
from pgbus_flask.handle import Run
from tests.model_workflows import ModelPlain


def paused_after_completing(engine: Engine, steps: int) -> Run:
    """A ModelPlain run paused while its attempt of step number ``steps`` ran; that attempt then
    completed (so the run is paused with a completed latest step, as resume's "continue"/"finish")."""
    run = ModelPlain.start(bus=engine)
    for number in range(1, steps + 1):
        claim = runner.claim_attempt(engine, run.refresh().latest_step["id"], None)  # type: ignore[index]
        assert claim is not None
        if number == steps:
            run.refresh().pause(reason="look first")
        runner.record_outcome(engine, claim, result=f"step {number}")
    return run.refresh()


def test_skip_is_listed_only_when_it_succeeds_after_the_last_step_completed(engine: Engine) -> None:
    """Invariant: available_actions lists exactly the verbs that succeed.

    Paused while its last step ran, and that step then completed: the resume plan is
    "Finish the run" and available_actions lists ``skip``, but skip raises
    ActionNotAllowed ("its last step already ended"), whose own "allowed now" list
    (resume, cancel) disagrees with available_actions too.
    """
    run = paused_after_completing(engine, 2)
    assert run.status == "paused"
    assert run.resume_plan() == runner.ResumePlan("finish", None)
    allowed = run.available_actions
    try:
        run.skip(reason="nothing left to skip")
    except ActionNotAllowed as refusal:
        assert "skip" not in allowed, f"available_actions {allowed} offers skip, which was refused: {refusal}"
        assert list(refusal.allowed) == allowed
    else:
        assert "skip" in allowed


def test_skip_that_finishes_the_run_moves_current_step(engine: Engine) -> None:
    """Invariant: a run's current step is its latest step.

    Paused while ``first`` ran, and ``first`` then completed: skip inserts a skipped
    attempt of ``second`` (the last step) and finishes the run, but the run's
    current_step stays ``first``: the runs list filtered by step, and the run page's
    header, place the finished run at a step it left.
    """
    run = paused_after_completing(engine, 1)
    run.skip(reason="second is not needed")
    assert run.status == "finished"
    assert [(s["step_name"], s["status"]) for s in run.steps()] == [("first", "completed"), ("second", "skipped")]
    assert run.current_step == "second"
