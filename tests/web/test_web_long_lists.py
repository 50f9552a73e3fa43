"""A run with many signals, child runs and fan-out batches, and a batch with many children: their
pages, JSON reads and MCP's show_run show 25 at a time with the totals and keyset links to the rest,
and a long payload is cut on the page with all of it one click away."""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from pgbus_flask.handle import PAGE_SIZE, Run
from pgbus_flask.web.views import INLINE_CHARS, PREVIEW_CHARS
from tests.support import work
from tests.support.webtools import count_testid, engine_of, sql, text_of
from tests.workflows import FansOut, ThreeSteps, WaitsForever

MANY = 60


def link(page: str, testid: str) -> str | None:
    found = re.search(rf'<a href="([^"]+)" data-testid="{testid}"', page)
    return found.group(1).replace("&amp;", "&") if found else None


def walk(client: FlaskClient, url: str, older: str, newest: str, ids: str) -> list[list[str]]:
    """Follow the ``older`` links from ``url``: the ids (regex ``ids``) each page shows. Every page but
    the first links back to the newest one."""
    pages: list[list[str]] = []
    next_url: str | None = url
    while next_url:
        page = client.get(next_url).get_data(as_text=True)
        pages.append(re.findall(ids, page))
        assert (link(page, newest) is None) == (len(pages) == 1)
        next_url = link(page, older)
        assert len(pages) <= MANY, "the older links go round in circles"
    return pages


@pytest.fixture
def noisy(app: Flask) -> Run:
    """A run waiting for "go", sent 60 other signals (all pending)."""
    with app.app_context():
        run = WaitsForever.start()
        work(engine_of(app))
        for i in range(MANY):
            run.signal("noise", {"i": i}, idempotency_key=f"noise-{i}")
    return run


SIGNAL_IDS = r'data-testid="signal-row" data-status="\w+" data-id="(\d+)"'


