"""The dashboard pages show runs in every state, in the words an operator reads."""

from __future__ import annotations

import re

import pytest
from flask import Flask

from pgbus_flask.web.presenter import NEXT_KEYS
from tests.support import work
from tests.support.webtools import CLOCK, count_testid, engine_of, seed_every_state, sql, text_of
from tests.workflows import FailsUntil, FansOut, PausesItself, ThreeSteps, WaitsForPayment


def card(page: str, name: str) -> str:
    found = re.search(rf'data-testid="card-{name}".*?class="card-number">([^<]+)<', page, re.S)
    assert found, name
    return found.group(1)


def says(sentence: str, text: str) -> bool:
    """``sentence`` is in ``text``, "just now" also matching a few seconds ago (the seed takes a moment),
    SECONDS a few seconds ("1 second", "4 seconds") and CLOCK a clock time, with its date on another day."""
    pattern = (re.escape(sentence).replace(re.escape("just now"), r"(?:just now|\d+ seconds? ago)")
               .replace("SECONDS", r"\d+ seconds?").replace("CLOCK", CLOCK))
    return re.search(pattern, text) is not None


def row_of(page: str, workflow_id: str) -> str:
    found = re.search(rf'<tr data-testid="run-row" data-workflow-id="{workflow_id}".*?</tr>', page, re.S)
    assert found, workflow_id
    return found.group(0)


def primary_buttons(page: str) -> list[str]:
    """The actions whose submit button is the page's primary one."""
    return re.findall(r'class="btn primary" data-testid="action-(\w+)-submit"', page)


def test_empty_overview(app: Flask) -> None:
    page = app.test_client().get("/pgbus/").get_data(as_text=True)
    assert "No workflow runs yet." in text_of(page)
    assert card(page, "ongoing") == card(page, "paused") == card(page, "attention") == "0"


def test_overview_cards_and_counts(app: Flask) -> None:
    with app.app_context():
        ThreeSteps.start(order_id=1)
        FailsUntil.start(fail_until=5)
        FailsUntil.start(fail_until=5)
        PausesItself.start()
        WaitsForPayment.start()
        work(engine_of(app))
    page = app.test_client().get("/pgbus/").get_data(as_text=True)
    assert (card(page, "ongoing"), card(page, "paused"), card(page, "attention")) == ("4", "3", "3")
    attention_card = re.search(r'<a [^>]*data-testid="card-attention".*?</a>', page, re.S)
    assert attention_card and text_of(attention_card.group(0)) == "Need attention 3", "the number is said once"
    assert 'href="/pgbus/attention"' in page and 'href="/pgbus/runs?status=paused"' in page
    fails = re.search(r'data-testid="counts-row" data-class="FailsUntil".*?</tr>', page, re.S)
    assert fails and 'href="/pgbus/runs?workflow_class=FailsUntil&amp;status=paused" data-testid="count-paused">2<' \
        in fails.group(0)


EXPECTED = {
    "scheduled": ("scheduled", "Scheduled: reserve runs at CLOCK."),
    "queued": ("queued", "Queued: reserve runs as soon as a worker is free (due just now)."),
    "overdue": ("overdue", "Overdue: reserve was due 10 minutes ago and no worker has taken it yet; "
                           "the sweep sends it again if its job was lost."),
    "running": ("running", "Running reserve (attempt 1), started 2 minutes ago."),
    "possibly_stalled": ("possibly_stalled", "Running reserve past its deadline, which passed 1 minute ago: its "
                                             "worker may have died; the sweep will declare it stalled."),
    "waiting_signal": ("waiting", "Waiting for signal go at wait for SECONDS."),
    "waiting_signal_deadline": ("waiting", "Waiting for signal payment_confirmed at confirm for SECONDS; "
                                           "the wait ends at CLOCK."),
    "waiting_batch": ("waiting", "Waiting for batch FansOut#notify_vendors (2 of 3 jobs done)."),
    "paused_error": ("paused_error", "Paused for SECONDS: capture failed with TimeoutError. Retry it to go on."),
    "stalled": ("stalled", "Paused for SECONDS: capture stalled (its worker stopped responding). "
                           "Retry it to go on."),
    "paused_manual": ("paused", "Paused at check for SECONDS; nothing runs until someone resumes it."),
    "finished": ("finished", "Finished just now."),
    "cancelled": ("cancelled", "Cancelled just now."),
}


