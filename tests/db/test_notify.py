"""Telling a person: blinker signals after commit, and webhooks from an outbox, with digests.

Runs go through real RQ workers (in-process), the receiver is a real HTTP server on a free port
that answers as each test scripts it (fails, times out, recovers), and each message is checked the
way its receiver would: its Standard Webhooks signature, its body, how many times it came.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook

from pgbus_flask import notify, signals
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.errors import ConfigError
from pgbus_flask.handle import Run
from pgbus_flask.sweep import sweep
from pgbus_flask.testing import wait_until
from tests.support import settings_for, work
from tests.support.webhooks import Receiver
from tests.workflows import FailsUntil, ThreeSteps

SECRET = "whsec_" + base64.b64encode(b"a secret of thirty-two bytes!!!!").decode()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def hooked(pg_url: str, redis_url: str, receiver: Receiver, **extra: Any) -> Engine:
    target = {"name": "ops", "url": receiver.url, "secret": SECRET, "timeout": 1}
    target.update(extra.pop("target", {}))
    settings = settings_for(pg_url, redis_url, PGBUS_WEBHOOKS=[target],
                            PGBUS_DASHBOARD_URL="https://ops.example.com/pgbus", **extra)
    engine = Engine(Settings.load(settings)).make_default()
    notify.declare(engine)
    return engine


@pytest.fixture
def listen() -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Every signal's calls, by signal name, while the test runs."""
    heard: dict[str, list[dict[str, Any]]] = {}
    receivers = []
    for signal in signals.ALL:
        def receiver(sender: Any, _name: str = signal.name, **fields: Any) -> None:
            heard.setdefault(_name, []).append({"sender": sender, **fields})
        signal.connect(receiver)
        receivers.append((signal, receiver))
    yield heard
    for signal, receiver in receivers:
        signal.disconnect(receiver)


def paused_run(engine: Engine) -> Run:
    run = FailsUntil.start(fail_until=99)
    work(engine)
    assert run.refresh().status == "paused"
    return run


# -- signals ---------------------------------------------------------------------------


def test_a_paused_run_is_heard_after_commit_and_its_way_back_too(engine: Engine, listen: dict[str, Any]) -> None:
    run = paused_run(engine)
    needs = listen["run-needs-attention"]
    assert [(n["sender"], n["run_id"], n["step"], n["reason"], n["error_class"]) for n in needs] == [
        ("FailsUntil", str(run.workflow_id), "capture", "paused_error", "TimeoutError")]
    assert "timed out on attempt 1" in needs[0]["error_message"]
    assert [f["step"] for f in listen["step-failed"]] == ["capture"]
    assert [(g["workflow_class"], g["reason"], g["runs"]) for g in listen["attention-group-opened"]] == [
        ("FailsUntil", "paused_error", 1)]
    second = paused_run(engine)
    assert len(listen["attention-group-opened"]) == 1  # the group held a run already
    run.cancel(reason="customer left")
    assert [b["run_id"] for b in listen["run-back-to-normal"]] == [str(run.workflow_id)]
    assert [c["run_id"] for c in listen["run-cancelled"]] == [str(run.workflow_id)]
    assert "attention-group-closed" not in listen
    second.cancel(reason="customer left")
    assert [(g["workflow_class"], g["runs"]) for g in listen["attention-group-closed"]] == [("FailsUntil", 0)]


def test_a_finished_run_is_heard_once_and_a_rolled_back_change_never(engine: Engine, listen: dict[str, Any]) -> None:
    run = ThreeSteps.start(order_id=7)
    work(engine)
    assert [f["run_id"] for f in listen["run-finished"]] == [str(run.workflow_id)]
    other = ThreeSteps.start(order_id=8)

    class Undo(Exception):
        pass

    with pytest.raises(Undo), engine.db.transaction():
        other.cancel(reason="changed my mind")
        raise Undo
    assert "run-cancelled" not in listen
    assert other.refresh().status == "ready"


def reporter(exc: BaseException, context: dict[str, Any]) -> None:
    REPORTED.append((exc, context))


REPORTED: list[tuple[BaseException, dict[str, Any]]] = []


