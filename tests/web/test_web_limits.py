"""What operators see of flow control: the next-step sentence of a run in line for a limit or a rate (run
page, runs list, JSON API, MCP), the Limits page and its overview card, ``/api/limits``, the MCP tool
``list_limits`` and the Prometheus gauges by limit name.

The runs are put in line by claiming their steps as a step job does (``runner.claim_attempt``): a claim
takes a slot and holds it (its step's code is never run here), and a claim past the limit puts its step in
line, its run waiting. No worker races the test.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from flask import Flask
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql as pgsql

from pgbus_flask import queries, runner
from pgbus_flask.engine import Engine
from pgbus_flask.handle import Run
from pgbus_flask.mcp_server.server import McpServer
from pgbus_flask.present import english
from pgbus_flask.present.sentences import capacity_text, rate_text
from pgbus_flask.present.words import words_for, zone
from pgbus_flask.sql import statement
from pgbus_flask.web.live import HEADER
from tests.flow_workflows import RateLimited, Refund, TenantSync
from tests.support.seeds import BIG_TABLES, nodes
from tests.support.webtools import CLOCK, count_testid, engine_of, text_of
from tests.workflows import ThreeSteps

#: "for 3 seconds", "for 1 minute": how long a run has been in line.
SPAN = r"\d+ (?:seconds?|minutes?)"


def claim(engine: Engine, run: Run) -> Any:
    """Claim the run's latest step as its job would: a slot taken (or the step put in line)."""
    return runner.claim_attempt(engine, int(run.refresh().steps()[-1]["id"]), None)


def header_of(page: str) -> str:
    found = re.search(r'data-testid="next-step">(.*?)</p>', page, re.S)
    assert found, page
    return text_of(found.group(1))


def row_of(page: str, workflow_id: Any) -> str:
    found = re.search(rf'<tr[^>]*data-workflow-id="{workflow_id}".*?</tr>', page, re.S)
    assert found, workflow_id
    return found.group(0)


def limit_row(page: str, name: str, kind: str) -> str:
    found = re.search(rf'<tr data-testid="limit-row" data-name="{re.escape(name)}" data-kind="{kind}">.*?</tr>',
                      page, re.S)
    assert found, (name, kind)
    return found.group(0)


def cell(row: str, testid: str) -> str:
    found = re.search(rf'<td[^>]*data-testid="{testid}">(.*?)</td>', row, re.S)
    assert found, testid
    return text_of(found.group(1))


def tenants(app: Flask) -> dict[str, list[Run]]:
    """Tenant 42: 2 runs holding TenantSync's 2 slots and 3 in line; tenant 7: 1 run holding a slot."""
    engine = engine_of(app)
    with app.app_context():
        runs = {"42": [TenantSync.start(tenant=42) for _ in range(5)], "7": [TenantSync.start(tenant=7)]}
    for group in runs.values():
        for run in group:
            claim(engine, run)
    return runs


def refunds(app: Flask) -> list[Run]:
    """Three Refund runs: the first holds the one "stripe" slot, the other two wait in line."""
    engine = engine_of(app)
    with app.app_context():
        runs = [Refund.start() for _ in range(3)]
    for run in runs:
        claim(engine, run)
    return runs


def rated(app: Flask) -> list[Run]:
    """Seven RateLimited runs: five start within the rate's second ("test-api", 5 a second), two wait (and
    every claim after the first in line queues behind it)."""
    engine = engine_of(app)
    with app.app_context():
        runs = [RateLimited.start() for _ in range(7)]
    for run in runs:
        claim(engine, run)
    return runs


# -- the next-step sentence -------------------------------------------------------------------------------