def test_runs_list_shows_every_state(app: Flask) -> None:
    ids = seed_every_state(app)
    page = app.test_client().get("/pgbus/runs").get_data(as_text=True)
    assert count_testid(page, "run-row") == len(ids)
    for state, (badge, sentence) in EXPECTED.items():
        row = row_of(page, ids[state])
        assert f'data-testid="status-badge" data-value="{badge}"' in row, state
        assert says(sentence, text_of(row)), (state, text_of(row))
        assert "<time datetime=" in row


def test_every_next_key_is_covered_by_the_seed() -> None:
    # paused_failed: a failed step without an error class, which only a hand-made row has (test_presenter);
    # waiting_children: a parent and its child runs (tests/web/test_family_doors.py); waiting_slot, waiting_rate,
    # waiting_limit: runs in line for a limit or a rate (tests/web/test_web_limits.py)
    skipped = ("waiting", "waiting_any_signal", "paused_failed", "waiting_children", "waiting_slot", "waiting_rate",
               "waiting_limit")
    assert {key for key in NEXT_KEYS if key not in skipped} <= {
        "scheduled", "queued", "overdue", "running", "possibly_stalled", "waiting_signal", "waiting_signal_deadline",
        "waiting_batch", "paused_error", "stalled", "paused_manual", "finished", "cancelled"}


def test_every_run_page_renders(app: Flask) -> None:
    ids = seed_every_state(app)
    client = app.test_client()
    for state, workflow_id in ids.items():
        response = client.get(f"/pgbus/runs/{workflow_id}")
        assert response.status_code == 200, state
        page = response.get_data(as_text=True)
        header = re.search(r'data-testid="run-header".*?</header>', page, re.S)
        assert header and says(EXPECTED[state][1], text_of(header.group(0))), state
        assert count_testid(page, "timeline") == 1 and 'data-testid="timeline-legend"' in page


def test_runs_list_filters_are_kept_in_the_url(app: Flask) -> None:
    ids = seed_every_state(app)
    client = app.test_client()
    paused = client.get("/pgbus/runs?status=paused").get_data(as_text=True)
    assert count_testid(paused, "run-row") == 3
    assert '<option value="paused" selected>' in paused
    stuck = client.get("/pgbus/runs?reason=stalled").get_data(as_text=True)
    assert count_testid(stuck, "run-row") == 1 and ids["stalled"] in stuck
    by_class = client.get("/pgbus/runs?workflow_class=FailsUntil&step=capture").get_data(as_text=True)
    assert count_testid(by_class, "run-row") == 2 and 'value="capture"' in by_class
    subject = client.get("/pgbus/runs?subject=Order+3").get_data(as_text=True)
    assert count_testid(subject, "run-row") == 1 and ids["waiting_signal_deadline"] in subject
    text = client.get(f"/pgbus/runs?text={ids['finished'][:8]}").get_data(as_text=True)
    assert count_testid(text, "run-row") == 1
    assert "No runs match these filters." in text_of(client.get("/pgbus/runs?text=nothing-like-this").get_data(
        as_text=True))


def test_runs_list_pages_with_a_keyset_cursor(app: Flask) -> None:
    with app.app_context():
        for order in range(55):
            ThreeSteps.start(order_id=order, subject=("Order", order))
    client = app.test_client()
    first = client.get("/pgbus/runs?workflow_class=ThreeSteps").get_data(as_text=True)
    assert count_testid(first, "run-row") == 50
    found = re.search(r'href="([^"]+)" data-testid="next-page"', first)
    assert found and "workflow_class=ThreeSteps" in found.group(1) and "before=" in found.group(1)
    second = client.get(found.group(1).replace("&amp;", "&")).get_data(as_text=True)
    assert count_testid(second, "run-row") == 5 and 'data-testid="next-page"' not in second
    assert 'data-testid="first-page"' in second
    assert "Order 0" in text_of(second) and "Order 54" not in text_of(second)


@pytest.mark.parametrize("query", ["status=nope", "reason=nope", "before=abc"])
def test_bad_filters_are_a_readable_400(app: Flask, query: str) -> None:
    response = app.test_client().get(f"/pgbus/runs?{query}")
    assert response.status_code == 400
    assert 'data-testid="error-page"' in response.get_data(as_text=True)


