"""Hostile step outcomes: texts PostgreSQL cannot store as they are (NUL bytes, lone surrogates)."""

from __future__ import annotations

from pgbus_flask.handle import Run

TEXTS = {
    "nul": "bad\x00byte",
    "surrogate": "bad\udcffbyte",
    "mixed": "a\\u0000 b\x00 c\udcff d\\",
}


CASES = ("raise", "return", "pause", "fan_out")


def assert_outcome_kept(run: Run, case: str, text: str) -> None:
    """The run went on past ``produce`` with its outcome recorded as the step left it."""
    run.refresh()
    assert run.status == "finished", (run.status, [(s["step_name"], s["status"]) for s in run.steps()])
    produce = [s for s in run.steps() if s["step_name"] == "produce"]
    if case == "raise":
        [attempt] = produce
        assert attempt["status"] == "skipped" and attempt["outcome"] == "failed"
        assert attempt["error_class"] == "RuntimeError"
        # The documented text form: NUL and lone surrogates written as \u0000 / \udcff.
        assert attempt["error_message"] == text.replace("\x00", "\\u0000").replace("\udcff", "\\udcff")
        assert "RuntimeError" in attempt["backtrace"]
    if case == "pause":
        first = produce[0]
        assert first["outcome"] == "paused"
        assert first["error_message"] == text.replace("\x00", "\\u0000").replace("\udcff", "\\udcff")
    assert run.outputs()["after"] == {"exact": True}
    assert not [s for s in run.steps() if s["error_class"] == "pgbus_flask.errors.StepStalled"]