def test_a_run_in_line_for_its_class_limit_says_for_which_key_and_how_busy_it_is(app: Flask) -> None:
    runs = tenants(app)
    assert [r.refresh().status for r in runs["42"]] == ["running", "running", "waiting", "waiting", "waiting"]
    waiting = runs["42"][3]
    client = app.test_client()
    page = client.get(f"/pgbus/runs/{waiting.workflow_id}").get_data(as_text=True)
    expected = (rf"Waiting for a slot: TenantSync runs at most 2 at once for key 42 \(2 running, 3 waiting\), "
                rf"for {SPAN}\.")
    assert re.fullmatch(expected, header_of(page)), header_of(page)
    assert '<code class="pgbus-code" dir="ltr">TenantSync</code>' in page and "<bdi>42</bdi>" in page
    assert 'data-testid="status-badge" data-value="waiting"' in page

    data = client.get(f"/pgbus/api/runs/{waiting.workflow_id}").get_json()
    p = data["presentation"]
    assert p["key"] == "waiting_slot" and re.fullmatch(expected, p["sentence"]), p
    assert {k: p["args"][k] for k in ("limit", "kind", "key", "capacity", "running", "waiting")} == {
        "limit": "TenantSync", "kind": "run", "key": "42", "capacity": 2, "running": 2, "waiting": 3}
    assert "limit_line" not in data["run"]

    # The runs list says the same of each run in line (one read for the whole page), and nothing of the others.
    listed = client.get("/pgbus/runs?workflow_class=TenantSync").get_data(as_text=True)
    for run in runs["42"][2:]:
        assert re.search(expected, text_of(row_of(listed, run.workflow_id))), text_of(row_of(listed, run.workflow_id))
    assert "Waiting for a slot" not in text_of(row_of(listed, runs["7"][0].workflow_id))
    api_runs = client.get("/pgbus/api/runs?status=waiting").get_json()["runs"]
    assert len(api_runs) == 3 and all(re.fullmatch(expected, r["presentation"]["sentence"]) for r in api_runs)
    assert all("limit_line" not in r for r in api_runs)
    assert {r["latest_step"]["blocked_on"] for r in api_runs} == {"TenantSync"}


def test_a_step_limit_without_a_key_names_no_key(app: Flask) -> None:
    runs = refunds(app)
    assert [r.refresh().status for r in runs] == ["running", "waiting", "waiting"]
    page = app.test_client().get(f"/pgbus/runs/{runs[2].workflow_id}").get_data(as_text=True)
    assert re.fullmatch(rf"Waiting for a slot: stripe allows 1 at once \(1 running, 2 waiting\), for {SPAN}\.",
                        header_of(page)), header_of(page)


def test_a_rate_limited_run_says_when_its_step_starts(app: Flask) -> None:
    runs = rated(app)
    statuses = [r.refresh().status for r in runs]
    # two wait, unless claiming took longer than the rate's second (the window moved on meanwhile)
    assert statuses.count("waiting") >= 1, statuses
    waiting = next(r for r in runs if r.status == "waiting")
    page = app.test_client().get(f"/pgbus/runs/{waiting.workflow_id}").get_data(as_text=True)
    sentence = header_of(page)
    assert re.fullmatch(rf"Rate-limited: test-api allows 5 a second; call starts at {CLOCK}\.", sentence), sentence
    with engine_of(app).db.connection() as conn:
        row = conn.execute("SELECT wake_at FROM pgbus_limits WHERE kind = 'rate' AND name = 'test-api'").fetchone()
    assert row is not None and row[0] is not None
    assert f'<time datetime="{row[0].astimezone(zone("UTC")).isoformat()}"' in page, "the wake-up's moment"
    data = app.test_client().get(f"/pgbus/api/runs/{waiting.workflow_id}").get_json()["presentation"]
    assert data["key"] == "waiting_rate" and data["sentence"] == sentence


@pytest.mark.settings(PGBUS_TIMEZONE="Asia/Tokyo")
def test_the_rate_s_moment_is_in_the_viewer_s_timezone_and_language(app: Flask) -> None:
    runs = rated(app)
    waiting = next(r for r in runs if r.refresh().status == "waiting")
    with engine_of(app).db.connection() as conn:
        conn.execute("UPDATE pgbus_limits SET wake_at = '2030-01-02 03:04:05+00' WHERE kind = 'rate'")
    page = app.test_client().get(f"/pgbus/runs/{waiting.workflow_id}?locale=de").get_data(as_text=True)
    # 03:04 UTC is 12:04 in Tokyo, on another day than today: the date is said too.
    assert "12:04" in header_of(page) and "02.01.2030" in header_of(page), header_of(page)


