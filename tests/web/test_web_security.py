"""Who may use the dashboard, CSRF on every change, escaping everywhere, and pages that fail readably."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.exceptions import Forbidden
from werkzeug.test import TestResponse

from pgbus_flask import PgBus, Workflow, step
from pgbus_flask import engine as engine_module
from pgbus_flask.config import Settings
from pgbus_flask.errors import ConfigError, DatabaseUnavailable
from pgbus_flask.handle import Run
from pgbus_flask.web import security
from pgbus_flask.web.security import CSRF_COOKIE
from tests.support import work
from tests.support.webtools import csrf, engine_of, text_of
from tests.workflows import FailsUntil, ThreeSteps

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
RAW = ("<script>alert", "<img src=x", "onerror=alert(1)>")


class HostileInput(Workflow):
    """Fails with whatever message it was started with."""

    @step
    def hostile(self) -> None:
        raise ValueError(self.kwargs["msg"])

    @step
    def after(self) -> str:
        return "after"


def assert_escaped(page: str) -> None:
    for raw in RAW:
        assert raw not in page, raw
    assert "&lt;script&gt;alert(" in page


# -- who may use it ------------------------------------------------------------------------


def refuse(request: Any) -> None:
    return None


def forbid(request: Any) -> str:
    raise Forbidden("Only the ops team may open pgbus.")


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=refuse)
def test_auth_that_refuses_is_a_401(app: Flask) -> None:
    response = app.test_client().get("/pgbus/")
    assert response.status_code == 401
    assert "You are not allowed to use the pgbus dashboard: please sign in." in text_of(
        response.get_data(as_text=True))


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=forbid)
def test_auth_may_raise_forbidden(app: Flask) -> None:
    response = app.test_client().get("/pgbus/runs")
    assert response.status_code == 403
    assert "Only the ops team may open pgbus." in text_of(response.get_data(as_text=True))


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: request.headers.get("X-User"))
def test_auth_names_the_actor(app: Flask) -> None:
    client = app.test_client()
    assert client.get("/pgbus/").status_code == 401
    page = client.get("/pgbus/", headers={"X-User": "carol"}).get_data(as_text=True)
    assert 'data-testid="actor">dashboard:carol<' in page


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=refuse)
def test_posts_are_refused_before_anything_else(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    response = app.test_client().post(f"/pgbus/runs/{run.workflow_id}/actions/cancel", data={"confirmed": "1"})
    assert response.status_code == 401
    assert Run(engine_of(app), run.workflow_id).status == "ready"


def test_without_auth_a_production_app_refuses_with_an_explanation(app: Flask) -> None:
    app.testing = False
    response = app.test_client().get("/pgbus/")
    assert response.status_code == 403
    assert "set PGBUS_DASHBOARD_AUTH to a function that returns the name of the signed-in operator" in text_of(
        response.get_data(as_text=True))
    assert app.test_client().get("/pgbus/static/pgbus.css").status_code == 200, "error pages stay styled"


def test_without_auth_a_debug_app_serves_anonymous(app: Flask) -> None:
    app.testing = False
    app.debug = True
    page = app.test_client().get("/pgbus/").get_data(as_text=True)
    assert 'data-testid="actor">dashboard:anonymous<' in page


@pytest.mark.settings(PGBUS_DASHBOARD_PUBLIC=True)
def test_a_public_dashboard_serves_anonymous(app: Flask) -> None:
    app.testing = False
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    client = app.test_client()
    token = csrf(client)
    client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel", data={"csrf_token": token, "confirmed": "1"})
    assert Run(engine_of(app), run.workflow_id).events()[-1]["actor"] == "dashboard:anonymous"


# -- CSRF --------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["missing", "wrong", "no-cookie"])
def test_a_post_without_a_valid_csrf_token_is_a_400_and_changes_nothing(app: Flask, case: str) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    client = app.test_client()
    token = csrf(client)
    data = {"confirmed": "1", "reason": "x"}
    if case == "wrong":
        data["csrf_token"] = token[:-2] + "xx"
    elif case == "no-cookie":
        data["csrf_token"] = token
        client = app.test_client()
    for url in (f"/pgbus/runs/{run.workflow_id}/actions/cancel", f"/pgbus/runs/{run.workflow_id}/signals",
                "/pgbus/attention/bulk"):
        response = client.post(url, data={**data, "name": "go", "action": "cancel"})
        assert response.status_code == 400, url
        assert "security token is missing or out of date" in text_of(response.get_data(as_text=True))
    after = Run(engine_of(app), run.workflow_id)
    assert after.status == "ready" and after.signals() == []


def test_the_csrf_cookie_is_http_only_and_strict(app: Flask) -> None:
    response = app.test_client().get("/pgbus/")
    cookie = next(h for h in response.headers.getlist("Set-Cookie") if h.startswith("pgbus_csrf="))
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/pgbus" in cookie


REFUSED = "security token is missing or out of date"


def post_cancel(client: FlaskClient, run: Run, token: str, **headers: str) -> TestResponse:
    return client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel",
                       data={"csrf_token": token, "confirmed": "1"}, headers=headers)


def started(app: Flask, order_id: int = 1) -> Run:
    with app.app_context():
        return ThreeSteps.start(order_id=order_id)


def assert_refused(response: TestResponse, app: Flask, run: Run) -> None:
    """A 400 that says why, and the run (just started) as it was: still ready, no event since its start."""
    assert response.status_code == 400
    assert REFUSED in text_of(response.get_data(as_text=True))
    after = Run(engine_of(app), run.workflow_id)
    assert after.status == "ready"
    assert [e["event"] for e in after.events()] == ["started", "step_scheduled"]


def test_the_form_token_is_not_the_cookie(app: Flask) -> None:
    client = app.test_client()
    token = csrf(client)
    cookie = client.get_cookie(CSRF_COOKIE, path="/pgbus")
    assert cookie is not None and cookie.value != token


def test_a_planted_cookie_with_a_matching_unsigned_token_is_refused(app: Flask) -> None:
    """Cookie tossing: a sibling subdomain sets ``pgbus_csrf`` to a value it knows and posts that value."""
    run = started(app)
    client = app.test_client()
    planted = "A" * 43
    client.set_cookie(CSRF_COOKIE, planted, path="/pgbus")
    assert_refused(post_cancel(client, run, planted), app, run)


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: request.headers.get("X-User"))
def test_a_token_from_another_cookie_or_another_operator_is_refused(app: Flask) -> None:
    run = started(app)
    mallory, alice = app.test_client(), app.test_client()
    mallory.environ_base["HTTP_X_USER"] = "mallory"
    alice.environ_base["HTTP_X_USER"] = "alice"
    mallorys_token = csrf(mallory)
    csrf(alice)
    assert_refused(post_cancel(alice, run, mallorys_token), app, run)
    # Mallory plants her own cookie in Alice's browser: her token is bound to her, not to Alice.
    mallorys_cookie = mallory.get_cookie(CSRF_COOKIE, path="/pgbus")
    assert mallorys_cookie is not None
    alice.set_cookie(CSRF_COOKIE, mallorys_cookie.value, path="/pgbus")
    assert_refused(post_cancel(alice, run, mallorys_token), app, run)
    assert post_cancel(mallory, run, mallorys_token).status_code == 303, "her own pair works for her"


@pytest.mark.parametrize("origin", ["https://evil.example", "http://pgbus.evil.example", "http://localhost:8080",
                                   "null"])
def test_a_post_from_another_origin_is_refused(app: Flask, origin: str) -> None:
    run = started(app)
    client = app.test_client()
    token = csrf(client)
    assert_refused(post_cancel(client, run, token, Origin=origin), app, run)


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_a_post_the_browser_calls_cross_site_or_same_site_is_refused(app: Flask, site: str) -> None:
    """``same-site`` is exactly the sibling subdomain a cookie can be tossed from."""
    run = started(app)
    client = app.test_client()
    token = csrf(client)
    assert_refused(post_cancel(client, run, token, **{"Sec-Fetch-Site": site}), app, run)


@pytest.mark.parametrize("headers", [{}, {"Origin": "http://localhost"}, {"Origin": "http://LOCALHOST:80"},
                                     {"Sec-Fetch-Site": "same-origin", "Origin": "http://localhost"},
                                     {"Sec-Fetch-Site": "none"}])
def test_a_same_origin_post_goes_through(app: Flask, headers: dict[str, str]) -> None:
    run = started(app)
    client = app.test_client()
    response = post_cancel(client, run, csrf(client), **headers)
    assert response.status_code == 303
    assert Run(engine_of(app), run.workflow_id).status == "cancelled"


@pytest.mark.settings(PGBUS_DASHBOARD_HOSTS="ops.example.com")  # an open dashboard answers there
def test_the_origin_is_compared_with_the_host_the_browser_asked_for(app: Flask) -> None:
    run = started(app)
    client = app.test_client()
    base = "https://ops.example.com"
    page = client.get("/pgbus/", base_url=base).get_data(as_text=True)
    found = re.search(r'<meta name="csrf-token" content="([^"]+)"', page)
    assert found
    token = found.group(1)
    assert_refused(client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel", base_url=base,
                               data={"csrf_token": token, "confirmed": "1"},
                               headers={"Origin": "https://example.com"}), app, run)
    done = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel", base_url=base,
                       data={"csrf_token": token, "confirmed": "1"}, headers={"Origin": base})
    assert done.status_code == 303


def test_tokens_hold_across_processes_and_key_rotation(app: Flask, pg_url: str, redis_url: str) -> None:
    """Signed with SECRET_KEY, so any process of the app accepts them; SECRET_KEY_FALLBACKS keeps them valid."""
    run = started(app)
    client = app.test_client()
    token = csrf(client)
    other = Flask("another_process")
    other.config.update(TESTING=True, SECRET_KEY="rotated", SECRET_KEY_FALLBACKS=["test"],
                        PGBUS_DATABASE_URL=pg_url, PGBUS_REDIS_URL=redis_url)
    PgBus(other)
    try:
        cookie = client.get_cookie(CSRF_COOKIE, path="/pgbus")
        assert cookie is not None
        there = other.test_client()
        there.set_cookie(CSRF_COOKIE, cookie.value, path="/pgbus")
        assert post_cancel(there, run, token).status_code == 303
    finally:
        other.extensions["pgbus"].close()
    assert Run(engine_of(app), run.workflow_id).status == "cancelled"


def test_a_debug_app_without_secret_key_signs_with_a_key_of_its_own(app: Flask) -> None:
    app.testing, app.debug, app.secret_key = False, True, None
    run = started(app)
    client = app.test_client()
    assert post_cancel(client, run, csrf(client)).status_code == 303


@pytest.mark.settings(PGBUS_DASHBOARD_PUBLIC=True)
def test_a_production_app_without_secret_key_refuses_changes_and_says_why(app: Flask) -> None:
    app.testing, app.secret_key = False, None
    run = started(app)
    client = app.test_client()
    response = post_cancel(client, run, csrf(client))
    assert response.status_code == 400
    assert "the app has no SECRET_KEY" in text_of(response.get_data(as_text=True))
    german = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel", headers={"Accept-Language": "de"},
                         data={"csrf_token": csrf(client), "confirmed": "1"})
    assert german.status_code == 400 and "weil die App keinen SECRET_KEY hat" in text_of(german.get_data(as_text=True))
    assert Run(engine_of(app), run.workflow_id).status == "ready"


# -- a host app that uses Flask-WTF's CSRFProtect ---------------------------------------------


@pytest.fixture(params=["before", "after"])
def host_app(request: pytest.FixtureRequest, clean: None, pg_url: str, redis_url: str) -> Iterator[Flask]:
    """An app protected by ``CSRFProtect``, set up before or after ``PgBus``, with a form of its own."""
    from flask_wtf.csrf import CSRFProtect, generate_csrf

    host = Flask("host_with_csrfprotect")
    host.config.update(TESTING=True, SECRET_KEY="host secret", PGBUS_DATABASE_URL=pg_url, PGBUS_REDIS_URL=redis_url,
                       PGBUS_DASHBOARD_AUTH=lambda request: "alice")
    if request.param == "before":
        CSRFProtect(host)
        PgBus(host)
    else:
        PgBus(host)
        CSRFProtect(host)

    @host.get("/orders/new")
    def new_order() -> str:
        return f'<form method="post"><input name="csrf_token" value="{generate_csrf()}"></form>'

    @host.post("/orders")
    def create_order() -> str:
        return "order created"

    yield host
    host.extensions["pgbus"].close()
    engine_module._default = None


def test_dashboard_actions_work_in_an_app_with_csrfprotect(host_app: Flask) -> None:
    engine = engine_of(host_app)
    with host_app.app_context():
        paused = FailsUntil.start(fail_until=1)
        group = [FailsUntil.start(fail_until=9) for _ in range(2)]
        work(engine)
    doomed = started(host_app)
    client = host_app.test_client()
    token = csrf(client, f"/pgbus/runs/{paused.workflow_id}")
    resume = client.post(f"/pgbus/runs/{paused.workflow_id}/actions/resume",
                         data={"csrf_token": token, "confirmed": "1", "reason": "gateway is back"})
    assert resume.status_code == 303, resume.get_data(as_text=True)
    assert "resumed" in [e["event"] for e in Run(engine, paused.workflow_id).events()]
    cancel = post_cancel(client, doomed, token)
    assert cancel.status_code == 303
    assert Run(engine, doomed.workflow_id).status == "cancelled"
    bulk = client.post("/pgbus/attention/bulk", data={
        "csrf_token": token, "action": "cancel", "workflow_class": "FailsUntil", "step_name": "capture",
        "stuck_reason": "paused_error", "error_class": "TimeoutError", "confirmed": "1"})
    assert bulk.status_code == 303
    assert {Run(engine, r.workflow_id).status for r in group} == {"cancelled"}
    # The dashboard's own check still stands.
    other = started(host_app, 2)
    assert_refused(post_cancel(host_app.test_client(), other, token), host_app, other)


def test_the_host_apps_own_forms_stay_protected(host_app: Flask) -> None:
    client = host_app.test_client()
    refused = client.post("/orders", data={})
    assert refused.status_code == 400 and "The CSRF token is missing." in refused.get_data(as_text=True)
    dashboard_token = csrf(client)
    assert client.post("/orders", data={"csrf_token": dashboard_token}).status_code == 400
    page = client.get("/orders/new").get_data(as_text=True)
    found = re.search(r'value="([^"]+)"', page)
    assert found
    assert client.post("/orders", data={"csrf_token": found.group(1)}).get_data(as_text=True) == "order created"


# -- escaping ------------------------------------------------------------------------------


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: '<b onmouseover="x">mallory</b>')
def test_hostile_text_comes_out_escaped_everywhere(app: Flask) -> None:
    with app.app_context():
        run = HostileInput.start(XSS, msg=XSS, subject=(XSS, XSS))
        work(engine_of(app))
        run.signal(XSS, {"html": XSS}, idempotency_key=XSS, actor=XSS, reason=XSS)
    client = app.test_client()
    token = csrf(client)
    client.post(f"/pgbus/runs/{run.workflow_id}/actions/resume_at",
                data={"csrf_token": token, "confirmed": "1", "step": "hostile", "reason": XSS})
    with app.app_context():
        work(engine_of(app))
    pages = {
        "run": client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True),
        "runs": client.get("/pgbus/runs").get_data(as_text=True),
        "attention": client.get("/pgbus/attention").get_data(as_text=True),
        "filters": client.get("/pgbus/runs", query_string={"text": XSS, "subject": XSS}).get_data(as_text=True),
        "confirm": client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel",
                               data={"csrf_token": token, "reason": XSS}).get_data(as_text=True),
        "bad-json": client.post(f"/pgbus/runs/{run.workflow_id}/signals",
                                data={"csrf_token": token, "name": XSS, "payload": XSS}).get_data(as_text=True),
    }
    for name, page in pages.items():
        for raw in RAW:
            assert raw not in page, (name, raw)
        assert "<b onmouseover" not in page, name
    run_text = text_of(pages["run"])
    assert f"ValueError {XSS}" in run_text, "the error message, escaped, reads as typed"
    assert f"{XSS} {XSS}" in run_text, "the subject"
    assert f"Resumed by dashboard:<b onmouseover=\"x\">mallory</b> (hostile #1): {XSS}" in run_text
    assert f"Signal received by {XSS}: {XSS}" in run_text
    assert_escaped(pages["run"])
    assert_escaped(pages["attention"])
    args = re.search(r'data-testid="arguments">(.*?)</pre>', pages["run"], re.S)
    assert args and "&lt;script&gt;" in args.group(1)


@pytest.mark.settings(PGBUS_SUBJECT_URL=lambda kind, ident: "javascript:alert(document.cookie)")
def test_an_unsafe_subject_url_is_not_linked(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1, subject=("Order", 1))
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert "javascript:" not in page
    assert '<span data-testid="subject">Order 1</span>' in page


# -- failures read as pages ---------------------------------------------------------------


def test_postgresql_down_is_a_readable_503(redis_url: str) -> None:
    """A real refused connection (nothing listens on port 1), answered at once, not after a timeout."""
    import time

    from pgbus_flask import PgBus
    from pgbus_flask import engine as engine_module
    from tests.workflows import ThreeSteps

    down = Flask("postgres_down")
    down.config.update(TESTING=True, PGBUS_DATABASE_URL="postgresql://postgres@127.0.0.1:1/nowhere",
                       PGBUS_REDIS_URL=redis_url)
    PgBus(down)
    try:
        client = down.test_client()
        started = time.monotonic()
        for url in ("/pgbus/", "/pgbus/runs", "/pgbus/attention", "/pgbus/runs/00000000-0000-0000-0000-000000000001",
                    "/pgbus/batches/1"):
            response = client.get(url)
            assert response.status_code == 503, url
            page = response.get_data(as_text=True)
            assert "The dashboard cannot reach PostgreSQL right now" in text_of(page) and "Traceback" not in page
        assert time.monotonic() - started < 5  # five pages, none waiting out a pool timeout
        with down.app_context(), pytest.raises(DatabaseUnavailable, match="unreachable"):
            ThreeSteps.start(order_id=1)
    finally:
        down.extensions["pgbus"].close()
        engine_module._default = None


def test_a_raw_psycopg_operational_error_is_a_503_too(app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    from pgbus_flask import queries

    def lost(*args: Any, **kwargs: Any) -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(queries, "status_counts", lost)
    response = app.test_client().get("/pgbus/")
    assert response.status_code == 503
    assert "PostgreSQL is unreachable" in text_of(response.get_data(as_text=True))


def test_security_headers(app: Flask) -> None:
    response = app.test_client().get("/pgbus/")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Cache-Control"] == "no-store"


# -- the hosts an open dashboard answers at (DNS rebinding) ---------------------------------------

REBOUND = "rebind.attacker.example:5000"
HOST_REFUSED = "This dashboard has no sign-in, so it answers only at localhost"


def open_as(app: Flask, mode: str) -> None:
    """The three ways a dashboard answers without PGBUS_DASHBOARD_AUTH (the fixture's app is testing)."""
    if mode == "debug":
        app.testing, app.debug = False, True
    elif mode == "public":  # with PGBUS_DASHBOARD_PUBLIC set by the test's marker
        app.testing = False


def at(host: str) -> str:
    return f"http://{host}"


@pytest.mark.parametrize("mode", ["testing", "debug", pytest.param(
    "public", marks=pytest.mark.settings(PGBUS_DASHBOARD_PUBLIC=True))])
def test_an_open_dashboard_answers_nothing_at_a_rebound_host(app: Flask, mode: str) -> None:
    """A page on the attacker's name, rebound to the dashboard's address, is same-origin with it: refused."""
    open_as(app, mode)
    run = started(app, order_id=4242)
    client = app.test_client()
    listed = client.get("/pgbus/api/runs", base_url=at(REBOUND))
    assert listed.status_code == 400 and listed.is_json
    assert set(listed.get_json()) == {"error", "status"} and listed.get_json()["status"] == 400
    assert HOST_REFUSED in listed.get_json()["error"] and "4242" not in listed.get_data(as_text=True)
    page = client.get(f"/pgbus/runs/{run.workflow_id}", base_url=at(REBOUND))
    assert page.status_code == 400 and HOST_REFUSED in text_of(page.get_data(as_text=True))
    assert "4242" not in page.get_data(as_text=True)
    live = client.get("/pgbus/", base_url=at(REBOUND), headers={"X-Pgbus-Live": "1"})
    assert live.status_code == 400

    # A token and its cookie from the real host, replayed with the rebound Host, a matching Origin and
    # Sec-Fetch-Site: same-origin (what the browser sends for the attacker's page).
    token = csrf(client)
    cookie = client.get_cookie(CSRF_COOKIE, path="/pgbus")
    assert cookie is not None
    client.set_cookie(CSRF_COOKIE, cookie.value, domain="rebind.attacker.example", path="/pgbus")
    headers = {"Origin": at(REBOUND), "Sec-Fetch-Site": "same-origin"}
    for url in (f"/pgbus/runs/{run.workflow_id}/actions/cancel", f"/pgbus/api/runs/{run.workflow_id}/actions/cancel"):
        refused = client.post(url, base_url=at(REBOUND), headers=headers,
                              data={"csrf_token": token, "confirmed": "1", "reason": "rebound"})
        assert refused.status_code == 400, url
    after = Run(engine_of(app), run.workflow_id)
    assert after.status == "ready"
    assert [e["event"] for e in after.events()] == ["started", "step_scheduled"]


def test_the_host_refusal_is_in_the_viewers_language(app: Flask) -> None:
    page = app.test_client().get("/pgbus/", base_url=at(REBOUND), headers={"Accept-Language": "de"})
    assert page.status_code == 400
    assert "Dieses Dashboard hat keine Anmeldung" in text_of(page.get_data(as_text=True))


@pytest.mark.parametrize("host", ["localhost", "localhost:5000", "LOCALHOST:5000", "127.0.0.1:5000", "127.9.9.9",
                                  "[::1]:5000", "[::1]", "pgbus.localhost:8080"])
def test_an_open_dashboard_answers_at_loopback_names_and_addresses(app: Flask, host: str) -> None:
    started(app)
    client = app.test_client()
    response = client.get("/pgbus/api/runs", base_url=at(host))
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    assert client.get("/pgbus/", base_url=at(host)).status_code == 200


@pytest.mark.parametrize("host", ["localhost.attacker.example", "127.0.0.1.attacker.example", "localhost.",
                                  "10.0.0.5:5000", "[fd00::1]:5000", "0.0.0.0:5000", "attacker.example@localhost"])
def test_names_that_only_look_like_loopback_are_refused(app: Flask, host: str) -> None:
    response = app.test_client().get("/pgbus/api/runs", base_url=at(host))
    assert response.status_code == 400


@pytest.mark.settings(PGBUS_DASHBOARD_HOSTS="ops.example.com, .internal.example, [fd00::1]")
@pytest.mark.parametrize(("host", "status"), [
    ("ops.example.com", 200), ("ops.example.com:8443", 200), ("OPS.example.com", 200), ("internal.example", 200),
    ("a.b.internal.example:5000", 200), ("[fd00:0::1]:5000", 200), ("localhost:5000", 200),
    ("example.com", 400), ("ops.example.com.attacker.example", 400), ("xinternal.example", 400),
    ("rebind.attacker.example", 400),
])
def test_pgbus_dashboard_hosts_extends_the_loopback_names(app: Flask, host: str, status: int) -> None:
    assert app.test_client().get("/pgbus/api/overview", base_url=at(host)).status_code == status


def test_trusted_hosts_extends_them_too(app: Flask) -> None:
    """Flask refuses hosts outside ``TRUSTED_HOSTS`` itself; the dashboard answers at every one it lists."""
    app.config["TRUSTED_HOSTS"] = [".ops.example.com", "localhost"]
    client = app.test_client()
    assert client.get("/pgbus/api/overview", base_url=at("eu.ops.example.com:443")).status_code == 200
    assert client.get("/pgbus/api/overview", base_url=at("localhost")).status_code == 200
    assert client.get("/pgbus/api/overview", base_url=at(REBOUND)).status_code == 400


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: "alice")
def test_with_an_auth_hook_every_host_is_answered(app: Flask) -> None:
    """The hook decides then: a rebound page carries no cookie of the real site."""
    assert app.test_client().get("/pgbus/api/overview", base_url=at(REBOUND)).status_code == 200


