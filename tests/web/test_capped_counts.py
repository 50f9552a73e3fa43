"""Past the cap of overdue runs a group counts (queries.COUNT_CAP), every page, JSON read, the host
app's card and /metrics say "at least": never a capped number shown as exact."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask, render_template_string

from pgbus_flask import queries
from tests.support import work
from tests.support.webtools import engine_of, sql, text_of
from tests.workflows import WaitsForever

TOKEN = "scrape-token-0123456789"
LAYOUT = """{% from "pgbus/embed.html" import pgbus_nav_link, pgbus_stats_card %}
<nav>{{ pgbus_nav_link() }}</nav><main>{{ pgbus_stats_card() }}</main>"""


def three_waiting_too_long(app: Flask) -> list[Any]:
    with app.app_context():
        runs = [WaitsForever.start() for _ in range(3)]
        work(engine_of(app))
    sql(app, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '2 hours' WHERE status = 'waiting'")
    return runs


def pages(app: Flask) -> dict[str, Any]:
    @app.get("/host")
    def host() -> str:
        return render_template_string(LAYOUT)

    client = app.test_client()
    return {
        "overview": client.get("/pgbus/").get_data(as_text=True),
        "attention": client.get("/pgbus/attention").get_data(as_text=True),
        "host": client.get("/host").get_data(as_text=True),
        "runs": client.get("/pgbus/runs?reason=waiting_overdue").get_data(as_text=True),
        "api_overview": client.get("/pgbus/api/overview").get_json(),
        "api_attention": client.get("/pgbus/api/attention").get_json(),
        "metrics": client.get("/pgbus/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).get_data(as_text=True),
    }


def sample(metrics: str, name: str) -> str:
    found = re.search(rf'^{name}{{reason="waiting_overdue",workflow_class="WaitsForever"}} (\S+)$', metrics, re.M)
    assert found, metrics
    return found.group(1)


SETTINGS = {"PGBUS_WAITING_THRESHOLD": 600, "PGBUS_METRICS": True, "PGBUS_METRICS_TOKEN": TOKEN}


@pytest.mark.settings(**SETTINGS)
def test_a_capped_count_says_at_least_everywhere(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = three_waiting_too_long(app)
    monkeypatch.setattr(queries, "COUNT_CAP", 2)
    seen = pages(app)

    overview = seen["overview"]
    card = re.search(r'data-testid="card-attention".*?class="card-number">(.*?)</span>\s*</a>', overview, re.S)
    assert card and 'data-capped="1"' in card.group(1) and text_of(card.group(1)) == "2+"
    assert "At least 2: the dashboard stops counting a group&#39;s overdue runs at 2" in card.group(1)
    marker = re.search(r'data-testid="count-attention-waiting"[^>]*>(.*?)</a>', overview, re.S)
    assert marker and text_of(marker.group(1)) == "⚠ 2+ need attention"
    stuck = re.search(r'data-testid="stuck-table".*?</table>', overview, re.S)
    assert stuck and "2+" in text_of(stuck.group(0)) and 'data-capped="1"' in stuck.group(0)

    group = re.search(r'data-testid="attention-group".*?</section>', seen["attention"], re.S)
    assert group
    count = re.search(r'data-testid="group-count">(.*?)</dd>', group.group(0), re.S)
    assert count and text_of(count.group(1)) == "2+" and 'data-capped="1"' in count.group(1)
    assert re.search(r'data-testid="group-runs-link">Show the runs</a>', group.group(0))

    host = text_of(seen["host"])
    assert "2+ need attention" in host and 'data-capped="1"' in seen["host"]
    assert re.search(r'class="pgbus-nav-count"[^>]*>2\+</span>', seen["host"])

    # the runs list is a page of them, not a count: all three
    listed = re.findall(r'data-testid="run-row" data-workflow-id="([^"]+)"', seen["runs"])
    assert listed == [str(r.workflow_id) for r in reversed(runs)]

    api = seen["api_overview"]
    assert api["stuck"] == [{"workflow_class": "WaitsForever", "reason": "waiting_overdue", "runs": 2,
                             "capped": True}]
    assert (api["attention"], api["attention_capped"], api["count_cap"]) == (2, True, 2)
    (grp,) = seen["api_attention"]["groups"]
    assert (grp["count"], grp["capped"], seen["api_attention"]["count_cap"]) == (2, True, 2)

    assert sample(seen["metrics"], "pgbus_runs_needing_attention") == "2.0"
    assert sample(seen["metrics"], "pgbus_runs_needing_attention_capped") == "1.0"


@pytest.mark.settings(**SETTINGS)
def test_below_the_cap_the_count_is_exact_and_unmarked(app: Flask) -> None:
    three_waiting_too_long(app)
    seen = pages(app)
    assert 'data-capped' not in seen["overview"] + seen["attention"] + seen["host"]
    assert "3 need attention" in text_of(seen["host"])
    count = re.search(r'data-testid="group-count">(.*?)</dd>', seen["attention"], re.S)
    assert count and count.group(1) == "3"
    assert re.search(r'data-testid="group-runs-link">Show the 3 runs</a>', seen["attention"])
    assert seen["api_overview"]["stuck"][0]["capped"] is False and seen["api_overview"]["attention_capped"] is False
    assert seen["api_attention"]["groups"][0]["capped"] is False
    assert sample(seen["metrics"], "pgbus_runs_needing_attention") == "3.0"
    assert sample(seen["metrics"], "pgbus_runs_needing_attention_capped") == "0.0"


@pytest.mark.settings(**SETTINGS)
def test_a_capped_group_asks_about_the_runs_one_call_moves_not_all(app: Flask,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A bulk verb moves the oldest IDS_LIMIT runs of a group; past the cap the count is a lower bound,
    so neither the button, the confirm question nor the JSON's confirm says "all 2"."""
    three_waiting_too_long(app)
    monkeypatch.setattr(queries, "COUNT_CAP", 2)
    seen = pages(app)
    group = re.search(r'data-testid="attention-group".*?</section>', seen["attention"], re.S)
    assert group
    words = text_of(group.group(0))
    assert "Cancel these 500 runs" in words and "all 2" not in words
    (grp,) = seen["api_attention"]["groups"]
    assert grp["confirm"]["cancel"] == ("Cancel the 500 oldest of these runs at wait?"
                                        " The others stay as they are.")
    assert not any("all 2" in question for question in grp["confirm"].values())