def test_a_line_nothing_declares_any_more_still_names_its_limit(app: Flask) -> None:
    runs = refunds(app)
    with engine_of(app).db.connection() as conn:
        conn.execute("DELETE FROM pgbus_limits WHERE name = 'stripe'")
    sentence = header_of(app.test_client().get(f"/pgbus/runs/{runs[1].workflow_id}").get_data(as_text=True))
    assert re.fullmatch(rf"Waiting for a slot of stripe at refund, for {SPAN}\.", sentence), sentence


def test_rates_and_capacities_in_words() -> None:
    en = english()
    assert [rate_text(en, n, per) for n, per in ((10, 1), (100, 60), (600, 3600), (1, 1), (5000, 86400))] == [
        "10 a second", "100 a minute", "600 an hour", "1 a second", "5,000 a day"]
    assert [rate_text(en, n, per) for n, per in ((10, 30), (3, 120), (2, 1.5), (1, 7200))] == [
        "10 every 30 seconds", "3 every 2 minutes", "2 every 1.5 seconds", "1 every 2 hours"]
    assert capacity_text(en, "run", 2, None) == "2 at once" and capacity_text(en, "rate", 10, 1.0) == "10 a second"
    german = words_for("de", zone("UTC"))
    assert german.period(30) == "30 Sekunden" and german.period(120) == "2 Minuten"
    assert rate_text(german, 5000, 86400) == "5.000 pro Tag", "a count grouped as German groups numbers"


# -- the Limits page, its card, the JSON API ------------------------------------------------------------------


def test_the_limits_page_shows_each_limit_and_rate_with_its_busiest_keys(app: Flask) -> None:
    tenants(app)
    refunds(app)
    rated(app)
    client = app.test_client()
    page = client.get("/pgbus/limits").get_data(as_text=True)
    assert count_testid(page, "limit-row") == 3 and 'aria-current="page">Limits</a>' in page

    sync = limit_row(page, "TenantSync", "run")
    assert [cell(sync, t) for t in ("limit-kind", "limit-capacity", "limit-keys", "limit-in-use", "limit-waiting")] \
        == ["Class limit", "2 at once", "2", "3", "3"]
    assert [text_of(li) for li in re.findall(r'<li data-testid="busiest-key".*?</li>', sync, re.S)] == [
        "42: 2 in use, 3 waiting", "7: 1 in use, 0 waiting"]

    stripe = limit_row(page, "stripe", "step")
    assert [cell(stripe, t) for t in ("limit-kind", "limit-capacity", "limit-keys", "limit-in-use", "limit-waiting")] \
        == ["Step limit", "1 at once", "1", "1", "2"]
    assert "no key: 1 in use, 2 waiting" in text_of(stripe)

    rate = limit_row(page, "test-api", "rate")
    assert [cell(rate, t) for t in ("limit-kind", "limit-capacity", "limit-keys")] == ["Rate", "5 a second", "—"]
    in_use, waiting = int(cell(rate, "limit-in-use")), cell(rate, "limit-waiting")
    assert 0 <= in_use <= 5 and re.fullmatch(rf"\d+ next start at {CLOCK}", waiting), waiting
    assert 'data-testid="busiest-key"' not in rate

    # a live page: a refresh answers its one region, with the same rows
    assert re.findall(r'data-live="([a-z]+)"', page) == ["limits"] and '<body data-live-interval=' in page
    refresh = client.get("/pgbus/limits", headers={HEADER: "1"}).get_data(as_text=True)
    assert re.findall(r'data-live="([a-z]+)"', refresh) == ["limits"] and count_testid(refresh, "limit-row") == 3

    api = client.get("/pgbus/api/limits").get_json()
    assert api["busiest_keys"] == queries.BUSIEST_KEYS == 5
    by_name = {(item["name"], item["kind"]): item for item in api["limits"]}
    assert set(by_name) == {("TenantSync", "run"), ("stripe", "step"), ("test-api", "rate")}
    assert {k: by_name[("TenantSync", "run")][k] for k in ("capacity", "capacity_text", "keys", "in_use", "waiting",
                                                           "busiest", "per_seconds")} == {
        "capacity": 2, "capacity_text": "2 at once", "keys": 2, "in_use": 3, "waiting": 3, "per_seconds": None,
        "busiest": [{"key": "42", "in_use": 2, "waiting": 3}, {"key": "7", "in_use": 1, "waiting": 0}]}
    api_rate = by_name[("test-api", "rate")]
    assert (api_rate["capacity_text"], api_rate["per_seconds"], api_rate["keys"], api_rate["busiest"]) == (
        "5 a second", 1.0, None, [])
    assert api_rate["waiting"] >= 1 and api_rate["wake_at"] is not None
    german = client.get("/pgbus/api/limits?locale=de").get_json()
    assert [i["name"] for i in german["limits"]] == [i["name"] for i in api["limits"]]


