"""Hostile values in every query parameter, form field and path segment of every dashboard route.

The routes come from the app's URL map (a new route is fuzzed without touching
this file, or fails here until it has a baseline value for a new path
argument); the parameters are the ones each route reads, recorded while it
answers a normal request, plus every field of the forms the pages render.
Each request must answer below 500, show no traceback, answer JSON under the
API prefix, and change nothing (every ``pgbus_*`` table and the Redis queues)
when it is a GET or a refused POST.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import psycopg
import pytest
from flask import Flask, Request
from flask.testing import FlaskClient
from hypothesis import given
from hypothesis import strategies as st
from werkzeug.datastructures import ImmutableMultiDict
from werkzeug.exceptions import BadRequest

from pgbus_flask.web import inputs
from tests.support import work
from tests.support.schedule_helpers import Declare
from tests.support.webhooks import with_a_delivery
from tests.support.webtools import csrf, engine_of, sql
from tests.workflows import FailsUntil, FansOut, PausesItself, WaitsForPayment

HOSTILE = [
    "\x00", "a\x00b", "\ud800", "\udcff", "\x1b[31m", "\u202eevil", "", " ",
    "%", "_", "%_%", "²", "١٢", "-1", "0", str(2**63), "9" * 5000, "1e999", "NaN",
    "../../etc/passwd", "<script>alert(1)</script>", '"><img src=x onerror=alert(1)>',
    "[" * 100_000, "x" * 100_000, '{"a":"\\u0000"}', '"\\ud800"',
]

#: The query and form names the request being answered asked for.
READ: set[str] = set()


class RecordingArgs(ImmutableMultiDict):  # type: ignore[type-arg]
    """Query and form values that remember which names a route asked for."""

    def get(self, key: Any, default: Any = None, type: Any = None) -> Any:
        READ.add(key)
        return super().get(key, default, type)

    def __getitem__(self, key: Any) -> Any:
        READ.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        READ.add(str(key))
        return super().__contains__(key)

    def getlist(self, key: Any, type: Any = None) -> Any:
        READ.add(key)
        return super().getlist(key, type)


class RecordingRequest(Request):
    parameter_storage_class = RecordingArgs


def encode(value: str) -> str:
    """``value`` percent-encoded as UTF-8, lone surrogates included (%ED%A0%80), as an attacker sends it."""
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def body(fields: dict[str, str]) -> bytes:
    return "&".join(f"{encode(k)}={encode(v)}" for k, v in fields.items()).encode("ascii")


class Snapshots:
    """Every pgbus table's rows (a count and a digest each) and the length of every queue, on one connection."""

    def __init__(self, app: Flask) -> None:
        url = engine_of(app).settings.database_url
        assert url
        self.engine = engine_of(app)
        self.conn = psycopg.connect(url, autocommit=True)
        tables = [r[0] for r in self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'pgbus\\_%'")]
        assert len(tables) >= 5, tables
        self.query = psycopg.sql.SQL(" UNION ALL ").join(
            psycopg.sql.SQL("SELECT {}, count(*), md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), ''))"
                            " FROM {} t").format(psycopg.sql.Literal(table), psycopg.sql.Identifier(table))
            for table in sorted(tables))

    def take(self) -> dict[str, Any]:
        found: dict[str, Any] = {row[0]: row[1:] for row in self.conn.execute(self.query)}
        found["queues"] = {name: self.engine.queue(name).count for name in self.engine.queue_names()}
        return found

    def close(self) -> None:
        self.conn.close()


def forms_of(page: str) -> list[tuple[str, dict[str, str]]]:
    """The POST forms of a page as (action URL, fields a browser would submit)."""
    found = []
    for action, inner in re.findall(r'<form method="post" action="([^"]+)"[^>]*>(.*?)</form>', page, re.S):
        fields: dict[str, str] = {}
        for tag in re.findall(r"<input\b[^>]*>", inner):
            name, value = re.search(r'\bname="([^"]*)"', tag), re.search(r'\bvalue="([^"]*)"', tag)
            if name:
                fields[html.unescape(name.group(1))] = html.unescape(value.group(1)) if value else ""
        for name, options in re.findall(r'<select[^>]*\bname="([^"]*)"[^>]*>(.*?)</select>', inner, re.S):
            values = re.findall(r'<option value="([^"]*)"', options)
            fields[html.unescape(name)] = html.unescape(values[-1]) if values else ""
        for name, text in re.findall(r'<textarea[^>]*\bname="([^"]*)"[^>]*>(.*?)</textarea>', inner, re.S):
            fields[html.unescape(name)] = html.unescape(text)
        found.append((html.unescape(action), fields))
    return found


class Fuzzer:
    def __init__(self, app: Flask, client: FlaskClient, api_prefix: str) -> None:
        self.app, self.client, self.api_prefix = app, client, api_prefix
        self.snapshots = Snapshots(app)
        self.before = self.snapshots.take()
        self.requests = 0

    def send(self, method: str, path: str, query: dict[str, str], form: dict[str, str] | None,
             what: str) -> int:
        url = path + ("?" + body(query).decode() if query else "")
        try:
            if method == "GET":
                response = self.client.get(url)
            else:
                response = self.client.post(url, data=body(form or {}),
                                            content_type="application/x-www-form-urlencoded")
        except Exception as exc:  # the app raised instead of answering
            raise AssertionError(f"{what}: {method} {url[:200]!r} raised {exc!r}") from exc
        self.requests += 1
        status = response.status_code
        text = response.get_data(as_text=True)
        assert status < 500, f"{what}: {method} {url[:200]!r} answered {status}: {text[:300]}"
        assert "Traceback (most recent call last)" not in text and 'File "' not in text, what
        if path.startswith(self.api_prefix + "/") or path == self.api_prefix:
            assert response.is_json, f"{what}: {method} {url[:200]!r} answered {response.content_type}"
            if status >= 400:
                data = response.get_json()
                assert set(data) == {"error", "status"} and data["status"] == status, (what, data)
        return status

    def unchanged(self, what: str) -> None:
        now = self.snapshots.take()
        assert now == self.before, f"{what} changed the database or the queues"

    def accepted(self) -> None:
        self.before = self.snapshots.take()


def path_for(rule: str, args: dict[str, str]) -> str:
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", lambda m: encode(args[m.group(1)]), rule)


@pytest.fixture
def seeded(app: Flask) -> Iterator[dict[str, str]]:
    with app.app_context():
        paused = FailsUntil.start(fail_until=9, subject=("Order", 1))
        waiting = WaitsForPayment.start(subject=("Order", 2))
        fan = FansOut.start(n=2)
        PausesItself.start()
        work(engine_of(app))
        signal = paused.signal("note", {"a": 1})
    sql(app, "UPDATE pgbus_workflow_steps SET backtrace = NULL")  # a real traceback would hide a leaked one
    batch_id = app.test_client().get(f"/pgbus/api/runs/{fan.workflow_id}").get_json()["batches"][0]["id"]
    yield {"paused": str(paused.workflow_id), "waiting": str(waiting.workflow_id), "batch_id": str(batch_id),
           "signal_id": str(signal.id)}


#: Path arguments of the routes whose valid values differ from ``baseline_args``.
ENDPOINT_ARGS = {"pgbus.schedule": {"workflow_class": "Fuzzed"}, "pgbus.api_schedule": {"workflow_class": "Fuzzed"},
                 "pgbus.schedule_act": {"workflow_class": "Fuzzed", "action": "pause"},
                 "pgbus.api_schedule_act": {"workflow_class": "Fuzzed", "action": "pause"}}


@pytest.mark.slow  # hypothesis: 20-50 s
def test_no_hostile_value_breaks_a_route_or_changes_what_it_must_not(app: Flask, seeded: dict[str, str],
                                                                      declare: Declare) -> None:
    declare("Fuzzed", "0 2 * * *")
    app.request_class = RecordingRequest
    client = app.test_client()
    prefix = "/pgbus"
    baseline_args = {"workflow_id": seeded["paused"], "action": "resume_at", "batch_id": seeded["batch_id"],
                     "filename": "pgbus.css", "rest": "nope", "workflow_class": "FailsUntil",
                     "signal_id": seeded["signal_id"], "position": "0", "step_name": "capture"}
    token = csrf(client, f"/pgbus/runs/{seeded['paused']}")
    # The forms the pages offer, by the endpoint they post to: their fields and valid values.
    adapter = app.url_map.bind("localhost")
    forms: dict[tuple[str, str], dict[str, str]] = {}
    with_a_delivery(engine_of(app))  # webhook targets: the Notifications page offers its test form
    for page in (f"/pgbus/runs/{seeded['paused']}", f"/pgbus/runs/{seeded['waiting']}", "/pgbus/attention",
                 "/pgbus/schedules/Fuzzed", "/pgbus/notifications"):
        for action, fields in forms_of(client.get(page).get_data(as_text=True)):
            endpoint, values = adapter.match(urlsplit(action).path, method="POST")
            key = (endpoint, str(values.get("action", "")))
            forms.setdefault(key, {**fields, "csrf_token": token})
    assert {e for e, _ in forms} >= {"pgbus.act", "pgbus.signal", "pgbus.bulk", "pgbus.schedule_act"}, forms.keys()
    forms[("pgbus.api_schedule_act", "pause")] = {"csrf_token": token, "reason": "fuzzing"}
    forms[("pgbus.api_act", "resume_at")] = {"csrf_token": token, "reason": "fuzzing", "step": "capture"}

    fuzz = Fuzzer(app, client, prefix + "/api")
    try:
        fuzz_every_rule(app, fuzz, forms, baseline_args, seeded)
    finally:
        fuzz.snapshots.close()
    assert fuzz.requests > 1000


def done(endpoint: str, status: int) -> bool:
    """Whether a POST did what it asked: a page's form redirects (303), the JSON API's verb answers 200."""
    return 300 <= status < 400 or (endpoint == "pgbus.api_act" and status == 200)


def fuzz_every_rule(app: Flask, fuzz: Fuzzer, forms: dict[tuple[str, str], dict[str, str]],
                    baseline_args: dict[str, str], seeded: dict[str, str]) -> None:
    rules = [r for r in app.url_map.iter_rules() if r.endpoint.startswith("pgbus.")]
    assert len(rules) >= 12
    for rule in rules:
        missing = set(rule.arguments) - set(baseline_args)
        assert not missing, f"{rule.rule}: give the fuzz test a valid value for {missing}"
        args = {name: baseline_args[name] for name in rule.arguments}
        args.update(ENDPOINT_ARGS.get(rule.endpoint, {}))
        for method in sorted({"GET", "POST"} & (rule.methods or set())):
            if method == "POST":
                if rule.endpoint == "pgbus.signal":
                    args["workflow_id"] = seeded["waiting"]
                form = dict(forms[(rule.endpoint, args.get("action", ""))])
            else:
                form = None
            path = path_for(rule.rule, args)
            READ.clear()
            fuzz.send(method, path, {}, form, f"baseline {rule.endpoint}")
            if method == "POST":
                fuzz.accepted()
            names = sorted(READ | set(form or {})) if method == "POST" else sorted(READ)
            passes = [{}, {"confirmed": "1"}] if method == "POST" and "confirmed" in names else [{}]
            for extra in passes:
                for name in names:
                    for value in HOSTILE:
                        what = f"{rule.endpoint} {method} {name}={value[:20]!r} {extra}"
                        if method == "GET":
                            fuzz.send(method, path, {name: value}, None, what)
                        else:
                            status = fuzz.send(method, path, {}, {**(form or {}), **extra, name: value}, what)
                            if done(rule.endpoint, status):
                                fuzz.accepted()
                            else:
                                fuzz.unchanged(what)
                    if method == "GET":
                        fuzz.unchanged(f"{rule.endpoint} GET with hostile {name}")
            for name in rule.arguments:
                for value in HOSTILE:
                    what = f"{rule.endpoint} {method} path {name}={value[:20]!r}"
                    status = fuzz.send(method, path_for(rule.rule, {**args, name: value}), {}, form, what)
                    if method == "POST" and done(rule.endpoint, status):
                        fuzz.accepted()
                    elif method == "POST":
                        fuzz.unchanged(what)
                fuzz.unchanged(f"{rule.endpoint} {method} with a hostile {name}")


@given(st.text())
def test_the_edge_checks_refuse_only_with_a_400(value: str) -> None:
    for check in (lambda: inputs.check("name", value), lambda: inputs.whole_number(value, "before")):
        try:
            result = check()
        except BadRequest as exc:
            assert exc.code == 400
            assert "name" in str(exc.description) or "before" in str(exc.description)
            continue
        if isinstance(result, int):
            assert 1 <= result <= inputs.BIGINT_MAX and value.isascii() and value.isdigit()
        elif result is not None:
            assert result == value