@pytest.mark.settings(PGBUS_ERROR_REPORTER=reporter)
def test_a_receiver_that_raises_breaks_nothing_and_is_reported(engine: Engine, listen: dict[str, Any]) -> None:
    REPORTED.clear()

    def broken(sender: Any, **fields: Any) -> None:
        raise RuntimeError("the pager is down")

    signals.run_needs_attention.connect(broken)
    try:
        run = paused_run(engine)
    finally:
        signals.run_needs_attention.disconnect(broken)
    assert run.refresh().status == "paused" and run.row["attention_reason"] == "paused_error"
    assert [n["run_id"] for n in listen["run-needs-attention"]] == [str(run.workflow_id)]  # the others still heard it
    [(exc, context)] = [(e, c) for e, c in REPORTED if c["where"] == "signal_receiver"]
    assert str(exc) == "the pager is down"
    assert (context["run_id"], context["workflow_class"], context["step"]) == (str(run.workflow_id), "FailsUntil",
                                                                                "capture")


def test_a_receiver_for_one_class_hears_only_that_class(engine: Engine) -> None:
    heard: list[str] = []

    def only_three(sender: Any, **fields: Any) -> None:
        heard.append(sender)

    signals.run_finished.connect(only_three, sender="ThreeSteps")
    try:
        ThreeSteps.start(order_id=1)
        FailsUntil.start(fail_until=0)
        work(engine)
    finally:
        signals.run_finished.disconnect(only_three)
    assert heard == ["ThreeSteps"]


# -- webhooks -----------------------------------------------------------------------------


def test_a_group_opens_with_one_signed_message_then_digests_then_resolves(pg_url: str, redis_url: str, clean: None,
                                                                          receiver: Receiver) -> None:
    engine = hooked(pg_url, redis_url, receiver, PGBUS_NOTIFY_INTERVAL=2)
    try:
        first = paused_run(engine)  # the pump job and the delivery job run in the same burst
        wait_until(lambda: work(engine) == 0 and receiver.received, message="the opening message")
        [opened] = receiver.received
        Webhook(SECRET).verify(opened["body"], opened["headers"])  # raises when the signature is wrong
        body = json.loads(opened["body"])
        assert body["type"] == "attention_group.opened"
        assert body["data"]["runs"] == 1 and body["data"]["workflow_class"] == "FailsUntil"
        assert body["data"]["sentence"].startswith("1 FailsUntil run needs attention at capture: ")
        assert "TimeoutError" in body["data"]["sentence"]
        assert body["data"]["url"] == ("https://ops.example.com/pgbus/runs?workflow_class=FailsUntil&reason=paused_error"
                                       "&step=capture&error_class=TimeoutError")
        others = [paused_run(engine) for _ in range(4)]
        work(engine)
        assert len(receiver.received) == 1  # within the interval: nothing more yet

        def digest() -> bool:
            notify.pump(engine)
            work(engine)
            return len(receiver.received) == 2

        wait_until(digest, timeout=10, message="the digest after the interval")
        grew = json.loads(receiver.received[1]["body"])
        assert grew["type"] == "attention_group.grew"
        assert grew["data"]["new_runs"] == 4 and grew["data"]["runs"] == 5
        assert grew["data"]["sentence"].startswith("4 more FailsUntil runs need attention at capture: ")
        assert "5 in all" in grew["data"]["sentence"]
        for run in [first, *others]:
            run.cancel(reason="refunded")
        wait_until(digest_or(engine, receiver, 3), timeout=10, message="the resolved message")
        resolved = json.loads(receiver.received[2]["body"])
        assert resolved["type"] == "attention_group.resolved" and resolved["data"]["runs"] == 0
        assert len(receiver.received) == 3
    finally:
        engine.close()