@pytest.mark.settings(PGBUS_SUBJECT_URL=lambda kind, ident: f"/admin/{kind.lower()}s/{ident}")
def test_run_page_of_a_failed_run(app: Flask) -> None:
    with app.app_context():
        run = FailsUntil.start(fail_until=9, subject=("Order", 1042), note={"gift": True})
        work(engine_of(app))
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    text = text_of(page)
    assert '<a href="/admin/orders/1042" data-testid="subject">Order 1042</a>' in page
    assert 'data-testid="status-badge" data-value="paused_error"' in page
    # exactly the available actions the dashboard has buttons for, resume labelled by its plan
    assert re.findall(r'data-testid="action-(\w+)"', page) == ["resume", "resume_at", "skip", "cancel"]
    assert re.search(r'data-testid="action-resume-submit">\s*Retry <bdi dir="ltr">capture</bdi>\s*<', page)
    assert '<option value="capture" selected>capture</option><option value="notify" >notify</option>' in \
        page.replace("\n", "")
    # its step failed: nothing open to cancel, so neither cancel nor resume at step says it cancels one
    assert 'data-confirm="Cancel this FailsUntil run? Nothing else in it runs."' in page
    assert 'data-confirm="Resume this FailsUntil run at the chosen step?"' in page
    assert re.search(r'data-testid="action-cancel-submit">\s*Cancel run\s*<', page)
    assert re.search(r'data-testid="action-resume_at-submit">\s*Resume at step\s*<', page)
    assert count_testid(page, "signal-form") == 0, "no step of FailsUntil waits for a signal"
    attempt = re.search(r'data-testid="attempt-row" data-step="capture" data-attempt="1" data-status="failed"', page)
    assert attempt and "gateway timed out on attempt 1" in text
    assert 'data-testid="backtrace"' in page and "Traceback (most recent call last)" in page
    assert "Step failed (capture #1)" in text and "by system" not in text
    assert "Paused (capture #1): TimeoutError: gateway timed out on attempt 1" in text
    assert "Started by app" in text
    assert "&#34;gift&#34;: true" in page or "&quot;gift&quot;: true" in page
    assert 'data-testid="outdated-notice"' not in page


