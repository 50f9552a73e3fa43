"""The dashboard's words and small HTML pieces (no database): subject links, sentences, labels, timeline."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from flask import Flask
from markupsafe import Markup

from pgbus_flask import states, verbs
from pgbus_flask.config import Settings
from pgbus_flask.engine import Engine
from pgbus_flask.queries import AttentionGroup
from pgbus_flask.runner import ResumePlan
from pgbus_flask.web import helpers, make_blueprint, timeline
from pgbus_flask.web.presenter import NEXT_KEYS, Presentation
from tests.support.webtools import text_of

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
def ctx() -> Iterator[Flask]:
    """A request context of an app with the dashboard (its engine never connects here)."""
    engine = Engine(Settings.load({"PGBUS_DATABASE_URL": "postgresql://localhost/none",
                                   "PGBUS_REDIS_URL": "redis://localhost:6399"}))
    app = Flask("helpers_test")
    app.register_blueprint(make_blueprint(engine), url_prefix="/pgbus")
    with app.test_request_context("/pgbus/"):
        yield app


@pytest.mark.parametrize(("url", "linked"), [
    ("https://shop.example.com/orders/1042", True),
    ("http://shop.example.com/orders/1042", True),
    ("HTTPS://shop.example.com/x", True),
    ("  https://shop.example.com/x  ", True),
    ("/admin/orders/1042", True),
    ("/", True),
    ("javascript:alert(1)", False),
    ("JavaScript:alert(1)", False),
    (" javascript:alert(1)", False),
    ("data:text/html,<script>alert(1)</script>", False),
    ("vbscript:msgbox(1)", False),
    ("//evil.example.com/x", False),
    ("/\\evil.example.com", False),
    ("/\t/evil.example.com", False),
    ("/\n/evil.example.com", False),
    ("https://", False),
    ("http:///path-only", False),
    ("ftp://files.example.com/x", False),
    ("orders/1042", False),
    ("../orders/1042", False),
    ("", False),
    (None, False),
    ("mailto:ops@example.com", False),
])
def test_safe_url_rule(url: Any, linked: bool) -> None:
    assert (helpers.safe_url(url) is not None) is linked


def test_subject_link_uses_the_builder(ctx: Flask) -> None:
    link = helpers.subject_link(lambda t, i: f"/admin/{t.lower()}s/{i}", "Order", "1042")
    assert link == Markup('<bdi><a href="/admin/orders/1042" data-testid="subject">Order 1042</a></bdi>')


def test_subject_link_refuses_an_unsafe_url(ctx: Flask) -> None:
    link = helpers.subject_link(lambda t, i: "javascript:alert(1)", "Order", "1042")
    assert "href" not in link and "Order 1042" in link


def test_subject_link_escapes_the_subject(ctx: Flask) -> None:
    link = helpers.subject_link(None, "<script>alert(1)</script>", "<b>1</b>")
    assert "<script>" not in link and "&lt;script&gt;alert(1)&lt;/script&gt; &lt;b&gt;1&lt;/b&gt;" in link


def test_subject_link_with_a_builder_that_raises_is_logged_and_plain(
        ctx: Flask, caplog: pytest.LogCaptureFixture) -> None:
    def broken(kind: str, ident: str) -> str:
        raise KeyError(ident)

    with caplog.at_level(logging.ERROR, logger="pgbus_flask.web"):
        link = helpers.subject_link(broken, "Order", "1042")
    assert link == Markup('<bdi><span data-testid="subject">Order 1042</span></bdi>')
    assert "PGBUS_SUBJECT_URL raised for Order 1042" in caplog.text


def test_no_subject_is_a_dash(ctx: Flask) -> None:
    assert helpers.subject_link(lambda t, i: "/x", None, None) == "—"


@pytest.mark.parametrize(("plan", "label"), [
    (ResumePlan("retry", "capture"), "Retry capture"),
    (ResumePlan("continue", "ship"), "Continue with ship"),
    (ResumePlan("finish", None), "Finish the run"),
    (ResumePlan("keep_waiting", "confirm"), "Keep waiting at confirm"),
    (ResumePlan("run", "reserve"), "Run reserve"),
    (ResumePlan("let_finish", "slow"), "Let slow finish"),
    (None, "Resume"),
])
def test_resume_label(ctx: Flask, plan: ResumePlan | None, label: str) -> None:
    shown = helpers.resume_label(plan)
    assert re.sub('</?bdi( dir="ltr")?>', "", shown) == label
    if plan is not None and plan.step:
        assert f'<bdi dir="ltr">{plan.step}</bdi>' in shown, "the step name is isolated, left to right"


def test_every_resume_action_has_a_label() -> None:
    assert set(helpers.RESUME_LABELS) == set(states.RESUME_ACTIONS)


def test_audit_sentences(ctx: Flask) -> None:
    assert helpers.audit_sentence({"event": "resumed", "actor": "dashboard:alice", "reason": "SMTP fixed",
                                   "step_name": None}) == "Resumed by dashboard:alice: SMTP fixed"
    assert helpers.audit_sentence({"event": "step_failed", "actor": "system", "reason": None,
                                   "step_name": "capture", "attempt": 2}) == "Step failed (capture #2)"
    assert helpers.audit_sentence({"event": "paused", "actor": "cli:bob", "reason": "maintenance",
                                   "step_name": "ship", "attempt": 1}) == "Paused by cli:bob (ship #1): maintenance"


def test_an_unknown_event_reads_as_its_name_in_words(ctx: Flask) -> None:
    """An event a newer version wrote, which this one has no label for."""
    assert helpers.audit_sentence({"event": "something_new", "actor": "app"}) == "Something new by app"
    assert helpers.audit_sentence({"event": "webhook__sent", "actor": "system"}) == "Webhook sent"
    assert helpers.humanize("x") == "X"


def group(count: int, error: str | None = "TimeoutError", reason: str = "paused_error") -> AttentionGroup:
    return AttentionGroup("OrderWorkflow", "capture", reason, error, count, NOW, NOW, "boom")


def test_bulk_confirm_sentences(ctx: Flask) -> None:
    assert helpers.bulk_confirm("resume", group(3)) == "Resume all 3 runs paused at capture on TimeoutError?"
    assert helpers.bulk_confirm("resume", group(1)) == "Resume the run paused at capture on TimeoutError?"
    assert helpers.bulk_confirm("resume", group(2, None, "paused_manual")) == "Resume all 2 runs paused at capture?"
    assert helpers.bulk_confirm("skip", group(4)) == "Skip capture in all 4 runs paused there on TimeoutError?"
    # Overdue runs are queued, not paused or stopped: the sentence says neither.
    assert helpers.bulk_confirm("cancel", group(5, None, "overdue")) == "Cancel all 5 runs at capture?"
    assert helpers.bulk_confirm("skip", group(1, None, "overdue")) == "Skip capture in this run?"
    assert helpers.bulk_confirm("cancel", group(1, None, "waiting_overdue")) == "Cancel the run at capture?"


def test_bulk_buttons_count_the_runs(ctx: Flask) -> None:
    assert helpers.bulk_button("resume", 1) == "Resume this run"
    assert helpers.bulk_button("resume", 3) == "Resume these 3 runs"
    assert helpers.bulk_button("skip", 1) == "Skip the step in this run"
    assert helpers.bulk_button("cancel", 2) == "Cancel these 2 runs"


def test_bulk_confirm_in_german_and_japanese(ctx: Flask) -> None:
    from flask import g

    g.pgbus_locale = "de"
    assert helpers.bulk_confirm("resume", group(3)) == (
        "Alle 3 Läufe fortsetzen, die bei capture wegen TimeoutError pausiert sind?")
    assert helpers.bulk_confirm("resume", group(1)) == (
        "Den Lauf fortsetzen, der bei capture wegen TimeoutError pausiert ist?")
    g.pgbus_locale = "ja"
    assert helpers.bulk_confirm("resume", group(3)) == (
        "capture で TimeoutError により一時停止している 3 件の実行をすべて再開しますか？")


def test_every_state_has_a_label() -> None:
    assert set(helpers.RUN_STATUS_LABELS) == set(states.RUN_STATUSES)
    assert set(helpers.STEP_STATUS_LABELS) == set(states.STEP_STATUSES)
    assert set(helpers.SIGNAL_STATUS_LABELS) == set(states.SIGNAL_STATUSES)
    assert set(helpers.CHILD_STATUS_LABELS) == set(states.CHILD_STATUSES)
    assert set(helpers.STUCK_REASON_LABELS) == set(states.STUCK_REASONS)
    assert set(helpers.EVENT_LABELS) == set(states.EVENTS)
    assert set(helpers.ACTION_LABELS) == set(verbs.ACTIONS)
    # Every bulk verb has its own words for one run (the table makes each field required).
    assert len({verbs.BY_NAME[action].bulk.one for action in verbs.BULK_ACTIONS}) == len(verbs.BULK_ACTIONS) == 3
    assert set(helpers.BULK_BY_REASON) == set(states.STUCK_REASONS)
    assert set(helpers.NEXT_MESSAGES) | {"waiting_batch", "waiting_children", "waiting_slot"} == set(NEXT_KEYS)


def test_dashboard_actions_are_the_available_ones_it_has_buttons_for() -> None:
    assert helpers.dashboard_actions(["pause", "resume", "cancel", "signal"]) == ["resume", "cancel"]
    assert helpers.dashboard_actions(["rerun"]) == ["rerun"]


def test_badges_carry_tone_and_value(ctx: Flask) -> None:
    assert helpers.step_badge("failed") == Markup(
        '<span class="pgbus-badge tone-red" data-testid="step-badge" data-value="failed">Failed</span>')
    assert 'data-testid="signal-badge"' in helpers.signal_badge("pending")
    assert ">Failed, paused<" in helpers.run_badge(Presentation("paused_error", "red", "paused_error"))


def test_next_sentence_marks_up_names_and_times_and_escapes_the_rest(ctx: Flask) -> None:
    p = Presentation("paused_error", "red", "paused_error",
                     {"step": "<b>capture</b>", "error": "<script>alert(1)</script>",
                      "since": NOW - timedelta(minutes=3)})
    html = helpers.next_sentence(p, NOW)
    assert "<script>" not in html and "<b>" not in html
    assert '<code class="pgbus-code" dir="ltr">&lt;script&gt;alert(1)&lt;/script&gt;</code>' in html
    assert '<time datetime="2026-05-04T11:57:00+00:00"' in html
    assert text_of(html) == (
        "Paused for 3 minutes: <b>capture</b> failed with <script>alert(1)</script>. Retry it to go on.")


def test_waiting_for_a_batch_sentence_links_the_batch(ctx: Flask) -> None:
    p = Presentation("waiting", "yellow", "waiting_batch",
                     {"step": "notify_vendors", "batch": "notify_vendors", "batch_id": 9, "done": 7, "total": 12,
                      "failed": 0, "ago": NOW})
    html = helpers.next_sentence(p, NOW)
    assert '<a href="/pgbus/batches/9">' in html
    assert text_of(html) == "Waiting for batch notify_vendors (7 of 12 jobs done)."
    one = Presentation("waiting", "yellow", "waiting_batch",
                       {"step": "n", "batch": "n", "batch_id": 9, "done": 0, "total": 1, "failed": 0, "ago": NOW})
    assert text_of(helpers.next_sentence(one, NOW)) == "Waiting for batch n (0 of 1 job done)."


def test_waiting_for_child_runs_says_how_many(ctx: Flask) -> None:
    one = Presentation("waiting", "yellow", "waiting_children", {"step": "ship_all", "total": 1, "since": NOW})
    many = Presentation("waiting", "yellow", "waiting_children", {"step": "ship_all", "total": 3, "since": NOW})
    assert text_of(helpers.next_sentence(one, NOW)).startswith("Waiting at ship_all for 1 child run to end, for ")
    assert text_of(helpers.next_sentence(many, NOW)).startswith("Waiting at ship_all for 3 child runs to end, for ")


def test_every_next_key_renders(ctx: Flask) -> None:
    args = {"step": "s", "signal": "go", "error": "E", "ago": NOW, "since": NOW, "time": NOW + timedelta(hours=1),
            "attempt": 2, "batch": "s", "batch_id": 1, "done": 1, "total": 2, "failed": 0, "limit": "stripe",
            "rate": "api", "kind": "step", "key": "42", "capacity": 2, "running": 2, "waiting": 5, "per_seconds": 1.0}
    for key in NEXT_KEYS:
        sentence = text_of(helpers.next_sentence(Presentation("x", "gray", key, args), NOW))
        assert sentence.endswith(".") and "%(" not in sentence, key


def step_row(name: str, attempt: int, status: str, **cols: Any) -> dict[str, Any]:
    base = {"step_name": name, "attempt": attempt, "status": status, "created_at": NOW, "scheduled_at": NOW,
            "started_at": None, "finished_at": None, "waiting_since": None}
    base.update(cols)
    return base


def test_timeline_segments() -> None:
    t = NOW
    failed = step_row("capture", 1, "failed", scheduled_at=t + timedelta(seconds=5),
                      started_at=t + timedelta(seconds=6), finished_at=t + timedelta(seconds=9))
    assert [(s.series, (s.end - s.start).total_seconds()) for s in timeline.attempt_segments(failed, t)] == [
        ("waited", 5.0), ("queued", 1.0), ("ran_failed", 3.0)]
    waiting = step_row("confirm", 1, "waiting", started_at=t, waiting_since=t + timedelta(seconds=1))
    now = t + timedelta(minutes=2)
    assert [s.series for s in timeline.attempt_segments(waiting, now)] == ["ran_ok", "waiting"]
    woken = step_row("confirm", 1, "completed", started_at=t + timedelta(seconds=70),
                     waiting_since=t + timedelta(seconds=1), scheduled_at=t + timedelta(seconds=60),
                     finished_at=t + timedelta(seconds=71))
    assert [(s.series, (s.end - s.start).total_seconds()) for s in timeline.attempt_segments(woken, now)] == [
        ("ran_ok", 1.0), ("waiting", 59.0), ("queued", 10.0), ("ran_ok", 1.0)]
    running = step_row("ship", 1, "in_progress", started_at=t)
    assert [s.series for s in timeline.attempt_segments(running, now)] == ["running"]
    cancelled = step_row("ship", 2, "cancelled", started_at=t, finished_at=now)
    assert [s.series for s in timeline.attempt_segments(cancelled, now)] == ["cancelled"]
    events = [{"event": "paused", "created_at": t}, {"event": "resumed", "created_at": t + timedelta(minutes=1)},
              {"event": "paused", "created_at": t + timedelta(minutes=1, seconds=30)}]
    assert [(s.start, s.end) for s in timeline.paused_intervals(events, now)] == [
        (t, t + timedelta(minutes=1)), (t + timedelta(minutes=1, seconds=30), now)]


def test_timeline_svg_has_a_title_on_every_bar_and_a_translated_legend(ctx: Flask) -> None:
    from flask import g

    steps = [step_row("capture", 1, "failed", started_at=NOW, finished_at=NOW + timedelta(seconds=3)),
             step_row("<script>x</script>", 2, "completed", scheduled_at=NOW + timedelta(seconds=3),
                      created_at=NOW + timedelta(seconds=3), started_at=NOW + timedelta(seconds=4),
                      finished_at=NOW + timedelta(seconds=5))]
    events = [{"event": "paused", "created_at": NOW + timedelta(seconds=3)},
              {"event": "resumed", "created_at": NOW + timedelta(seconds=4)}]
    svg = timeline.render(steps, events, NOW + timedelta(seconds=10))
    assert svg.startswith('<div class="timeline-scroll" dir="ltr"><svg') and "<script>" not in svg
    chart = svg[: svg.index("</svg>")]
    bars = chart.count('<rect class="tl-')  # the drawn bars (the labels' clip path has a rect of its own)
    assert bars == len(re.findall(r"<rect [^>]*><title>[^<]+</title></rect>", chart)) > 0
    assert svg.count('data-testid="timeline-bar"') == 3  # two attempts and the paused row
    assert "capture #1: Ran, failed, 3 sec" in svg
    for series in timeline.SERIES:
        assert f'class="tl-{series}"' in svg
    g.pgbus_locale = "de"
    legend = timeline.render(steps, events, NOW + timedelta(seconds=10))
    assert "Ausgeführt, fehlgeschlagen" in legend and "Auf Termin gewartet" in legend


def test_no_attempts_no_chart() -> None:
    assert timeline.render([], [], NOW) == ""


# -- text that cannot reorder the page -------------------------------------------------------------

RLO, FSI, LRI, PDI = "\u202e", "\u2068", "\u2066", "\u2069"


def test_bdi_isolates_escapes_and_closes_what_the_value_opens() -> None:
    from pgbus_flask.web.i18n import bdi

    assert bdi(f"<b>{RLO}x</b>") == Markup(f"<bdi>&lt;b&gt;{RLO}x&lt;/b&gt;</bdi>")
    # a stray PDI would close the isolate around it; an opened one is closed before </bdi>
    assert bdi(f"a{PDI}b{FSI}c") == Markup(f"<bdi>ab{FSI}c{PDI}</bdi>")
    assert bdi(Markup("<code>x</code>")) == Markup("<bdi><code>x</code></bdi>"), "Markup is not escaped twice"


def test_isolated_wraps_plain_text_only_when_it_could_reorder() -> None:
    from pgbus_flask.web.i18n import isolated

    assert isolated("capture") == "capture"
    assert isolated(f"cap{RLO}ture") == f"{FSI}cap{RLO}ture{PDI}"
    assert isolated("שלום") == f"{FSI}שלום{PDI}"
    assert isolated(f"x{PDI}{RLO}") == f"{FSI}x{RLO}{PDI}", "its own PDI cannot end the isolate early"


def test_sentences_isolate_their_names_in_html_and_in_confirm_dialogs(ctx: Flask) -> None:
    event = {"event": "resumed", "actor": f"dashboard:{RLO}eve", "reason": f"{RLO}<i>why</i>",
             "step_name": "capture", "attempt": 1}
    html = helpers.audit_sentence(event, helpers.HTML)
    assert isinstance(html, Markup)
    assert html == (f'Resumed by <bdi>dashboard:{RLO}eve</bdi> (<bdi dir="ltr">capture</bdi> #1): '
                    f"<bdi>{RLO}&lt;i&gt;why&lt;/i&gt;</bdi>")
    assert helpers.audit_sentence(event) == f"Resumed by dashboard:{RLO}eve (capture #1): {RLO}<i>why</i>"
    hostile = AttentionGroup("OrderWorkflow", f"{RLO}capture", "paused_error", "TimeoutError", 2, NOW, NOW, "boom")
    # a name from code is isolated left to right (LRI, <bdi dir="ltr">): its override cannot escape, and
    # a name that mixes scripts keeps the order it has in the code inside a right-to-left sentence
    assert helpers.bulk_confirm("resume", hostile, helpers.TEXT) == (
        f"Resume all 2 runs paused at {LRI}{RLO}capture{PDI} on TimeoutError?")
    assert helpers.bulk_confirm("resume", hostile, helpers.HTML) == (
        f'Resume all 2 runs paused at <bdi dir="ltr">{RLO}capture</bdi> on <bdi dir="ltr">TimeoutError</bdi>?')
    assert helpers.action_confirm("skip", "Order", f"{RLO}ship", helpers.TEXT) == (
        f"Skip {LRI}{RLO}ship{PDI} and go on with the next step?")
    assert helpers.action_confirm("skip", "Billing.חשבונית", "charge_فاتورة", helpers.TEXT) == (
        f"Skip {LRI}charge_فاتورة{PDI} and go on with the next step?")


def test_identifier_isolates_a_name_from_code_left_to_right_when_its_order_could_change() -> None:
    from pgbus_flask.web.i18n import identifier

    assert identifier("capture") == "capture" and identifier("Billing.Invoice") == "Billing.Invoice"
    assert identifier("חשבונית.Billing") == f"{LRI}חשבונית.Billing{PDI}", "not FSI: it would read right to left"
    run_id = "070f55b4-dd57-479d-ba44-d282514efd58"
    assert identifier(run_id) == f"{LRI}{run_id}{PDI}", "leading digits move in a right-to-left line"
    assert identifier(f"x{PDI}{RLO}") == f"{LRI}x{RLO}{PDI}", "its own PDI cannot end the isolate early"


def test_an_engine_message_without_a_code_is_isolated_in_plain_text(ctx: Flask) -> None:
    """A stored message with no code (the app's own error) keeps its text; in plain text (an audit
    sentence in an attribute) it is isolated like every other name, in HTML escaped by the template."""
    from pgbus_flask.web.messages import system_message

    hostile = f"{RLO}evil"
    assert system_message(None, None, hostile, NOW, html=False) == f"\u2068{hostile}\u2069"
    assert system_message(None, None, hostile, NOW, html=True) == hostile
    assert system_message("no_such_code", {}, "plain", NOW, html=False) == "plain"