def test_a_run_counted_by_the_opening_message_is_not_counted_again_by_its_late_notice(
        pg_url: str, redis_url: str, clean: None, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """"Opened" counts the runs the group holds when it is said; a run whose notice the pump has not
    taken yet (committed after the pump took its batch: CI's two web processes once made 17 of 16) is
    owed back, so the next message does not count it again."""
    import psycopg

    engine = hooked(pg_url, redis_url, receiver, PGBUS_NOTIFY_INTERVAL=1)
    try:
        with psycopg.connect(pg_url, autocommit=False) as holder:  # no pump runs while the runs pause
            holder.execute("SELECT pg_advisory_xact_lock(%s)", (notify.PUMP_LOCK,))
            runs = [paused_run(engine) for _ in range(5)]
            holder.rollback()
        monkeypatch.setattr(notify, "BATCH", 2)  # the pump takes the five notices two at a time
        notify.pump(engine)
        wait_until(lambda: work(engine) == 0 and receiver.received, message="the opening message")
        [opened] = [json.loads(m["body"]) for m in receiver.received]
        assert opened["type"] == "attention_group.opened" and opened["data"]["runs"] == 5
        time.sleep(1.1)  # past the interval: a digest would be sent now if one were owed
        notify.pump(engine)
        work(engine)
        assert [json.loads(m["body"])["type"] for m in receiver.received] == ["attention_group.opened"], \
            "no run is counted twice"
        sixth = paused_run(engine)  # a run that enters later is still told
        wait_until(digest_or(engine, receiver, 2), timeout=10, message="the digest for the sixth run")
        grew = json.loads(receiver.received[1]["body"])
        assert grew["type"] == "attention_group.grew" and grew["data"]["new_runs"] == 1 and grew["data"]["runs"] == 6
        for run in [*runs, sixth]:
            run.cancel(reason="refunded")
    finally:
        engine.close()


def digest_or(engine: Engine, receiver: Receiver, count: int) -> Any:
    def check() -> bool:
        notify.pump(engine)
        work(engine)
        return len(receiver.received) >= count
    return check


def test_a_failing_receiver_gets_the_message_again_until_it_answers_and_never_after(
        pg_url: str, redis_url: str, clean: None, receiver: Receiver) -> None:
    engine = hooked(pg_url, redis_url, receiver)
    receiver.script = [(500, 0.0), (200, 2.0), (200, 0.0)]  # down, then too slow (timeout 1 s), then fine
    try:
        paused_run(engine)
        work(engine)
        [delivery] = notify.recent_deliveries(engine)
        assert delivery["status"] == "pending" and delivery["response_status"] == 500 and delivery["attempts"] == 1
        assert delivery["response_body"] == "receiver is down"

        def tried(n: int) -> Any:
            def check() -> bool:
                engine_sql(engine, "UPDATE pgbus_deliveries SET next_attempt_at = now() WHERE status = 'pending'")
                notify.deliver(engine, delivery["id"])
                row = notify.recent_deliveries(engine)[0]
                return row["attempts"] >= n
            return check

        wait_until(tried(2), timeout=10, message="the second try")
        assert "timed out" in (notify.recent_deliveries(engine)[0]["last_error"] or "")
        wait_until(tried(3), timeout=10, message="the third try")
        row = notify.recent_deliveries(engine)[0]
        assert row["status"] == "delivered" and row["attempts"] == 3
        webhook_ids = {r["headers"]["webhook-id"] for r in receiver.received}
        assert webhook_ids == {row["webhook_id"]}  # the same message id on every try: receivers dedupe on it
        assert notify.deliver(engine, delivery["id"]) is None  # delivered: never sent again
        wait_until(lambda: len(receiver.received) == 3, message="the slow answer recorded")
        assert [r["status"] for r in receiver.received] == [500, 200, 200]  # the slow one came, but too late
    finally:
        engine.close()


def test_a_message_still_refused_after_a_day_is_given_up_and_reported(pg_url: str, redis_url: str, clean: None,
                                                                      receiver: Receiver) -> None:
    engine = hooked(pg_url, redis_url, receiver, PGBUS_ERROR_REPORTER=reporter)
    REPORTED.clear()
    receiver.script = [(503, 0.0)] * 3
    try:
        paused_run(engine)  # the first try: 503, tried again later
        [delivery] = notify.recent_deliveries(engine)
        assert delivery["status"] == "pending" and delivery["attempts"] == 1
        engine_sql(engine, "UPDATE pgbus_deliveries SET created_at = now() - interval '1 day 1 minute',"
                           " next_attempt_at = now()")
        assert notify.deliver(engine, delivery["id"]) == "failed"
        row = notify.recent_deliveries(engine)[0]
        assert row["status"] == "failed" and row["attempts"] == 2 and row["response_status"] == 503
        assert notify.deliver(engine, delivery["id"]) is None  # failed: never tried again
        [exc] = [e for e, c in REPORTED if c["where"] == "webhook_delivery"]
        assert "given up after 2 tries: HTTP 503" in str(exc)
    finally:
        engine.close()


def test_a_message_written_before_redis_was_lost_is_delivered_by_the_sweep(pg_url: str, redis_url: str, clean: None,
                                                                         receiver: Receiver) -> None:
    engine = hooked(pg_url, redis_url, receiver)
    try:
        run = ThreeSteps.start(order_id=1)
        run.pause(reason="a look first")  # its notice is in the outbox, the pump job in Redis
        engine.redis.flushdb()  # Redis lost every job
        assert receiver.received == []
        sweep(engine)  # pumps: the delivery is made, its job sent
        work(engine)
        assert [b["type"] for b in receiver.bodies()] == ["attention_group.opened"]
        engine.redis.flushdb()
        sweep(engine)
        work(engine)
        assert len(receiver.received) == 1
    finally:
        engine.close()


def test_a_message_redis_refused_is_sent_by_the_next_sweep_not_a_minute_later(
        pg_url: str, redis_url: str, clean: None, receiver: Receiver) -> None:
    """A delivery whose job could not be enqueued (Redis down) is known to have none: the first sweep
    after Redis is back sends it, without waiting LOST_AFTER for a job Redis might still hold."""
    engine = hooked(pg_url, redis_url, receiver)
    try:
        run = ThreeSteps.start(order_id=1)
        run.pause(reason="a look first")
        engine.redis.flushdb()
        real = engine.queue

        def refused(name: str) -> Any:
            raise ConnectionError("Redis is down")

        engine.queue = refused  # type: ignore[method-assign]
        notify.pump(engine)  # the delivery is made; its job cannot be enqueued
        engine.queue = real  # type: ignore[method-assign]
        assert receiver.received == [] and notify.recent_deliveries(engine)[0]["status"] == "pending"
        sweep(engine)  # Redis is back: the very next sweep sends it
        wait_until(lambda: work(engine) == 0 and len(receiver.received) == 1, timeout=10,
                   message="the message the sweep sent again")
        assert [b["type"] for b in receiver.bodies()] == ["attention_group.opened"]
    finally:
        engine.close()


def test_a_slack_target_gets_the_sentence_and_a_link(pg_url: str, redis_url: str, clean: None,
                                                     receiver: Receiver) -> None:
    engine = hooked(pg_url, redis_url, receiver, target={"format": "slack", "secret": None})
    try:
        paused_run(engine)
        work(engine)
        [body] = receiver.bodies()
        assert set(body) == {"text"}
        assert body["text"].startswith("1 FailsUntil run needs attention at capture: ")
        assert "<https://ops.example.com/pgbus/runs?workflow_class=FailsUntil" in body["text"]
        assert "|Open in the dashboard>" in body["text"]
        assert "webhook-signature" not in receiver.received[0]["headers"]
    finally:
        engine.close()


def test_run_events_come_one_message_each_to_the_targets_that_want_them(pg_url: str, redis_url: str, clean: None,
                                                                       receiver: Receiver) -> None:
    engine = hooked(pg_url, redis_url, receiver, target={"events": ["run_finished", "step_failed"],
                                                         "classes": ["ThreeSteps", "FailsUntil"]})
    try:
        finished = ThreeSteps.start(order_id=3)
        FailsUntil.start(fail_until=1)  # fails (and pauses: no retries)
        work(engine)
        wait_until(lambda: work(engine) == 0 and len(receiver.received) >= 2, message="two messages")
        types = sorted(b["type"] for b in receiver.bodies())
        assert types == ["run.finished", "step.failed"]  # not the pause: this target did not ask for attention
        by_run = {b["data"]["run_id"]: b for b in receiver.bodies() if b["type"] == "run.finished"}
        assert by_run[str(finished.workflow_id)]["data"]["url"] == f"https://ops.example.com/pgbus/runs/{finished.workflow_id}"
    finally:
        engine.close()


def test_runs_past_their_threshold_are_announced_once_by_the_sweep_at_scale(pg_url: str, redis_url: str, clean: None,
                                                                             receiver: Receiver) -> None:
    """A backlog of 3,000 runs whose steps were due an hour ago, in two groups: one message each."""
    engine = hooked(pg_url, redis_url, receiver, PGBUS_STALL_THRESHOLD=60)
    heard: list[Any] = []

    def count(sender: Any, **fields: Any) -> None:
        heard.append(fields["run_id"])

    try:
        with engine.db.transaction():
            for i in range(1500):
                ThreeSteps.start(order_id=i)
                FailsUntil.start(fail_until=0)
        engine.redis.flushdb()  # their jobs: nobody will run them
        engine_sql(engine, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '1 hour'")
        engine_sql(engine, "UPDATE pgbus_workflows SET attention_since = now() - interval '1 hour'")
        signals.run_needs_attention.connect(count)
        try:
            began = time.perf_counter()
            report = sweep(engine)
            took = time.perf_counter() - began
        finally:
            signals.run_needs_attention.disconnect(count)
        assert report.announced == 3000 and len(set(heard)) == 3000
        wait_until(lambda: work(engine) == 0 and len(receiver.received) == 2, message="two messages")
        data = sorted((b["data"]["workflow_class"], b["data"]["runs"]) for b in receiver.bodies())
        assert data == [("FailsUntil", 1500), ("ThreeSteps", 1500)]
        assert sweep(engine).announced == 0  # announced once
        assert took < 60, took
    finally:
        engine.close()


def test_a_claimed_overdue_run_is_back_to_normal(engine: Engine, listen: dict[str, Any]) -> None:
    run = ThreeSteps.start(order_id=1)
    engine_sql(engine, "UPDATE pgbus_workflows SET attention_since = now() - interval '1 hour'")
    sweep(engine)  # announced past PGBUS_STALL_THRESHOLD
    assert [(n["run_id"], n["reason"]) for n in listen["run-needs-attention"]] == [(str(run.workflow_id), "overdue")]
    work(engine)
    assert [b["run_id"] for b in listen["run-back-to-normal"]] == [str(run.workflow_id)]
    assert [f["run_id"] for f in listen["run-finished"]] == [str(run.workflow_id)]


def engine_sql(engine: Engine, statement: str) -> None:
    with engine.db.connection() as conn:
        conn.execute(statement)


# -- configuration ---------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "says"), [
    ("not json", "not JSON"),
    ([{"url": "ftp://x.example.com", "secret": SECRET}], "url must be an http"),
    ([{"url": "https://x.example.com"}], "needs a secret"),
    ([{"url": "https://x.example.com", "secret": "whsec_short"}], "secret must be"),
    ([{"url": "https://x.example.com", "secret": SECRET, "events": ["everything"]}], "unknown event 'everything'"),
    ([{"url": "https://x.example.com", "secret": SECRET, "colour": "red"}], "unknown field 'colour'"),
    ([{"name": "a", "url": "https://x.example.com", "secret": SECRET},
      {"name": "a", "url": "https://y.example.com", "secret": SECRET}], "two targets are named 'a'"),
])
def test_a_bad_target_fails_at_start_naming_what_is_wrong(value: Any, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Settings.load({"PGBUS_WEBHOOKS": value})
    assert "PGBUS_WEBHOOKS" in str(raised.value) and says in str(raised.value)
    assert "thirty-two" not in str(raised.value) and SECRET not in str(raised.value)


def test_a_target_shows_no_secret_of_its_url() -> None:
    [target] = Settings.load({"PGBUS_WEBHOOKS": json.dumps([
        {"name": "slack", "url": "https://hooks.slack.com/services/T000/B000/XXXX", "format": "slack"}])}).webhooks
    assert target.shown_url == "https://hooks.slack.com/…"
    assert "XXXX" not in repr(target)


def test_the_retry_delays_double_up_to_an_hour() -> None:
    assert [notify.retry_delay(n).total_seconds() for n in (1, 2, 3, 12, 30)] == [5, 10, 20, 3600, 3600]
    assert sum(notify.retry_delay(n).total_seconds() for n in range(1, 40)) > timedelta(days=1).total_seconds()