def test_a_run_page_shows_25_signals_with_the_total_and_pages_back_through_all(app: Flask, noisy: Run) -> None:
    client = app.test_client()
    url = f"/pgbus/runs/{noisy.workflow_id}"
    first = client.get(url).get_data(as_text=True)
    assert count_testid(first, "signal-row") == PAGE_SIZE
    assert f"Showing {PAGE_SIZE} of {MANY} signals" in text_of(first)
    pages = walk(client, url, "older-signals", "newest-signals", SIGNAL_IDS)
    stored = [str(s["id"]) for s in noisy.signals()]
    assert [i for page in reversed(pages) for i in page] == stored  # each once, oldest first on every page
    assert pages[0] == stored[-PAGE_SIZE:] and len(pages) == -(-MANY // PAGE_SIZE)
    older = link(first, "older-signals")
    assert older is not None and older.endswith("#h-signals") and "signals_before=" in older
    german = client.get(f"{url}?locale=de").get_data(as_text=True)
    assert f"{PAGE_SIZE} von {MANY} Signalen angezeigt" in text_of(german) and ">Ältere Signale<" in german
    japanese = client.get(f"{url}?locale=ja").get_data(as_text=True)
    assert f"シグナル {MANY} 件中 {PAGE_SIZE} 件を表示" in text_of(japanese) and ">以前のシグナル<" in japanese


def test_a_paged_list_keeps_its_page_when_another_list_pages_or_the_page_refreshes(app: Flask, noisy: Run) -> None:
    client = app.test_client()
    older = link(client.get(f"/pgbus/runs/{noisy.workflow_id}").get_data(as_text=True), "older-signals")
    assert older is not None
    page = client.get(older).get_data(as_text=True)
    shown = re.findall(SIGNAL_IDS, page)
    # a live refresh asks for the same address: the same signals, not the newest ones
    refreshed = client.get(older, headers={"X-Pgbus-Live": "1"}).get_data(as_text=True)
    assert re.findall(SIGNAL_IDS, refreshed) == shown
    # the audit trail's pager keeps the signals where they are
    entries = link(page, "older-entries")
    assert entries is not None and "signals_before=" in entries
    assert re.findall(SIGNAL_IDS, client.get(entries).get_data(as_text=True)) == shown


def test_the_json_api_pages_signals_with_the_same_cursors(app: Flask, noisy: Run) -> None:
    client = app.test_client()
    base = f"/pgbus/api/runs/{noisy.workflow_id}"
    data = client.get(base).get_json()
    assert len(data["signals"]) == PAGE_SIZE and data["signals_total"] == MANY
    seen = [s["id"] for s in data["signals"]]
    cursor = data["older_signals"]
    while cursor:
        data = client.get(f"{base}?signals_before={cursor}").get_json()
        assert data["signals_total"] == MANY
        seen = [s["id"] for s in data["signals"]] + seen
        cursor = data["older_signals"]
    assert seen == [s["id"] for s in noisy.signals()]
    assert [s["payload"] for s in client.get(base).get_json()["signals"]] == [{"i": i} for i in range(35, MANY)]
    bad = client.get(f"{base}?signals_before=-1")
    assert bad.status_code == 400 and "signals_before" in bad.get_json()["error"]


def test_a_run_without_many_signals_has_no_pager_and_no_total(app: Flask) -> None:
    with app.app_context():
        run = WaitsForever.start()
        work(engine_of(app))
        run.signal("noise", 1)
    client = app.test_client()
    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert count_testid(page, "signal-row") == 1 and count_testid(page, "signals-total") == 0
    assert link(page, "older-signals") is None and link(page, "newest-signals") is None
    data = client.get(f"/pgbus/api/runs/{run.workflow_id}").get_json()
    assert data["signals_total"] == 1 and data["older_signals"] is None
    assert (data["children"], data["children_total"], data["batches"], data["batches_total"]) == ([], 0, [], 0)


def test_child_runs_are_paged_with_their_total(app: Flask) -> None:
    from tests.child_workflows import Fulfilment

    with app.app_context():
        parent = Fulfilment.start(parcels=list(range(MANY)))
        work(engine_of(app))
        children = [str(c["workflow_id"]) for c in parent.refresh().children()]
    assert len(children) == MANY and parent.status == "finished"
    client = app.test_client()
    url = f"/pgbus/runs/{parent.workflow_id}"
    first = client.get(url).get_data(as_text=True)
    assert count_testid(first, "child-row") == PAGE_SIZE
    assert f"Showing {PAGE_SIZE} of {MANY} child runs" in text_of(first)
    pages = walk(client, url, "older-children", "newest-children",
                 r'data-testid="child-row" data-status="\w+" data-workflow-id="([0-9a-f-]+)"')
    assert [i for page in reversed(pages) for i in page] == children
    data = client.get(f"/pgbus/api/runs/{parent.workflow_id}").get_json()
    assert data["children_total"] == MANY and len(data["children"]) == PAGE_SIZE
    seen = [c["workflow_id"] for c in data["children"]]
    while data["older_children"]:
        data = client.get(f"/pgbus/api/runs/{parent.workflow_id}?children_before={data['older_children']}").get_json()
        seen = [c["workflow_id"] for c in data["children"]] + seen
    assert seen == children


def test_batches_are_paged_with_their_total(app: Flask) -> None:
    with app.app_context():
        run = FansOut.start(n=2)
        work(engine_of(app))
    # 29 more batches, as 29 more attempts of a fan-out step would have left
    sql(app, "INSERT INTO pgbus_batches (workflow_id, step_id, step_name, func, queue, on_child_failure, status,"
             " total, done, failed) SELECT workflow_id, step_id, step_name, func, queue, on_child_failure, status,"
             " total, done, failed FROM pgbus_batches, generate_series(1, 29) WHERE workflow_id = %s",
        run.workflow_id)
    batches = [str(b["id"]) for b in run.batches()]
    assert len(batches) == 30
    client = app.test_client()
    url = f"/pgbus/runs/{run.workflow_id}"
    first = client.get(url).get_data(as_text=True)
    assert count_testid(first, "batch-link") == PAGE_SIZE and f"Showing {PAGE_SIZE} of 30 batches" in text_of(first)
    pages = walk(client, url, "older-batches", "newest-batches",
                 r'data-testid="batch-link"><a href="/pgbus/batches/(\d+)"')
    assert [i for page in reversed(pages) for i in page] == batches
    data = client.get(url.replace("/runs/", "/api/runs/")).get_json()
    assert data["batches_total"] == 30 and [str(b["id"]) for b in data["batches"]] == batches[-PAGE_SIZE:]


def test_a_batch_page_shows_25_children_at_a_time(app: Flask) -> None:
    with app.app_context():
        run = FansOut.start(n=MANY)
        work(engine_of(app))
    [batch] = Run(engine_of(app), run.workflow_id).batches()
    client = app.test_client()
    url: str | None = f"/pgbus/batches/{batch['id']}"
    first = client.get(url).get_data(as_text=True)  # type: ignore[arg-type]
    assert count_testid(first, "batch-child") == PAGE_SIZE
    assert f"Showing {PAGE_SIZE} of {MANY} child jobs" in text_of(first)
    numbers: list[int] = []
    pages = 0
    while url:
        page = client.get(url).get_data(as_text=True)
        pages += 1
        assert (link(page, "first-children") is None) == (pages == 1)
        numbers += [int(n) for n in re.findall(r'data-testid="batch-child" data-status="\w+">\s*'
                                               r'<td class="num">(\d+)</td>', page)]
        url = link(page, "next-children")
    assert numbers == list(range(1, MANY + 1)) and pages == -(-MANY // PAGE_SIZE)
    api = f"/pgbus/api/batches/{batch['id']}"
    data = client.get(api).get_json()
    positions = [c["position"] for c in data["children"]]
    while data["next_after"] is not None:
        data = client.get(f"{api}?after={data['next_after']}").get_json()
        positions += [c["position"] for c in data["children"]]
    assert positions == list(range(MANY))
    assert client.get(f"{api}?after=x").status_code == 400


def test_long_payloads_are_cut_with_all_of_them_a_click_away(app: Flask) -> None:
    medium = {"note": "m" * 600}  # longer than a preview, short enough to carry whole
    large = {"blob": secrets.token_hex(40_000)}  # 80,000 characters: stored larger than a page reads
    huge = {"blob": secrets.token_hex(200_000)}  # stored larger than a page reads even the start of
    with app.app_context():
        run = WaitsForever.start()
        work(engine_of(app))
        small_id = run.signal("noise", {"x": 1}).id
        medium_id = run.signal("noise", medium).id
        large_id = run.signal("noise", large).id
        huge_id = run.signal("noise", huge).id
    client = app.test_client()
    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    rows = {int(m.group(1)): m.group(2) for m in
            re.finditer(r'data-testid="signal-row" data-status="\w+" data-id="(\d+)">(.*?)</tr>', page, re.S)}
    assert "Show all" not in rows[small_id] and "&#34;x&#34;: 1" in rows[small_id]
    # the medium one: its start, then all of it in a disclosure (no script needed)
    assert 'data-testid="signal-value-more">Show all</summary>' in rows[medium_id]
    assert rows[medium_id].count("m" * 600) == 1 and "m" * (PREVIEW_CHARS + 10) not in rows[medium_id].split(
        "<details")[0]
    # the large one: its start, and a link to its own JSON read
    assert large["blob"] not in page and large["blob"][:100] in rows[large_id]
    whole = re.search(r'<a href="([^"]+)" class="json-whole" data-testid="signal-value-link">Show all</a>',
                      rows[large_id])
    assert whole is not None
    one = client.get(whole.group(1))
    assert one.status_code == 200 and one.get_json()["signal"]["payload"] == large
    assert len(page) < 60_000
    # the huge one: no start at all (reading it would cost reading all of it), only the link
    assert re.search(r'data-testid="signal-value">…</pre>\s*<a href="([^"]+)" class="json-whole"', rows[huge_id])
    assert client.get(f"/pgbus/api/runs/{run.workflow_id}/signals/{huge_id}").get_json()["signal"]["payload"] == huge
    missing = client.get(f"/pgbus/api/runs/{run.workflow_id}/signals/999999")
    assert missing.status_code == 404 and "999999" in missing.get_json()["error"]
    # the JSON read of the run carries every payload whole
    data = client.get(f"/pgbus/api/runs/{run.workflow_id}").get_json()
    assert [s["payload"] for s in data["signals"]] == [{"x": 1}, medium, large, huge]


def test_a_fan_out_step_s_long_output_is_cut_on_the_run_page_and_whole_a_link_away(app: Flask) -> None:
    """A fan-out step's output holds every child's result (5,000 here): the run page shows its start
    under the step's name and links to its JSON read, which has all of it; a short output shows whole."""
    results = [f"result {i:05d}" for i in range(5_000)]
    with app.app_context():
        run = ThreeSteps.start(order_id=21)
        work(engine_of(app))
    sql(app, "UPDATE pgbus_workflow_steps SET output = %s::jsonb WHERE workflow_id = %s AND step_name = 'reserve'",
        json.dumps(results), run.workflow_id)
    client = app.test_client()
    page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    outputs = re.search(r'data-testid="outputs">(.*?)</section>', page, re.S)
    assert outputs is not None
    assert "result 00000" in outputs.group(1) and "result 04999" not in page
    link = re.search(r'<a href="([^"]+)" class="json-whole" data-testid="output-value-link">Show all</a>',
                     outputs.group(1))
    assert link is not None and link.group(1) == f"/pgbus/api/runs/{run.workflow_id}/outputs/reserve"
    assert "shipped 42" in outputs.group(1), "the short outputs are shown whole"
    assert len(page) < 60_000
    whole = client.get(link.group(1))
    assert whole.status_code == 200 and whole.get_json() == {"step_name": "reserve", "output": results}
    missing = client.get(f"/pgbus/api/runs/{run.workflow_id}/outputs/nowhere")
    assert missing.status_code == 404 and "nowhere" in missing.get_json()["error"]


def test_long_fan_out_arguments_and_results_are_cut_on_the_batch_page(app: Flask) -> None:
    with app.app_context():
        run = FansOut.start(n=2)
        work(engine_of(app))
    [batch] = Run(engine_of(app), run.workflow_id).batches()
    large = secrets.token_hex(40_000)
    sql(app, "UPDATE pgbus_batch_children SET args = %s::jsonb, result = %s::jsonb WHERE batch_id = %s"
             " AND position = 1", json.dumps([large]), json.dumps("r" * (INLINE_CHARS // 2)), batch["id"])
    client = app.test_client()
    page = client.get(f"/pgbus/batches/{batch['id']}").get_data(as_text=True)
    assert large not in page and large[:100] in page and count_testid(page, "child-args-link") == 1
    assert count_testid(page, "child-result-more") == 1
    whole = link(page.replace(' class="json-whole"', ""), "child-args-link")
    assert whole == f"/pgbus/api/batches/{batch['id']}/children/1"
    child = client.get(whole).get_json()["child"]
    assert child["args"] == [large] and child["position"] == 1
    assert client.get(f"/pgbus/api/batches/{batch['id']}/children/7").status_code == 404


@pytest.mark.slow  # starts a process
def test_show_run_pages_signals_children_and_batches_with_their_totals(noisy: Run, pg_url: str,
                                                                     redis_url: str) -> None:
    from tests.support.doors import ok, server_env, talk

    stored = [s["id"] for s in noisy.signals()]

    async def body(client: Any) -> None:
        data, text = await ok(client, "show_run", {"workflow_id": str(noisy.workflow_id)})
        assert data["signals_total"] == MANY and [s["id"] for s in data["signals"]] == stored[-PAGE_SIZE:]
        assert (data["children_total"], data["batches_total"]) == (0, 0)
        assert f"{PAGE_SIZE} of {MANY} signals" in text and f"signals_before={data['older_signals']}" in text
        seen = [s["id"] for s in data["signals"]]
        while data["older_signals"]:
            data, _ = await ok(client, "show_run", {"workflow_id": str(noisy.workflow_id),
                                                    "signals_before": data["older_signals"]})
            seen = [s["id"] for s in data["signals"]] + seen
        assert seen == stored

    talk(server_env(pg_url, redis_url, write=False), body)