def test_the_busiest_keys_are_capped_and_ordered(app: Flask) -> None:
    engine = engine_of(app)
    with app.app_context():
        runs = [TenantSync.start(tenant=t) for t in range(8) for _ in range(1 + t % 4)]
    for run in runs:
        claim(engine, run)
    [use] = [u for u in queries.limits(engine) if u.name == "TenantSync"]
    # tenants 0 and 4 have 1 run, 1 and 5 have 2, 2 and 6 have 3, 3 and 7 have 4: 2 run, the others wait
    assert (use.keys, use.in_use, use.waiting) == (8, 14, 6)
    assert [(k.key, k.in_use, k.waiting) for k in use.busiest] == [
        ("3", 2, 2), ("7", 2, 2), ("2", 2, 1), ("6", 2, 1), ("1", 2, 0)]


def test_no_limit_is_an_empty_page_and_no_card(app: Flask) -> None:
    with app.app_context():
        ThreeSteps.start(order_id=1)
    client = app.test_client()
    page = client.get("/pgbus/limits").get_data(as_text=True)
    assert count_testid(page, "empty") == 1 and count_testid(page, "limit-row") == 0
    assert "No limit or rate is declared" in text_of(page)
    assert count_testid(client.get("/pgbus/").get_data(as_text=True), "card-limits") == 0
    assert client.get("/pgbus/api/limits").get_json() == {"limits": [], "busiest_keys": 5}


def test_the_overview_card_counts_the_runs_in_line(app: Flask) -> None:
    tenants(app)
    refunds(app)
    page = app.test_client().get("/pgbus/").get_data(as_text=True)
    card = re.search(r'<a class="card" href="/pgbus/limits" data-testid="card-limits">.*?</a>', page, re.S)
    assert card, page
    assert text_of(card.group(0)) == "Runs in line for limits 5 2 limits and rates"


# -- MCP and Prometheus ---------------------------------------------------------------------------------------


