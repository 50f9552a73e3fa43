"""The presenter: one badge and one next-step sentence for every state a run can be in (no database)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from pgbus_flask import states
from pgbus_flask.web.presenter import BADGE_TONES, NEXT_KEYS, Presentation, present

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=timezone.utc)
THRESHOLD = timedelta(minutes=5)


def ago(**kw: float) -> datetime:
    return NOW - timedelta(**kw)


def later(**kw: float) -> datetime:
    return NOW + timedelta(**kw)


def row(status: str, step: str = "capture", **cols: Any) -> dict[str, Any]:
    """A list row: the run's columns plus its latest step as step_* columns."""
    base: dict[str, Any] = {
        "status": status, "workflow_class": "OrderWorkflow", "current_step": step, "updated_at": ago(minutes=1),
        "paused_at": None, "finished_at": None, "step_step_name": step, "step_status": None, "step_attempt": 1,
        "step_scheduled_at": None, "step_started_at": None, "step_stall_at": None, "step_error_class": None,
        "step_error_message": None, "step_waiting_since": None, "step_timeout_at": None, "step_batch_id": None,
        "batch_done": None, "batch_total": None, "batch_failed": None,
    }
    base.update(cols)
    return base


def show(r: dict[str, Any], wait_for: str | None = None) -> Presentation:
    return present(r, now=NOW, stall_threshold=THRESHOLD, wait_for=wait_for)


def test_scheduled_for_later() -> None:
    p = show(row("ready", step_status="scheduled", step_scheduled_at=later(minutes=10)))
    assert (p.badge, p.tone, p.next_key) == ("scheduled", "gray", "scheduled")
    assert p.next_args == {"step": "capture", "time": later(minutes=10)}


def test_queued_when_due_now() -> None:
    p = show(row("ready", step_status="scheduled", step_scheduled_at=ago(seconds=20)))
    assert (p.badge, p.tone, p.next_key) == ("queued", "blue", "queued")
    assert p.next_args["ago"] == ago(seconds=20)


def test_overdue_past_the_stall_threshold() -> None:
    p = show(row("ready", step_status="scheduled", step_scheduled_at=ago(minutes=6)))
    assert (p.badge, p.tone, p.next_key) == ("overdue", "yellow", "overdue")
    assert p.next_args == {"step": "capture", "ago": ago(minutes=6)}


def test_exactly_at_the_threshold_is_still_queued() -> None:
    assert show(row("ready", step_status="scheduled", step_scheduled_at=ago(minutes=5))).badge == "queued"


def test_running() -> None:
    p = show(row("running", step_status="in_progress", step_attempt=2, step_started_at=ago(seconds=30),
                 step_stall_at=later(minutes=9)))
    assert (p.badge, p.tone, p.next_key) == ("running", "blue", "running")
    assert p.next_args == {"step": "capture", "ago": ago(seconds=30), "attempt": 2}


def test_possibly_stalled_when_past_stall_at() -> None:
    p = show(row("running", step_status="in_progress", step_started_at=ago(minutes=20),
                 step_stall_at=ago(minutes=10)))
    assert (p.badge, p.tone, p.next_key) == ("possibly_stalled", "yellow", "possibly_stalled")
    assert p.next_args["ago"] == ago(minutes=10)


def test_waiting_for_a_signal_without_deadline() -> None:
    p = show(row("waiting", "confirm", step_status="waiting", step_waiting_since=ago(minutes=3)),
             wait_for="payment_confirmed")
    assert (p.badge, p.tone, p.next_key) == ("waiting", "yellow", "waiting_signal")
    assert p.next_args == {"signal": "payment_confirmed", "step": "confirm", "since": ago(minutes=3)}


def test_waiting_for_a_signal_with_deadline() -> None:
    p = show(row("waiting", "confirm", step_status="waiting", step_waiting_since=ago(minutes=3),
                 step_timeout_at=later(hours=2)), wait_for="payment_confirmed")
    assert p.next_key == "waiting_signal_deadline"
    assert p.next_args == {"signal": "payment_confirmed", "step": "confirm", "since": ago(minutes=3),
                           "time": later(hours=2)}


def test_waiting_for_a_signal_of_a_class_not_loaded_here() -> None:
    p = show(row("waiting", "confirm", step_status="waiting", step_waiting_since=ago(minutes=3)))
    assert (p.badge, p.next_key) == ("waiting", "waiting_any_signal")


def test_waiting_for_a_batch() -> None:
    p = show(row("waiting", "notify_vendors", step_status="waiting", step_batch_id=9,
                 step_waiting_since=ago(minutes=1), batch_done=7, batch_total=12, batch_failed=0))
    assert (p.badge, p.tone, p.next_key) == ("waiting", "yellow", "waiting_batch")
    assert p.next_args["done"] == 7 and p.next_args["total"] == 12 and p.next_args["batch_id"] == 9
    assert p.next_args["batch"] == "OrderWorkflow#notify_vendors"  # as the reference names a batch