def test_static_files_are_served_at_any_host(app: Flask) -> None:
    assert app.test_client().get("/pgbus/static/pgbus.css", base_url=at(REBOUND)).status_code == 200


@pytest.mark.parametrize(("value", "message"), [
    ("*", "must list host names"), ("https://ops.example.com/", "a host name, not a URL"),
    ("ops.example.com/pgbus", "not a URL"), (5, "must be a list of host names"), (["[fd00::zz]"], "must list host"),
])
def test_bad_dashboard_hosts_are_named_at_start_up(value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        Settings.load({"PGBUS_DASHBOARD_HOSTS": value})
    assert caught.value.key == "PGBUS_DASHBOARD_HOSTS"


# -- what the auth hook may answer -----------------------------------------------------------------


class NotAName:
    """A truthy object that is not a name: what a hook returning a user object gives."""


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: {"7": 7, "true": True, "blank": "", "false": False}.get(
    request.headers.get("X-Who", "")))
@pytest.mark.parametrize(("who", "status", "actor"), [
    ("7", 200, "dashboard:7"), ("true", 200, "dashboard:anonymous"), ("blank", 401, None), ("false", 401, None),
    ("none", 401, None),
])
def test_the_documented_auth_answers(app: Flask, who: str, status: int, actor: str | None) -> None:
    page = app.test_client().get("/pgbus/", headers={"X-Who": who})
    assert page.status_code == status
    if actor:
        assert f'data-testid="actor">{actor}<' in page.get_data(as_text=True)


