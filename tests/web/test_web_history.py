"""A run with a long history: its page and its JSON show the newest attempts and audit events,
with links to older ones, and its timeline is drawn from an aggregate of its attempts."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from pgbus_flask import runner
from pgbus_flask.handle import PAGE_SIZE
from pgbus_flask.web.timeline import MAX_BARS
from tests.support import work
from tests.support.webtools import count_testid, engine_of, text_of
from tests.workflows import FailsUntil

ATTEMPTS = 60


@pytest.fixture
def long_run(app: Flask) -> Any:
    """A FailsUntil run paused and resumed until it has 60 failed attempts of capture (each attempt
    run in this process, as a worker would)."""
    engine = engine_of(app)
    with app.app_context():
        run = FailsUntil.start(fail_until=999)
        for _ in range(ATTEMPTS):
            runner.run_attempt(engine, run.refresh().latest_step["id"])  # type: ignore[index]
            if run.refresh().attempt_count() < ATTEMPTS:
                run.resume(actor="cli:ops", reason="once more")
        assert run.refresh().status == "paused"
        return run


def attempt_numbers(page: str) -> list[int]:
    return [int(n) for n in re.findall(r'data-testid="attempt-row" data-step="capture" data-attempt="(\d+)"', page)]


def link(page: str, testid: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)" data-testid="{testid}"', page)
    return found.group(1).replace("&amp;", "&") if found else None


def test_the_newest_attempts_first_then_older_ones(app: Flask, long_run: Any) -> None:
    client = app.test_client()
    url: str | None = f"/pgbus/runs/{long_run.workflow_id}"
    pages: list[list[int]] = []
    while url:
        page = client.get(url).get_data(as_text=True)
        pages.append(attempt_numbers(page))
        assert (link(page, "newest-attempts") is None) == (len(pages) == 1)
        url = link(page, "older-attempts")
        assert url is None or ("steps_before=" in url and url.endswith("#h-steps"))
    assert pages[0] == list(range(ATTEMPTS - PAGE_SIZE + 1, ATTEMPTS + 1))  # the newest, oldest first on a page
    assert [n for numbers in reversed(pages) for n in numbers] == list(range(1, ATTEMPTS + 1))
    assert len(pages) == -(-ATTEMPTS // PAGE_SIZE)


def test_the_audit_trail_pages_back_to_the_start(app: Flask, long_run: Any) -> None:
    client: FlaskClient = app.test_client()
    total = len(long_run.events())
    assert total > 2 * PAGE_SIZE
    url: str | None = f"/pgbus/runs/{long_run.workflow_id}"
    seen: list[str] = []
    pages = 0
    first = client.get(url).get_data(as_text=True)
    while url:
        page = client.get(url).get_data(as_text=True)
        entries = re.findall(r'data-testid="audit-entry" data-event="(\w+)"', page)
        assert 0 < len(entries) <= PAGE_SIZE
        seen += entries
        pages += 1
        if pages > 1:
            assert link(page, "newest-entries") is not None
        url = link(page, "older-entries")
    assert len(seen) == total and pages == -(-total // PAGE_SIZE)
    assert seen[-len(entries)] == "started"  # the last page opens with the run's start: each reads oldest first
    in_order = [int(n) for n in re.findall(r'data-testid="audit-entry" data-event="\w+" data-id="(\d+)"', first)]
    assert in_order == sorted(in_order) and len(in_order) == PAGE_SIZE
    assert "<ol" not in first[first.index('data-testid="audit-trail"') - 40:], "a page of the trail is not numbered"


def test_the_timeline_of_many_attempts_is_an_aggregate(app: Flask, long_run: Any) -> None:
    assert ATTEMPTS > MAX_BARS
    page = app.test_client().get(f"/pgbus/runs/{long_run.workflow_id}").get_data(as_text=True)
    assert count_testid(page, "timeline-bar") == 2  # capture, and the run's paused stretches
    assert f"{ATTEMPTS} attempts in all: each stretch of a bar shows how most of the attempts" in text_of(page)
    assert re.search(r"<title>capture: \d+ attempts \(Failed: \d+\)", page)
    german = app.test_client().get(f"/pgbus/runs/{long_run.workflow_id}?locale=de").get_data(as_text=True)
    assert f"{ATTEMPTS} Versuche insgesamt" in text_of(german)
    assert ">Ältere Versuche<" in german and ">Ältere Einträge<" in german
    japanese = app.test_client().get(f"/pgbus/runs/{long_run.workflow_id}?locale=ja").get_data(as_text=True)
    assert f"試行は全部で {ATTEMPTS} 件です" in text_of(japanese) and ">以前の試行<" in japanese


def test_the_json_api_pages_the_same_way(app: Flask, long_run: Any) -> None:
    client = app.test_client()
    data = client.get(f"/pgbus/api/runs/{long_run.workflow_id}").get_json()
    assert [s["attempt"] for s in data["steps"]] == list(range(ATTEMPTS - PAGE_SIZE + 1, ATTEMPTS + 1))
    assert data["older_steps"] is not None and len(data["events"]) == PAGE_SIZE
    attempts, events = [s["attempt"] for s in data["steps"]], [e["id"] for e in data["events"]]
    cursor = data["older_steps"]
    while cursor:
        data = client.get(f"/pgbus/api/runs/{long_run.workflow_id}?steps_before={cursor}").get_json()
        attempts = [s["attempt"] for s in data["steps"]] + attempts
        cursor = data["older_steps"]
    cursor = client.get(f"/pgbus/api/runs/{long_run.workflow_id}").get_json()["older_events"]
    while cursor:
        data = client.get(f"/pgbus/api/runs/{long_run.workflow_id}?events_before={cursor}").get_json()
        assert data["events"][-1]["id"] < events[0]
        events = [e["id"] for e in data["events"]] + events
        cursor = data["older_events"]
    assert attempts == list(range(1, ATTEMPTS + 1))
    assert events == [e["id"] for e in long_run.events()]
    bad = client.get(f"/pgbus/api/runs/{long_run.workflow_id}?steps_before=abc")
    assert bad.status_code == 400 and "steps_before" in bad.get_json()["error"]


def test_a_short_run_keeps_one_bar_per_attempt_and_no_pager(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert count_testid(page, "timeline-bar") == 2  # capture #1, and the paused stretch
    assert 'data-testid="timeline-aggregate"' not in page
    for testid in ("older-attempts", "newest-attempts", "older-entries", "newest-entries"):
        assert link(page, testid) is None


def test_a_text_search_reads_a_window_of_runs_a_page_and_pages_on(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    """A piece of a subject is searched TEXT_WINDOW runs a page: a page that read its window without
    a match says so and links to the runs before; paging on finds the old run once, and a whole run
    id finds its run at once, however old."""
    from pgbus_flask import queries
    from tests.workflows import ThreeSteps

    monkeypatch.setattr(queries, "TEXT_WINDOW", 3)
    with app.app_context():
        old = ThreeSteps.start(order_id=1, subject=("Invoice", "INV-7"))
        for i in range(7):
            ThreeSteps.start(order_id=i, subject=("Order", 100 + i))
    client = app.test_client()
    url: str | None = "/pgbus/runs?text=inv-7"
    found: list[str] = []
    pages = 0
    while url:
        page = client.get(url).get_data(as_text=True)
        pages += 1
        found += re.findall(r'data-testid="run-row" data-workflow-id="([^"]+)"', page)
        url = link(page, "next-page")
        if url:
            assert 'data-testid="text-window"' in page and "reads 3 runs a page" in text_of(page)
    assert found == [str(old.workflow_id)] and pages == 3
    german = client.get("/pgbus/runs?text=inv-7&locale=de").get_data(as_text=True)
    assert "Eine Textsuche liest 3 Läufe pro Seite" in text_of(german)
    whole = client.get(f"/pgbus/runs?text={str(old.workflow_id).upper()}").get_data(as_text=True)
    assert re.findall(r'data-testid="run-row" data-workflow-id="([^"]+)"', whole) == [str(old.workflow_id)]
    assert link(whole, "next-page") is None
