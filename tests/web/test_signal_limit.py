"""PGBUS_MAX_PENDING_SIGNALS: a run holds at most so many pending signals; past it every door (the
Python API, the dashboard's form, the CLI, MCP's send_signal) refuses the signal, says why, and
stores nothing, while a redelivery of a stored signal is still answered as a duplicate."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from flask import Flask

from pgbus_flask import ConfigError, TooManyPendingSignals, Workflow, step
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.handle import Run
from tests.support import work
from tests.support.webtools import csrf, engine_of, text_of
from tests.workflows import WaitsForever

LIMIT = 3


def counts(run: Run) -> tuple[int, int]:
    """(signals stored, signal_received events) of ``run``."""
    received = sum(1 for e in run.events() if e["event"] == "signal_received")
    return len(run.signals()), received


class WaitsTwice(Workflow):
    @step(wait_for="go")
    def first(self) -> Any:
        return None

    @step(wait_for="go")
    def second(self) -> Any:
        return None


@pytest.mark.settings(PGBUS_MAX_PENDING_SIGNALS=LIMIT)
def test_past_the_limit_a_signal_is_refused_and_nothing_is_stored(engine: Engine) -> None:
    run = WaitsTwice.start()
    work(engine)
    for i in range(LIMIT):
        run.signal("noise", i, idempotency_key=f"k{i}")
    before = counts(run)
    with pytest.raises(TooManyPendingSignals) as refused:
        run.signal("noise", "one too many")
    message = str(refused.value)
    assert str(run.workflow_id) in message and "PGBUS_MAX_PENDING_SIGNALS" in message
    assert f"already holds {LIMIT} pending signals" in message
    assert (refused.value.workflow_id, refused.value.limit) == (run.workflow_id, LIMIT)
    assert counts(run) == before
    # a signal the waiting step would take is refused too: the run holds its limit
    with pytest.raises(TooManyPendingSignals):
        run.signal("go", None)
    # a redelivery of a stored signal is answered as one, not refused
    again = run.signal("noise", "whatever", idempotency_key="k1")
    assert again.duplicate_delivery and again.payload == 1
    assert counts(run) == before


@pytest.mark.settings(PGBUS_MAX_PENDING_SIGNALS=LIMIT)
def test_claimed_and_consumed_signals_do_not_count(engine: Engine) -> None:
    run = WaitsTwice.start()
    work(engine)
    run.signal("go", 1)  # taken by the waiting step, which then ends: consumed
    work(engine)
    run.signal("go", 2)  # taken by the second one, not run yet: claimed
    assert [s["status"] for s in run.signals()] == ["consumed", "claimed"] and run.refresh().status == "ready"
    for i in range(LIMIT):
        run.signal("noise", i)
    with pytest.raises(TooManyPendingSignals):
        run.signal("noise", "one too many")
    assert len(run.signals()) == 2 + LIMIT


@pytest.mark.settings(PGBUS_MAX_PENDING_SIGNALS=LIMIT)
def test_signals_sent_at_once_never_pass_the_limit(engine: Engine) -> None:
    run = WaitsForever.start()
    work(engine)
    start = threading.Barrier(8)
    outcomes: list[str] = []

    def send(i: int) -> None:
        start.wait()
        try:
            run.signal("noise", i)
            outcomes.append("stored")
        except TooManyPendingSignals:
            outcomes.append("refused")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(outcomes) == ["refused"] * 5 + ["stored"] * 3
    assert len(run.signals()) == LIMIT


@pytest.mark.parametrize("value", [0, -1, "many"])
def test_the_limit_is_a_positive_whole_number(value: Any) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.load({"PGBUS_MAX_PENDING_SIGNALS": value})
    assert str(refused.value).startswith("PGBUS_MAX_PENDING_SIGNALS ")
    assert Settings.load({}).max_pending_signals == 1_000


@pytest.mark.settings(PGBUS_MAX_PENDING_SIGNALS=LIMIT)
def test_the_dashboard_says_why_with_a_409_and_keeps_the_form(app: Flask) -> None:
    with app.app_context():
        run = WaitsForever.start()
        work(engine_of(app))
        for i in range(LIMIT):
            run.signal("noise", i)
    before = counts(run)
    client = app.test_client()
    token = csrf(client)
    form = {"csrf_token": token, "name": "go", "payload": '{"paid": true}', "reason": "bank says paid"}
    response = client.post(f"/pgbus/runs/{run.workflow_id}/signals", data=form)
    assert response.status_code == 409
    page = response.get_data(as_text=True)
    assert (f"Nothing was stored: this run already holds {LIMIT} pending signals, the most "
            "PGBUS_MAX_PENDING_SIGNALS allows. A signal stays pending until a step waiting for its name takes it."
            in text_of(page))
    assert 'data-testid="error-message"' in page and "{&#34;paid&#34;: true}</textarea>" in page
    assert counts(run) == before
    german = client.post(f"/pgbus/runs/{run.workflow_id}/signals?locale=de", data=form)
    assert german.status_code == 409 and "PGBUS_MAX_PENDING_SIGNALS" in text_of(german.get_data(as_text=True))
    assert "Nothing was stored" not in text_of(german.get_data(as_text=True))


def fill_to_the_default_limit(app: Flask, run: Run) -> None:
    """1,000 pending signals, as many webhooks would have left (PGBUS_MAX_PENDING_SIGNALS's default)."""
    url = engine_of(app).settings.database_url
    assert url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO pgbus_workflow_signals (workflow_id, name, payload, idempotency_key, status,"
                     " sent_by) SELECT %s, 'noise', to_jsonb(i), 'hook-' || i, 'pending', 'app'"
                     " FROM generate_series(1, 1000) i", (run.workflow_id,))


def test_the_cli_says_why_and_exits_1(app: Flask) -> None:
    from tests.support.doors import invoke

    with app.app_context():
        run = WaitsForever.start()
        work(engine_of(app))
    fill_to_the_default_limit(app, run)
    code, out = invoke(app, "signal", str(run.workflow_id), "go", "--payload", "1")
    assert code == 1 and "already holds 1,000 pending signals" in out and "PGBUS_MAX_PENDING_SIGNALS" in out
    assert len(run.signals()) == 1_000
    code, out = invoke(app, "signal", str(run.workflow_id), "noise", "--key", "hook-7")
    assert code == 0 and "duplicate delivery" in out


@pytest.mark.slow  # starts a process
def test_mcp_send_signal_says_why(app: Flask, pg_url: str, redis_url: str) -> None:
    from tests.support.doors import cli_error, ok, refused, server_env, talk

    with app.app_context():
        run = WaitsForever.start()
        work(engine_of(app))
    fill_to_the_default_limit(app, run)

    async def body(client: Any) -> None:
        args = {"workflow_id": str(run.workflow_id), "name": "go", "reason": "paid"}
        text = await refused(client, "send_signal", args)
        assert "already holds 1,000 pending signals" in text and "PGBUS_MAX_PENDING_SIGNALS" in text
        assert text == cli_error(app, "signal", str(run.workflow_id), "go", "--reason", "paid")
        data, _ = await ok(client, "send_signal", {**args, "name": "noise", "idempotency_key": "hook-3"})
        assert data["signal"]["duplicate_delivery"] is True

    talk(server_env(pg_url, redis_url, write=True), body)
    assert len(run.signals()) == 1_000