@pytest.mark.settings(PGBUS_DASHBOARD_AUTH=lambda request: NotAName())
def test_an_auth_answer_of_another_type_is_a_500_that_names_it(app: Flask, caplog: pytest.LogCaptureFixture,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(security, "_MISCONFIGURED_LOGGED", set())  # as in a fresh process
    run = started(app)
    client = app.test_client()
    with caplog.at_level("ERROR", logger="pgbus_flask.web"):
        page = client.get(f"/pgbus/runs/{run.workflow_id}")
        assert page.status_code == 500
        text = text_of(page.get_data(as_text=True))
        assert "PGBUS_DASHBOARD_AUTH returned NotAName; return the user's id or None." in text
        assert 'data-testid="actor"' not in page.get_data(as_text=True) and str(run.workflow_id) not in text
        api = client.get("/pgbus/api/runs")
        assert api.status_code == 500 and "returned NotAName" in api.get_json()["error"]
        done = client.post(f"/pgbus/runs/{run.workflow_id}/actions/cancel", data={"confirmed": "1"})
        assert done.status_code == 500
    assert Run(engine_of(app), run.workflow_id).status == "ready"
    logged = [r for r in caplog.records if "PGBUS_DASHBOARD_AUTH returned" in r.getMessage()]
    assert len(logged) == 1, "logged once per type and process"
    assert "NotAName" in logged[0].getMessage()


# -- framing -------------------------------------------------------------------------------------


def test_pages_may_be_framed_only_by_the_same_origin(app: Flask) -> None:
    client = app.test_client()
    for url in ("/pgbus/", "/pgbus/api/overview", "/pgbus/runs/not-a-uuid", "/pgbus/api/runs/x/y"):
        response = client.get(url)
        assert response.headers.get("Content-Security-Policy") == "frame-ancestors 'self'", url
        assert response.headers.get("X-Frame-Options") == "SAMEORIGIN", url
    refused = client.post("/pgbus/runs/not-a-uuid/actions/cancel")
    assert refused.headers.get("X-Frame-Options") == "SAMEORIGIN"


@pytest.mark.parametrize("own", [{"Content-Security-Policy": "default-src 'self'; Frame-Ancestors https://portal.example"},
                                 {"Content-Security-Policy": "frame-ancestors https://portal.example"},
                                 {"X-Frame-Options": "DENY"}])
@pytest.mark.parametrize("hook", ["after_request", "view"])
def test_a_host_apps_own_framing_headers_are_left_alone(app: Flask, own: dict[str, str], hook: str) -> None:
    if hook == "after_request":
        @app.after_request
        def _own_headers(response: Any) -> Any:
            response.headers.update(own)
            return response
    else:  # a host app that answers at a dashboard URL with headers of its own
        app.view_functions["pgbus.overview"] = lambda: ("host page", 200, own)
    response = app.test_client().get("/pgbus/")
    assert {name: response.headers.get(name) for name in ("Content-Security-Policy", "X-Frame-Options")} == {
        "Content-Security-Policy": own.get("Content-Security-Policy"), "X-Frame-Options": own.get("X-Frame-Options")}


@pytest.mark.parametrize("hook", ["after_request", "view"])
def test_a_host_policy_that_says_nothing_of_framing_gets_ours_beside_it(app: Flask, hook: str) -> None:
    """A host app's policy about scripts and styles is not a framing policy: left as it is, with ours
    sent as a second policy (a browser enforces both), so no other site may frame the dashboard."""
    own = {"Content-Security-Policy": "default-src 'self'; img-src 'self' data:"}
    if hook == "after_request":
        @app.after_request
        def _own_headers(response: Any) -> Any:
            response.headers.update(own)
            return response
    else:
        app.view_functions["pgbus.overview"] = lambda: ("host page", 200, own)
    response = app.test_client().get("/pgbus/")
    assert response.headers.getlist("Content-Security-Policy") == [
        "default-src 'self'; img-src 'self' data:", "frame-ancestors 'self'"]
    assert response.headers.get("X-Frame-Options") == "SAMEORIGIN"