def test_mcp_lists_the_limits_and_says_why_a_run_waits(app: Flask) -> None:
    runs = tenants(app)
    refunds(app)
    server = McpServer(app, write=False)
    result = server.answer(server.tools["list_limits"], {}, "mcp:test")
    assert not result.is_error
    data, text = result.structured_content, result.content[0].text  # type: ignore[union-attr]
    assert data == app.test_client().get("/pgbus/api/limits").get_json()
    first, *lines = text.splitlines()
    assert first == "2 limits and rates; 5 runs waiting in line."
    assert sorted(lines) == [  # in the order of their names, as the database collates them
        "- TenantSync (class limit): 2 at once; 2 keys, 3 in use, 3 waiting; busiest: 42: 2 in use, 3 waiting; "
        "7: 1 in use, 0 waiting.",
        "- stripe (step limit): 1 at once; 1 key, 1 in use, 2 waiting; busiest: (no key): 1 in use, 2 waiting."]

    shown = server.answer(server.tools["show_run"], {"workflow_id": str(runs["42"][4].workflow_id)}, "mcp:test")
    assert not shown.is_error
    sentence = shown.structured_content["presentation"]["sentence"]  # type: ignore[index]
    assert re.fullmatch(rf"Waiting for a slot: TenantSync runs at most 2 at once for key 42 \(2 running, 3 waiting\), "
                        rf"for {SPAN}\.", sentence), sentence
    assert sentence in shown.content[0].text  # type: ignore[union-attr]
    listed = server.answer(server.tools["list_runs"], {"status": "waiting"}, "mcp:test")
    assert all(r["presentation"]["key"] == "waiting_slot" for r in listed.structured_content["runs"])  # type: ignore[index]


def test_mcp_says_when_nothing_is_declared(app: Flask) -> None:
    server = McpServer(app, write=False)
    result = server.answer(server.tools["list_limits"], {}, "mcp:test")
    assert result.structured_content == {"limits": [], "busiest_keys": 5}
    assert result.content[0].text == "No limit or rate is declared."  # type: ignore[union-attr]


@pytest.mark.settings(PGBUS_METRICS=True)
def test_the_gauges_are_by_limit_name_never_by_key(app: Flask) -> None:
    tenants(app)
    refunds(app)
    text = app.test_client().get("/pgbus/metrics").get_data(as_text=True)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples
               if s.name.startswith("pgbus_limit_")}
    assert samples == {
        ("pgbus_limit_capacity", (("kind", "run"), ("limit", "TenantSync"))): 2.0,
        ("pgbus_limit_capacity", (("kind", "step"), ("limit", "stripe"))): 1.0,
        ("pgbus_limit_slots_in_use", (("kind", "run"), ("limit", "TenantSync"))): 3.0,
        ("pgbus_limit_slots_in_use", (("kind", "step"), ("limit", "stripe"))): 1.0,
        ("pgbus_limit_runs_waiting", (("kind", "run"), ("limit", "TenantSync"))): 3.0,
        ("pgbus_limit_runs_waiting", (("kind", "step"), ("limit", "stripe"))): 2.0,
    }
    assert "42" not in "".join(line for line in text.splitlines() if line.startswith("pgbus_limit"))


# -- cost -----------------------------------------------------------------------------------------------------

#: 10,000 runs in line for one run limit over 3,000 keys (each with its 2 slots held), 2,000 in line for a rate,
#: a step limit with 4,000 keys of 5 free slots each, 8,000 other scheduled steps of ready runs and 10,000
#: finished runs.
FLOW_SEED = """
INSERT INTO pgbus_limits (name, kind, capacity, per_seconds, wake_at)
VALUES ('Seeded', 'run', 2, NULL, NULL), ('other', 'step', 5, NULL, NULL), ('api', 'rate', 10, 1, now());
INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, definition_digest, started_by,
                             updated_at, limit_name, limit_key)
SELECT md5('flow' || i)::uuid, 'Seeded',
       CASE WHEN i % 3 = 0 OR (i % 3 = 1 AND i < 6000) THEN 'waiting' WHEN i % 3 = 1 THEN 'ready' ELSE 'finished' END,
       'only', 'x', 'seed', now(), 'Seeded', 'k' || (i / 3 % 3000)
FROM generate_series(0, 29999) AS i;
INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at, blocked_on,
                                  blocked_key, blocked_since, blocked_priority)
SELECT md5('flow' || i)::uuid, 'Seeded', 'only', 1, CASE WHEN i % 3 = 2 THEN 'completed' ELSE 'scheduled' END, now(),
       CASE WHEN i % 3 = 0 THEN 'Seeded' WHEN i % 3 = 1 AND i < 6000 THEN 'api' END,
       CASE WHEN i % 3 = 0 THEN 'k' || (i / 3 % 3000) END, now() - interval '1 minute', 0
FROM generate_series(0, 29999) AS i;
INSERT INTO pgbus_limit_slots (limit_name, limit_key, slot, holder_run, taken_at)
SELECT 'Seeded', 'k' || k, s, md5('holder' || k || '-' || s)::uuid, now()
FROM generate_series(0, 2999) AS k, generate_series(1, 2) AS s;
INSERT INTO pgbus_limit_slots (limit_name, limit_key, slot)
SELECT 'other', 'o' || k, s FROM generate_series(0, 3999) AS k, generate_series(1, 5) AS s;
ANALYZE pgbus_workflows; ANALYZE pgbus_workflow_steps; ANALYZE pgbus_limit_slots; ANALYZE pgbus_limits;
"""