def test_run_page_of_a_finished_run_has_outputs_and_only_rerun(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(7, order_id=21)
        work(engine_of(app))
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert re.findall(r'data-testid="action-(\w+)"', page) == ["rerun"]
    assert count_testid(page, "signal-form") == 0
    outputs = re.search(r'data-testid="outputs">(.*?)</section>', page, re.S)
    assert outputs and "shipped 42" in outputs.group(1)
    assert count_testid(outputs.group(1), "output-value") == 3, "each step's output under its name"
    assert count_testid(page, "attempt-row") == 3 and count_testid(page, "timeline-bar") == 3


def test_run_page_of_a_waiting_run_lists_its_signals(app: Flask) -> None:
    with app.app_context():
        run = WaitsForPayment.start()
        work(engine_of(app))
        run.signal("unrelated", {"x": 1}, idempotency_key="k1")
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert re.findall(r'data-testid="action-(\w+)"', page) == ["resume_at", "skip", "cancel"]
    assert 'data-testid="signal-row" data-status="pending"' in page
    assert 'data-testid="signal-badge" data-value="pending">Pending<' in page
    assert "Signal received by app" in text_of(page)


def test_run_now_is_offered_for_a_step_scheduled_later(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
    sql(app, "UPDATE pgbus_workflow_steps SET scheduled_at = now() + interval '1 hour' WHERE workflow_id = %s",
        run.workflow_id)
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    assert re.findall(r'data-testid="action-(\w+)"', page) == ["run_now", "resume_at", "skip", "cancel"]
    assert primary_buttons(page) == ["run_now"]


def test_outdated_definition_and_missing_class_notices(app: Flask) -> None:
    with app.app_context():
        outdated = FailsUntil.start(fail_until=9)
        gone = FailsUntil.start(fail_until=9)
        work(engine_of(app))
    sql(app, "UPDATE pgbus_workflows SET definition_digest = 'old' WHERE workflow_id = %s", outdated.workflow_id)
    sql(app, "UPDATE pgbus_workflows SET workflow_class = 'RemovedWorkflow' WHERE workflow_id = %s", gone.workflow_id)
    client = app.test_client()
    page = client.get(f"/pgbus/runs/{outdated.workflow_id}").get_data(as_text=True)
    assert "This run started on an older definition of FailsUntil" in text_of(page)
    page = client.get(f"/pgbus/runs/{gone.workflow_id}").get_data(as_text=True)
    assert 'data-testid="class-missing-notice"' in page
    assert re.findall(r'data-testid="action-(\w+)"', page) == ["cancel"]


def test_attention_page_groups_with_bulk_confirms(app: Flask) -> None:
    with app.app_context():
        for _ in range(3):
            FailsUntil.start(fail_until=9)
        PausesItself.start()
        ThreeSteps.start(order_id=1)
        work(engine_of(app))
        overdue = ThreeSteps.start(order_id=2)
    sql(app, "UPDATE pgbus_workflow_steps SET scheduled_at = now() - interval '1 hour' WHERE workflow_id = %s",
        overdue.workflow_id)
    page = app.test_client().get("/pgbus/attention").get_data(as_text=True)
    groups = re.findall(r'<section class="panel group" data-testid="attention-group".*?</section>', page, re.S)
    assert len(groups) == 3
    first = groups[0]
    assert 'data-class="FailsUntil" data-step="capture" data-reason="paused_error"' in first
    assert 'data-testid="group-count">3<' in first
    assert 'data-confirm="Resume all 3 runs paused at capture on TimeoutError?"' in first
    assert "gateway timed out on attempt 1" in text_of(first)
    assert ('href="/pgbus/runs?workflow_class=FailsUntil&amp;reason=paused_error&amp;step=capture'
            '&amp;error_class=TimeoutError"') in first
    assert re.findall(r'data-testid="bulk-(\w+)"', first) == ["resume", "skip", "cancel"]
    assert re.findall(r'class="btn ([a-z]*)" data-testid="bulk-(\w+)-submit"', first) == [
        ("primary", "resume"), ("danger", "skip"), ("danger", "cancel")]
    assert "Resume these 3 runs" in text_of(first) and "Skip the step in these 3 runs" in text_of(first)
    overdue_group = next(g for g in groups if 'data-reason="overdue"' in g)
    assert re.findall(r'data-testid="bulk-(\w+)"', overdue_group) == ["skip", "cancel"]
    runs = app.test_client().get("/pgbus/runs?workflow_class=FailsUntil&reason=paused_error&step=capture")
    assert count_testid(runs.get_data(as_text=True), "run-row") == 3


def test_attention_page_when_nothing_is_stuck(app: Flask) -> None:
    assert "No run needs attention." in text_of(app.test_client().get("/pgbus/attention").get_data(as_text=True))


def test_batch_page(app: Flask) -> None:
    from tests.support.webtools import work_some

    with app.app_context():
        run = FansOut.start(n=4, fail_at=0, on_child_failure="ignore", subject=("Order", 4))
        work_some(engine_of(app), 1)
        work_some(engine_of(app), 3)
    client = app.test_client()
    run_page = client.get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    link = re.search(r'<a href="(/pgbus/batches/\d+)"><code', run_page)
    assert link, "the next-step sentence links the batch"
    assert "Waiting for batch FansOut#notify_vendors (2 of 4 jobs done)." in text_of(run_page)
    page = client.get(link.group(1)).get_data(as_text=True)
    assert 'data-testid="batch-progress" data-done="2" data-failed="1" data-total="4"' in page
    assert "2 of 4 jobs done, 1 failed" in text_of(page)
    assert count_testid(page, "batch-child") == 4 and count_testid(page, "batch-bar") == 1
    assert "vendor 0 is down" in text_of(page) and "vendor 1 notified" in page
    # it names its run, class and subject, and numbers its children as people count: from 1
    assert "Batch FansOut#notify_vendors" in text_of(page)
    assert f'href="/pgbus/runs/{run.workflow_id}" data-testid="batch-run" dir="ltr">{run.workflow_id}<' in page
    assert 'data-testid="batch-class"><bdi>FansOut</bdi>' in page
    assert 'data-testid="subject">Order 4<' in page
    numbers = re.findall(r'data-testid="batch-child" data-status="\w+">\s*<td class="num">(\d+)</td>', page)
    assert numbers == ["1", "2", "3", "4"]
    first = re.search(r'<tr data-testid="batch-child" data-status="failed">.*?</tr>', page, re.S)
    assert first and "vendor 0 is down" in first.group(0) and text_of(first.group(0)).startswith("1 ")
    assert client.get("/pgbus/batches/999999").status_code == 404


@pytest.mark.parametrize("workflow_id", ["00000000-0000-0000-0000-000000000000", "not-a-uuid", "1;DROP"])
def test_unknown_run_is_a_404_page(app: Flask, workflow_id: str) -> None:
    response = app.test_client().get(f"/pgbus/runs/{workflow_id}")
    assert response.status_code == 404
    assert "No workflow run has the id" in text_of(response.get_data(as_text=True))


def test_static_assets_are_served_by_the_blueprint(app: Flask) -> None:
    client = app.test_client()
    page = client.get("/pgbus/").get_data(as_text=True)
    assert 'href="/pgbus/static/pgbus.css"' in page and 'src="/pgbus/static/pgbus.js"' in page
    css = client.get("/pgbus/static/pgbus.css")
    assert css.status_code == 200 and b"prefers-color-scheme: dark" in css.data
    assert client.get("/pgbus/static/pgbus.js").status_code == 200
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_the_timeline_shows_the_wait_of_a_woken_step(app: Flask) -> None:
    with app.app_context():
        run = WaitsForPayment.start()
        work(engine_of(app))
        run.signal("payment_confirmed", {"ok": True})
        work(engine_of(app))
    page = app.test_client().get(f"/pgbus/runs/{run.workflow_id}").get_data(as_text=True)
    chart = page[page.index('data-testid="timeline"'):page.index("</svg>")]
    assert re.search(r'<rect class="tl-waiting"[^>]*><title>confirm #1: Waiting, ', chart)
    assert re.search(r'<rect class="tl-ran_ok"[^>]*><title>ship #1: Ran OK, ', chart)


# -- hostile query values: a clear 400 naming the parameter, never a 500 ------------------------------

@pytest.mark.parametrize("url", [
    *(f"/pgbus/runs?{name}=a%00b" for name in ("workflow_class", "status", "step", "reason", "error_class",
                                                "subject", "text", "before")),
    "/pgbus/runs?text=%1B%5B31m", "/pgbus/attention?workflow_class=%00",
])
def test_a_control_character_in_a_filter_is_a_400_naming_it(app: Flask, url: str) -> None:
    response = app.test_client().get(url)
    assert response.status_code == 400
    text = text_of(response.get_data(as_text=True))
    name = url.split("?")[1].split("=")[0]
    assert f"The value of {name} contains a control character (such as NUL)" in text, text


@pytest.mark.parametrize("value", ["%C2%B2", "0", "-1", "+1", "%201", "1_0", "%D9%A1", "1.5", "9" * 20, str(2**63)])
def test_a_bad_page_cursor_is_a_400_naming_before(app: Flask, value: str) -> None:
    response = app.test_client().get(f"/pgbus/runs?before={value}")
    assert response.status_code == 400
    assert "before must be a whole number from 1 to 9223372036854775807" in text_of(response.get_data(as_text=True))


@pytest.mark.parametrize("value", ["abc", "-1", "0", "%C2%B2", str(2**63)])
def test_a_bad_batch_id_is_a_400_naming_it(app: Flask, value: str) -> None:
    response = app.test_client().get(f"/pgbus/batches/{value}")
    assert response.status_code == 400
    assert "batch_id must be a whole number" in text_of(response.get_data(as_text=True))
    assert app.test_client().get(f"/pgbus/batches/{2**63 - 1}").status_code == 404


def test_a_lone_surrogate_in_the_url_is_not_a_500(app: Flask) -> None:
    client = app.test_client()
    for url in ("/pgbus/runs?text=%ED%A0%80", "/pgbus/runs/%ED%A0%80", "/pgbus/attention?workflow_class=%ED%B3%BF"):
        assert client.get(url).status_code < 500, url


# -- the operator's page: what needs a person, the buttons, the signal form, the trail ---------------------


def run_page(app: Flask, workflow_id: object) -> str:
    return app.test_client().get(f"/pgbus/runs/{workflow_id}").get_data(as_text=True)


def buttons(page: str) -> dict[str, str]:
    """Each action's submit button as the operator reads it."""
    found = re.findall(r'data-testid="action-(\w+)-submit">(.*?)</button>', page, re.S)
    return {action: text_of(label) for action, label in found}


@pytest.mark.settings(PGBUS_WAITING_THRESHOLD=3600)
def test_a_fan_out_stuck_for_days_is_marked_in_every_list(app: Flask) -> None:
    from tests.support.webtools import work_some

    with app.app_context():
        stuck = FansOut.start(n=3, subject=("Order", 7))
        work_some(engine_of(app), 1)  # the step opens its batch; its children never run
        fresh = WaitsForPayment.start()  # ready at invoice: not stuck
    sql(app, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '3 days' WHERE workflow_id = %s",
        stuck.workflow_id)
    client = app.test_client()
    runs = client.get("/pgbus/runs").get_data(as_text=True)
    row = row_of(runs, str(stuck.workflow_id))
    assert 'data-testid="status-badge" data-value="waiting"' in row
    assert 'data-testid="attention-badge" data-value="waiting_overdue"' in row
    assert "Waiting ⚠ Waiting too long" in text_of(row)
    assert "Waiting for batch FansOut#notify_vendors (0 of 3 jobs done)." in text_of(row)
    assert 'data-testid="attention-badge"' not in row_of(runs, str(fresh.workflow_id))

    filtered = client.get("/pgbus/runs?reason=waiting_overdue").get_data(as_text=True)
    assert re.findall(r'data-testid="run-row" data-workflow-id="([^"]+)"', filtered) == [str(stuck.workflow_id)]
    attention = client.get("/pgbus/attention").get_data(as_text=True)
    assert 'data-class="FansOut" data-step="notify_vendors" data-reason="waiting_overdue"' in attention
    assert re.findall(r'data-testid="bulk-(\w+)"', attention) == ["skip", "cancel"]
    assert "Cancel the run at notify_vendors?" in text_of(attention)

    header = re.search(r'data-testid="run-header".*?</header>', run_page(app, stuck.workflow_id), re.S)
    assert header and 'data-testid="attention-badge" data-value="waiting_overdue"' in header.group(0)

    overview = client.get("/pgbus/").get_data(as_text=True)
    assert card(overview, "attention") == "1"
    fans = re.search(r'data-testid="counts-row" data-class="FansOut".*?</tr>', overview, re.S)
    assert fans
    marker = re.search(r'<a class="count-attention" href="([^"]+)" data-testid="count-attention-waiting"'
                       r' data-value="waiting_overdue" title="Waiting too long">(.*?)</a>', fans.group(0), re.S)
    assert marker and text_of(marker.group(2)) == "⚠ 1 needs attention"
    assert marker.group(1) == "/pgbus/runs?workflow_class=FansOut&amp;reason=waiting_overdue"
    assert "count-attention" not in overview.split('data-class="WaitsForPayment"')[1].split("</tr>")[0]


def test_without_a_waiting_threshold_no_wait_is_marked(app: Flask) -> None:
    from tests.support.webtools import work_some

    with app.app_context():
        stuck = FansOut.start(n=3)
        work_some(engine_of(app), 1)
    sql(app, "UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '3 days' WHERE workflow_id = %s",
        stuck.workflow_id)
    runs = app.test_client().get("/pgbus/runs").get_data(as_text=True)
    assert 'data-testid="attention-badge"' not in runs
    assert "count-attention" not in app.test_client().get("/pgbus/").get_data(as_text=True)


def test_every_run_the_attention_card_counts_is_marked_in_the_runs_list(app: Flask) -> None:
    ids = seed_every_state(app)
    client = app.test_client()
    runs = client.get("/pgbus/runs").get_data(as_text=True)
    row_or_marker = (r'data-testid="run-row" data-workflow-id="([^"]+)"'
                     r'.*?(?:data-testid="attention-badge" data-value="(\w+)"|</tr>)')
    marked = {wid: reason for wid, reason in re.findall(row_or_marker, runs, re.S) if reason}
    assert marked == {ids["paused_error"]: "paused_error", ids["stalled"]: "stalled",
                      ids["paused_manual"]: "paused_manual", ids["overdue"]: "overdue"}
    assert card(client.get("/pgbus/").get_data(as_text=True), "attention") == str(len(marked))


def test_overview_numbers_sit_under_right_aligned_headers(app: Flask) -> None:
    with app.app_context():
        FailsUntil.start(fail_until=9)
        work(engine_of(app))
    page = app.test_client().get("/pgbus/").get_data(as_text=True)
    for table in ("counts-table", "stuck-table"):
        found = re.search(rf'data-testid="{table}">\s*<thead>(.*?)</thead>', page, re.S)
        assert found, table
        headers = re.findall(r'<th scope="col"( class="num")?>', found.group(1))
        assert headers[0] == "" and all(h == ' class="num"' for h in headers[1:]), (table, headers)
        body = page[found.end():page.index("</table>", found.end())]
        assert re.findall(r"<td( class=\"num\")?>", body) and all(
            c == ' class="num"' for c in re.findall(r"<td( class=\"num\")?>", body))


def test_the_primary_button_is_the_resume_plan_and_the_others_say_what_they_cancel(app: Flask) -> None:
    with app.app_context():
        failed = FailsUntil.start(fail_until=9)
        waiting = WaitsForPayment.start()
        work(engine_of(app))
        paused_waiting = WaitsForPayment.start()
        work(engine_of(app))
        paused_waiting.pause(actor="cli:bob", reason="check the invoice")
        finished = ThreeSteps.start(order_id=1)
        work(engine_of(app))

    page = run_page(app, failed.workflow_id)  # its step failed: nothing is open
    assert primary_buttons(page) == ["resume"]
    assert buttons(page) == {"resume": "Retry capture", "resume_at": "Resume at step", "skip": "Skip step",
                             "cancel": "Cancel run"}

    page = run_page(app, paused_waiting.workflow_id)  # paused while its step waits for a signal
    assert primary_buttons(page) == ["resume"]
    assert buttons(page) == {"resume": "Keep waiting at confirm",
                             "resume_at": "Cancel confirm and resume at the chosen step",
                             "skip": "Skip step", "cancel": "Cancel the run and its open step confirm"}
    # The verbs that drop work that cannot be got back (the verb table's "destructive") are drawn as a warning.
    assert 'class="btn danger" data-testid="action-cancel-submit"' in page
    assert 'class="btn danger" data-testid="action-skip-submit"' in page
    assert 'class="btn " data-testid="action-resume_at-submit"' in page
    assert 'data-confirm="Cancel the open step and resume this WaitsForPayment run at the chosen step?"' in page

    page = run_page(app, waiting.workflow_id)  # waiting, not paused: no plan, and nothing to push on with
    assert primary_buttons(page) == []
    assert list(buttons(page)) == ["resume_at", "skip", "cancel"]
    assert buttons(page)["cancel"] == "Cancel the run and its open step confirm"

    assert primary_buttons(run_page(app, finished.workflow_id)) == ["rerun"]


def test_the_signal_form_shows_only_where_a_signal_can_matter(app: Flask) -> None:
    from tests.support.webtools import work_some

    with app.app_context():
        waiting = WaitsForPayment.start()
        work(engine_of(app))  # parks at confirm, waiting for payment_confirmed
        batch = FansOut.start(n=2)
        work_some(engine_of(app), 1)  # waits for its batch: no signal ends that wait
        before_the_wait = WaitsForPayment.start()  # ready at invoice: its wait is still ahead
        plain = ThreeSteps.start(order_id=1)  # no step of its class waits for a signal
    shown = {name: count_testid(run_page(app, run.workflow_id), "signal-form")
             for name, run in (("batch", batch), ("waiting", waiting), ("before the wait", before_the_wait),
                               ("plain", plain))}
    assert shown == {"batch": 0, "waiting": 1, "before the wait": 1, "plain": 0}
    with app.app_context():
        waiting.cancel(reason="gone")
    assert count_testid(run_page(app, waiting.workflow_id), "signal-form") == 0


def test_the_audit_trail_reads_oldest_to_newest_and_names_unknown_events(app: Flask) -> None:
    with app.app_context():
        run = ThreeSteps.start(order_id=1)
        work(engine_of(app))
    sql(app, "INSERT INTO pgbus_workflow_events (workflow_id, event, actor) VALUES (%s, 'invoice_mailed', 'app')",
        run.workflow_id)
    page = run_page(app, run.workflow_id)
    trail = re.search(r'<ul class="audit" data-testid="audit-trail">(.*?)</ul>', page, re.S)
    assert trail, "the trail is a list without numbers"
    events = re.findall(r'data-event="(\w+)"', trail.group(1))
    assert events[0] == "started" and events[-2:] == ["finished", "invoice_mailed"]
    assert "Invoice mailed by app" in text_of(trail.group(1)) and "invoice_mailed by" not in text_of(page)