def test_paused_after_an_error() -> None:
    p = show(row("paused", paused_at=ago(minutes=2), step_status="failed", step_attempt=2,
                 step_error_class="TimeoutError", step_error_message="gateway timed out"))
    assert (p.badge, p.tone, p.next_key) == ("paused_error", "red", "paused_error")
    assert p.next_args["error"] == "TimeoutError" and p.next_args["since"] == ago(minutes=2)


def test_stalled() -> None:
    p = show(row("paused", paused_at=ago(minutes=2), step_status="failed", step_error_class=states.STALLED_ERROR))
    assert (p.badge, p.tone, p.next_key) == ("stalled", "red", "stalled")


def test_paused_by_someone() -> None:
    p = show(row("paused", paused_at=ago(hours=1), step_status="waiting"))
    assert (p.badge, p.tone, p.next_key) == ("paused", "yellow", "paused_manual")
    assert p.next_args == {"step": "capture", "since": ago(hours=1)}


def test_paused_by_the_step_itself_is_manual_too() -> None:
    p = show(row("paused", paused_at=ago(hours=1), step_status="failed", step_outcome="paused",
                 step_error_message="needs a look"))
    assert (p.badge, p.next_key) == ("paused", "paused_manual")


def test_a_reattempt_asked_for_while_paused_is_not_a_failure() -> None:
    p = show(row("paused", paused_at=ago(hours=1), step_status="failed", step_outcome="reattempted",
                 step_error_message="the step asked to be reattempted"))
    assert (p.badge, p.next_key) == ("paused", "paused_manual")


def test_a_step_that_failed_without_an_error_class_is_still_a_failure() -> None:
    """The reference's rule: paused on a latest step that failed is paused_error, whatever it failed with."""
    p = show(row("paused", paused_at=ago(minutes=2), step_status="failed", step_outcome="failed"))
    assert (p.badge, p.tone, p.next_key) == ("paused_error", "red", "paused_failed")
    assert "error" not in p.next_args


def attention(status: str, reason: str | None, since: datetime | None,
              waiting_threshold: timedelta | None = timedelta(hours=1)) -> str | None:
    r = row(status, attention_reason=reason, attention_since=since)
    return present(r, now=NOW, stall_threshold=THRESHOLD, waiting_threshold=waiting_threshold).attention


def test_the_runs_that_need_attention_now() -> None:
    """What the lists mark: the runs the stuck counts count, from the attention columns."""
    assert attention("paused", "paused_error", ago(seconds=1)) == "paused_error"
    assert attention("paused", "paused_manual", ago(seconds=1)) == "paused_manual"
    assert attention("ready", "overdue", ago(minutes=6)) == "overdue"
    assert attention("ready", "overdue", ago(minutes=4)) is None  # due, not overdue yet
    assert attention("waiting", "waiting_overdue", ago(days=3)) == "waiting_overdue"
    assert attention("waiting", "waiting_overdue", ago(minutes=59)) is None
    assert attention("waiting", "waiting_overdue", ago(days=3), waiting_threshold=None) is None  # not set: never
    assert attention("running", None, None) is None
    assert attention("finished", None, None) is None
    assert show(row("waiting", attention_reason="waiting_overdue", attention_since=ago(days=3))).attention is None


def test_finished() -> None:
    p = show(row("finished", finished_at=ago(days=1), step_status="completed"))
    assert (p.badge, p.tone, p.next_key, p.next_args) == ("finished", "green", "finished", {"ago": ago(days=1)})


def test_cancelled() -> None:
    p = show(row("cancelled", finished_at=ago(hours=3), step_status="cancelled"))
    assert (p.badge, p.tone, p.next_key, p.next_args) == ("cancelled", "gray", "cancelled", {"ago": ago(hours=3)})


def test_a_run_page_row_with_a_latest_step_dict() -> None:
    r = {"status": "running", "workflow_class": "X", "current_step": "a", "updated_at": ago(minutes=1),
         "latest_step": {"step_name": "a", "status": "in_progress", "attempt": 1, "started_at": ago(seconds=5),
                         "stall_at": later(minutes=5)}}
    p = show(r)
    assert (p.badge, p.next_args["ago"]) == ("running", ago(seconds=5))


@pytest.mark.parametrize("status", states.RUN_STATUSES)
def test_every_status_gets_a_known_badge_and_key(status: str) -> None:
    p = show(row(status, step_status="scheduled", step_scheduled_at=NOW))
    assert p.badge in BADGE_TONES and p.next_key in NEXT_KEYS and p.tone == BADGE_TONES[p.badge]