def plan_of(engine: Engine, name: str, params: Any) -> tuple[list[dict[str, Any]], float]:
    """The nodes of a named statement's plan as it ran, and how long it took (ms)."""
    with engine.db.connection() as conn:
        query = pgsql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + pgsql.SQL(statement(name))  # type: ignore[arg-type]
        row = conn.execute(query, params).fetchone()
    assert row is not None
    plan = row[0] if isinstance(row[0], list) else json.loads(row[0])
    return nodes(plan[0]["Plan"]), float(plan[0]["Execution Time"])


@pytest.mark.scale  # 30,000 runs and steps, 26,000 slots
def test_the_limits_reads_stay_on_their_indexes_with_10000_in_line(engine: Engine) -> None:
    """What the Limits page, its card, the gauges and a run page read walks the index of the steps in line
    (pgbus_workflow_steps_blocked) a range a limit, never the runs or every step; the slots are read by
    limit name (their table holds the declared limits' keys and nothing else)."""
    with engine.db.connection() as conn:
        conn.execute(FLOW_SEED.encode())
    started = time.perf_counter()
    found = {use.name: use for use in queries.limits(engine)}
    took = time.perf_counter() - started
    seeded, other, api = found["Seeded"], found["other"], found["api"]
    assert (seeded.kind, seeded.keys, seeded.in_use, seeded.waiting) == ("run", 3000, 6000, 10000)
    assert len(seeded.busiest) == 5 and all(k.in_use == 2 and k.waiting == 4 for k in seeded.busiest)
    assert (other.keys, other.in_use, other.waiting, other.busiest) == (4000, 0, 0, ())
    assert (api.kind, api.keys, api.in_use, api.waiting, api.busiest) == ("rate", None, 0, 2000, ())
    assert took < 2.0, f"the Limits page's read took {took:.2f} s"
    for name, params in (("limits", {"top": 5, "limit": queries.LIMITS_LIMIT}),
                         ("limit_lines", {"names": ["Seeded", "api"], "keys": ["k7", None]}),
                         ("limits_card", None)):
        plan, ms = plan_of(engine, name, params)
        scanned = {n.get("Relation Name") for n in plan if n["Node Type"] == "Seq Scan"}
        assert not scanned & BIG_TABLES, (name, scanned)
        indexes = {n["Index Name"] for n in plan if "Index Name" in n}
        steps = {i for i in indexes if i.startswith("pgbus_workflow_steps")}
        # the steps in line, or (the planner's choice on a table bloated by earlier tests) the scheduled
        # ones: a partial index either way, never every step
        assert steps and steps <= {"pgbus_workflow_steps_blocked", "pgbus_workflow_steps_scheduled"}, (name, indexes)
        assert ms < 1000, (name, ms)
    card = queries.limits_card(engine)
    assert (card.limits, card.waiting) == (3, 12000)
    lines = queries.limit_lines(engine, [("Seeded", "k7"), ("api", None)])
    assert {k: lines[("Seeded", "k7")][k] for k in ("kind", "capacity", "running", "waiting")} == {
        "kind": "run", "capacity": 2, "running": 2, "waiting": 4}
    assert (lines[("api", None)]["kind"], lines[("api", None)]["capacity"]) == ("rate", 10)
