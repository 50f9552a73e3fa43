"""The dashboard's words and small HTML pieces: badges, the next-step sentence, the
subject link, the resume label, the audit sentence and the bulk confirm.

Every label lives here, marked with ``N_`` so ``pybabel extract`` finds it,
keyed by the values of :mod:`pgbus_flask.states`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from flask import url_for
from markupsafe import Markup, escape

from .. import payload, states
from ..queries import AttentionGroup
from ..runner import ResumePlan
from .i18n import (
    C_,
    N_,
    bdi,
    clock,
    clock_tag,
    code,
    gettext,
    isolated,
    markup,
    ngettext,
    pgettext,
    span_tag,
    time_tag,
    ugettext,
    ungettext,
)
from .messages import system_message
from .presenter import Presentation

log = logging.getLogger("pgbus_flask.web")

RUN_STATUS_LABELS = {
    "ready": C_("status", "Ready"), "running": C_("status", "Running"), "waiting": C_("status", "Waiting"),
    "paused": C_("status", "Paused"), "finished": C_("status", "Finished"), "cancelled": C_("status", "Cancelled"),
}
RUN_STATUS_TONES = {
    "ready": "blue", "running": "blue", "waiting": "yellow", "paused": "yellow", "finished": "green",
    "cancelled": "gray",
}
BADGE_LABELS = {
    "scheduled": C_("status", "Scheduled"), "queued": C_("status", "Queued"), "overdue": C_("status", "Overdue"),
    "running": C_("status", "Running"), "possibly_stalled": C_("status", "Possibly stalled"),
    "waiting": C_("status", "Waiting"), "paused": C_("status", "Paused"),
    "paused_error": C_("status", "Failed, paused"), "stalled": C_("status", "Stalled"),
    "finished": C_("status", "Finished"), "cancelled": C_("status", "Cancelled"),
}
STEP_STATUS_LABELS = {
    "scheduled": C_("status", "Scheduled"), "in_progress": C_("status", "In progress"),
    "waiting": C_("status", "Waiting"), "completed": C_("status", "Completed"), "failed": C_("status", "Failed"),
    "skipped": C_("status", "Skipped"), "cancelled": C_("status", "Cancelled"),
}
STEP_TONES = {
    "scheduled": "gray", "in_progress": "blue", "waiting": "yellow", "completed": "green", "failed": "red",
    "skipped": "gray", "cancelled": "gray",
}
SIGNAL_STATUS_LABELS = {
    "pending": C_("status", "Pending"), "claimed": C_("status", "Claimed"), "consumed": C_("status", "Consumed"),
}
SIGNAL_TONES = {"pending": "yellow", "claimed": "blue", "consumed": "green"}
CHILD_STATUS_LABELS = {
    "pending": C_("status", "Pending"), "done": C_("status", "Done"), "failed": C_("status", "Failed"),
}
CHILD_TONES = {"pending": "yellow", "done": "green", "failed": "red"}
STUCK_REASON_LABELS = {
    "stalled": C_("stuck reason", "Stalled"), "paused_error": C_("stuck reason", "Paused on an error"),
    "paused_manual": C_("stuck reason", "Paused by hand"), "overdue": C_("stuck reason", "Overdue"),
    "waiting_overdue": C_("stuck reason", "Waiting too long"),
}
#: The verbs as buttons and in "Done: Resume." (an audit event's words are EVENT_LABELS).
ACTION_LABELS = {
    "resume": C_("action", "Resume"), "resume_at": C_("action", "Resume at step"), "run_now": C_("action", "Run now"),
    "reschedule": C_("action", "Reschedule"), "skip": C_("action", "Skip step"), "rerun": C_("action", "Rerun"),
    "pause": C_("action", "Pause"), "cancel": C_("action", "Cancel run"), "signal": C_("action", "Send signal"),
    "upgrade": C_("action", "Continue on the current definition"),
}
EVENT_LABELS = {
    "started": C_("event", "Started"), "step_scheduled": C_("event", "Step scheduled"),
    "step_started": C_("event", "Step started"), "step_completed": C_("event", "Step completed"),
    "step_failed": C_("event", "Step failed"), "step_skipped": C_("event", "Step skipped"),
    "step_reattempted": C_("event", "Step reattempted"), "paused": C_("event", "Paused"),
    "resumed": C_("event", "Resumed"), "cancelled": C_("event", "Cancelled"), "finished": C_("event", "Finished"),
    "run_now": C_("event", "Sent to run now"), "rescheduled": C_("event", "Rescheduled"),
    "rerun": C_("event", "Rerun"), "stall_detected": C_("event", "Stall detected"),
    "late_completion_ignored": C_("event", "Late completion ignored"),
    "signal_received": C_("event", "Signal received"), "signal_claimed": C_("event", "Signal claimed"),
    "step_waiting": C_("event", "Step waiting"), "wait_timed_out": C_("event", "Wait timed out"),
    "fan_out_opened": C_("event", "Fan-out opened"), "fan_out_finished": C_("event", "Fan-out finished"),
    "children_started": C_("event", "Child runs started"), "children_finished": C_("event", "Child runs ended"),
    "definition_upgraded": C_("event", "Moved to the current definition"),
}
#: The events whose details say when their step is due (``scheduled_at``), said with that moment.
EVENTS_WITH_TIME = {
    "step_scheduled": N_("Step scheduled for %(time)s"), "rescheduled": N_("Rescheduled for %(time)s"),
}
RESUME_LABELS = {
    "retry": N_("Retry %(step)s"), "continue": N_("Continue with %(step)s"), "finish": N_("Finish the run"),
    "keep_waiting": N_("Keep waiting at %(step)s"), "run": N_("Run %(step)s"), "let_finish": N_("Let %(step)s finish"),
    "step_gone": N_("%(step)s no longer exists: resume at another step"),
}

#: The outside verbs the run page has a button for (signal has its own form;
#: pause and reschedule stay in the CLI and the Python API).
DASHBOARD_ACTIONS = ("resume", "upgrade", "resume_at", "run_now", "skip", "rerun", "cancel")
#: The run page's primary button is the first of these the run allows: what moves it on as planned
#: (resume does what its resume plan says). Resume at step, skip and cancel drop work: never primary.
PRIMARY_ACTIONS = ("resume", "run_now", "rerun")

#: Bulk actions each stuck reason allows (resume needs a paused run).
BULK_BY_REASON = {
    "stalled": states.BULK_ACTIONS, "paused_error": states.BULK_ACTIONS, "paused_manual": states.BULK_ACTIONS,
    "overdue": tuple(a for a in states.BULK_ACTIONS if a != "resume"),
    "waiting_overdue": tuple(a for a in states.BULK_ACTIONS if a != "resume"),
}


def label(labels: Mapping[str, tuple[str, str]], key: str | None) -> str:
    """The translated label of ``key`` in its role (the key itself when it has none)."""
    if key is None:
        return "—"
    if key not in labels:
        return key
    context, message = labels[key]
    return pgettext(context, message)


def badge(text: str, tone: str, kind: str, value: str) -> Markup:
    return Markup('<span class="pgbus-badge tone-%s" data-testid="%s-badge" data-value="%s">%s</span>') % (
        tone, kind, value, text)


def run_badge(presentation: Presentation) -> Markup:
    """The presenter's badge for a run."""
    return badge(label(BADGE_LABELS, presentation.badge), presentation.tone, "status", presentation.badge)


#: The tone of each stuck reason's badge (the attention page's groups, the lists' markers).
STUCK_REASON_TONES = {"stalled": "red", "paused_error": "red", "paused_manual": "yellow", "overdue": "yellow",
                      "waiting_overdue": "yellow"}


def attention_badge(reason: str) -> Markup:
    """The marker of a run that needs a person: its stuck reason, beside its status badge in the lists
    ("Waiting" alone would not say that a wait of three days is stuck)."""
    return Markup('<span class="pgbus-badge tone-%s attention-badge" data-testid="attention-badge" data-value="%s"'
                  ' title="%s"><span aria-hidden="true">\u26a0 </span>%s</span>') % (
        STUCK_REASON_TONES.get(reason, "yellow"), reason, gettext("Needs attention"),
        label(STUCK_REASON_LABELS, reason))


def status_badge(status: str) -> Markup:
    """A plain run-status badge (counts tables, filters)."""
    return badge(label(RUN_STATUS_LABELS, status), RUN_STATUS_TONES.get(status, "gray"), "run-status", status)


def step_badge(status: str) -> Markup:
    return badge(label(STEP_STATUS_LABELS, status), STEP_TONES.get(status, "gray"), "step", status)


def signal_badge(status: str) -> Markup:
    return badge(label(SIGNAL_STATUS_LABELS, status), SIGNAL_TONES.get(status, "gray"), "signal", status)


def child_badge(status: str) -> Markup:
    return badge(label(CHILD_STATUS_LABELS, status), CHILD_TONES.get(status, "gray"), "child", status)


# -- the next-step sentence ----------------------------------------------------------

NEXT_MESSAGES = {
    "scheduled": N_("Scheduled: %(step)s runs at %(time)s."),
    "queued": N_("Queued: %(step)s runs as soon as a worker is free (due %(ago)s)."),
    "overdue": N_("Overdue: %(step)s was due %(ago)s and no worker has taken it yet; the sweep sends it again if "
                  "its job was lost."),
    "running": N_("Running %(step)s (attempt %(attempt)s), started %(ago)s."),
    "possibly_stalled": N_("Running %(step)s past its deadline, which passed %(ago)s: its worker may have died; "
                           "the sweep will declare it stalled."),
    "waiting_signal": N_("Waiting for signal %(signal)s at %(step)s for %(duration)s."),
    "waiting_signal_deadline": N_("Waiting for signal %(signal)s at %(step)s for %(duration)s; the wait ends at "
                                  "%(time)s."),
    "waiting_any_signal": N_("Waiting for a signal at %(step)s for %(duration)s."),
    "waiting": N_("Waiting at %(step)s for %(duration)s."),
    "paused_error": N_("Paused for %(duration)s: %(step)s failed with %(error)s. Retry it to go on."),
    "paused_failed": N_("Paused for %(duration)s: %(step)s failed. Retry it to go on."),
    "stalled": N_("Paused for %(duration)s: %(step)s stalled (its worker stopped responding). Retry it to go on."),
    "paused_manual": N_("Paused at %(step)s for %(duration)s; nothing runs until someone resumes it."),
    "finished": N_("Finished %(ago)s."),
    "cancelled": N_("Cancelled %(ago)s."),
}


def batch_link(name: str, batch_id: Any) -> Markup:
    if batch_id is None:
        return code(name)
    return Markup('<a href="%s">%s</a>') % (url_for("pgbus.batch", batch_id=batch_id), code(name))


def next_sentence(presentation: Presentation, now: datetime) -> Markup:
    """The "what happens next" sentence, with names as ``<code>`` and moments as ``<time>``."""
    args: dict[str, Any] = {}
    for key, value in presentation.next_args.items():
        if key in ("step", "signal", "error"):
            args[key] = code(value)
        elif key == "ago":
            args[key] = time_tag(value, now)
        elif key == "time":  # a clock time ("at 14:02"), the relative time as its tooltip
            args[key] = clock_tag(value, now)
        elif key == "since":  # how long it has lasted ("for 3 hours"), since when as its tooltip
            args["duration"] = span_tag(value, now)
        else:
            args[key] = value
    if presentation.next_key == "waiting_children":
        total = int(presentation.next_args["total"])
        return markup(ungettext("Waiting at %(step)s for %(num)d child run to end, for %(duration)s.",
                                "Waiting at %(step)s for %(num)d child runs to end, for %(duration)s.", total),
                      step=args["step"], num=total, duration=args["duration"])
    if presentation.next_key == "waiting_batch":
        args["batch"] = batch_link(presentation.next_args["batch"], presentation.next_args.get("batch_id"))
        total = int(presentation.next_args["total"])
        return markup(ungettext("Waiting for batch %(batch)s (%(done)s of %(num)d job done).",
                                "Waiting for batch %(batch)s (%(done)s of %(num)d jobs done).", total),
                      batch=args["batch"], done=args["done"], num=total)
    return markup(ugettext(NEXT_MESSAGES[presentation.next_key]), **args)


# -- the subject link ----------------------------------------------------------------


def safe_url(value: Any) -> str | None:
    """``value`` when it is an http(s) URL with a host or a path on this site ("/...", never
    "//host" or "/\\host"); None for anything else (``javascript:``, ``data:``, relative paths)."""
    if value is None:
        return None
    url = str(value).strip()
    # Browsers drop tabs and newlines inside URLs ("/\t/evil" is "//evil"): refuse any control character.
    if not url or any(ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return None
    if url.startswith("/"):
        return None if url.startswith(("//", "/\\")) else url
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    return url if parts.scheme.lower() in ("http", "https") and parts.hostname else None


def subject_label(subject_type: str | None, subject_id: str | None) -> str | None:
    return f"{subject_type} {subject_id}" if subject_type else None


def subject_link(builder: Callable[[str, str], Any] | None, subject_type: str | None,
                 subject_id: str | None) -> Markup:
    """"Order 1042", linked through ``PGBUS_SUBJECT_URL`` when it gives a safe URL; "—" without a subject."""
    text = subject_label(subject_type, subject_id)
    if text is None:
        return Markup("—")
    url = None
    if builder is not None:
        try:
            url = safe_url(builder(subject_type or "", subject_id or ""))
        except Exception:
            log.exception("pgbus: PGBUS_SUBJECT_URL raised for %s %s", subject_type, subject_id)
    if url is None:
        return Markup('<bdi><span data-testid="subject">%s</span></bdi>') % text
    return Markup('<bdi><a href="%s" data-testid="subject">%s</a></bdi>') % (url, text)


# -- buttons and sentences -------------------------------------------------------------


def dashboard_actions(available: list[str]) -> list[str]:
    """The run page's buttons: the run's available actions the dashboard has a button for, the
    primary one (:func:`primary_action`) first."""
    actions = [action for action in DASHBOARD_ACTIONS if action in available]
    primary = primary_action(actions)
    return [primary, *(a for a in actions if a != primary)] if primary else actions


def primary_action(actions: list[str]) -> str | None:
    """The action of the run page's primary button, if any (:data:`PRIMARY_ACTIONS`)."""
    return next((action for action in PRIMARY_ACTIONS if action in actions), None)


def action_button(action: str, plan: ResumePlan | None, open_step: str | None) -> str:
    """A run page button's label (HTML). Resume says what its plan does ("Retry capture"); resume at
    step and cancel say which open step they cancel ("Cancel confirm and resume at the chosen step")."""
    if action == "resume":
        return resume_label(plan)
    if action == "resume_at" and open_step:
        return fill(ugettext("Cancel %(step)s and resume at the chosen step"), HTML, step=open_step)
    if action == "cancel" and open_step:
        return fill(ugettext("Cancel the run and its open step %(step)s"), HTML, step=open_step)
    return escape(label(ACTION_LABELS, action))


# -- where a sentence goes decides how the names in it are isolated ----------------------
#: Plain text for the JSON API (its readers isolate what they show).
PLAIN = "plain"
#: Plain text whose names are wrapped in FSI ... PDI when needed: attributes, a confirm dialog.
TEXT = "text"
#: HTML whose names are ``<bdi>`` elements.
HTML = "html"


def fill(translated: str, to: str, **values: Any) -> str:
    """A translated message with ``values`` filled in for ``to`` (:data:`PLAIN`, :data:`TEXT` or
    :data:`HTML`). Ints (``%(num)d``) and, in HTML, :class:`Markup` go in as they are."""
    if to == HTML:
        return markup(translated, **{k: v if isinstance(v, (int, Markup)) else bdi(v) for k, v in values.items()})
    if to == TEXT:
        values = {k: v if isinstance(v, int) else isolated(v) for k, v in values.items()}
    return translated % values


def resume_label(plan: ResumePlan | None) -> str:
    """The Resume button's label (HTML): what resume will do ("Retry capture", "Finish the run")."""
    if plan is None or plan.action not in RESUME_LABELS:
        return label(ACTION_LABELS, "resume")
    return fill(ugettext(RESUME_LABELS[plan.action]), HTML, step=plan.step or "")


def audit_sentence(event: Mapping[str, Any], to: str = PLAIN, now: datetime | None = None) -> str:
    """"Resumed by dashboard:alice: SMTP fixed", "Step failed (capture #2)".

    An event the engine wrote itself (actor ``system``) names no actor. In :data:`HTML` and
    :data:`TEXT`, a reason the engine wrote (``message_code`` in the details) is said in the
    viewer's language; :data:`PLAIN` (the JSON API) keeps the stored English.
    """
    name = event["event"]
    # our own words: escaped, not isolated; an event of a newer version reads as its name in words
    what: str = label(EVENT_LABELS, name) if name in EVENT_LABELS else humanize(name)
    due = due_moment(event)
    if due is not None:
        now = now or datetime.now(timezone.utc)
        what = fill(ugettext(EVENTS_WITH_TIME[name]), to, time=clock_tag(due, now) if to == HTML else clock(due, now))
    if event["actor"] == "system":
        sentence = escape(what) if to == HTML else what
    else:
        sentence = fill(ugettext("%(event)s by %(actor)s"), to, event=escape(what) if to == HTML else what,
                        actor=event["actor"])
    if event.get("step_name"):
        sentence = fill(ugettext("%(sentence)s (%(step)s #%(attempt)s)"), to, sentence=sentence,
                        step=event["step_name"], attempt=event.get("attempt") or 1)
    reason: Any = event.get("reason")
    details = event.get("details") or {}
    if reason and to != PLAIN and isinstance(details, Mapping) and details.get("message_code"):
        reason = system_message(details["message_code"], details.get("message_params"), reason,
                                now or datetime.now(timezone.utc), html=to == HTML)
    if reason:
        sentence = fill(ugettext("%(sentence)s: %(reason)s"), to, sentence=sentence, reason=reason)
    return sentence


def due_moment(event: Mapping[str, Any]) -> datetime | None:
    """When the step of a ``step_scheduled`` or ``rescheduled`` event was due, from its details;
    None for other events, and for a step scheduled for the moment it was scheduled (due at once)."""
    details = event.get("details")
    if event["event"] not in EVENTS_WITH_TIME or not isinstance(details, Mapping):
        return None
    value = details.get("scheduled_at")
    try:
        moment = payload.from_json(value)
        if isinstance(moment, str):
            moment = datetime.fromisoformat(moment)
    except (ValueError, TypeError):
        return None
    if not isinstance(moment, datetime) or moment.tzinfo is None:
        return None
    written = event.get("created_at")
    if event["event"] == "step_scheduled" and isinstance(written, datetime) and moment <= written:
        return None
    return moment


def humanize(name: str) -> str:
    """A name we have no words for, as words: "something_new" -> "Something new"."""
    words = " ".join(name.replace("_", " ").split())
    return words[:1].upper() + words[1:]


#: The bulk buttons: for one run, and for several.
BULK_ONE = {"resume": N_("Resume this run"), "skip": N_("Skip the step in this run"), "cancel": N_("Cancel this run")}


def bulk_button(action: str, n: int) -> str:
    """"Resume these 3 runs", "Resume this run"."""
    if n == 1:
        return gettext(BULK_ONE[action])
    if action == "resume":
        return ngettext("Resume %(num)d run", "Resume these %(num)d runs", n)
    if action == "skip":
        return ngettext("Skip the step in %(num)d run", "Skip the step in these %(num)d runs", n)
    return ngettext("Cancel %(num)d run", "Cancel these %(num)d runs", n)


def bulk_confirm(action: str, group: AttentionGroup, to: str = PLAIN) -> str:
    """"Resume all 3 runs paused at capture on TimeoutError?", "Skip capture in the run?".

    One run has sentences of its own ("all" is never said of one); an overdue or waiting
    run is not paused, so only the paused groups (an error class) say "paused"."""
    n, step, error = group.count, group.step_name, group.error_class
    if n == 1:
        one = {
            ("resume", True): N_("Resume the run paused at %(step)s on %(error)s?"),
            ("resume", False): N_("Resume the run paused at %(step)s?"),
            ("skip", True): N_("Skip %(step)s in the run paused there on %(error)s?"),
            ("skip", False): N_("Skip %(step)s in this run?"),
            ("cancel", True): N_("Cancel the run paused at %(step)s on %(error)s?"),
            ("cancel", False): N_("Cancel the run at %(step)s?"),
        }
        values: dict[str, Any] = {"step": step, "error": error} if error else {"step": step}
        return fill(ugettext(one[(action, bool(error))]), to, **values)
    if action == "resume":
        if error:
            return fill(ungettext("Resume %(num)d run paused at %(step)s on %(error)s?",
                                  "Resume all %(num)d runs paused at %(step)s on %(error)s?", n),
                        to, num=n, step=step, error=error)
        return fill(ungettext("Resume %(num)d run paused at %(step)s?", "Resume all %(num)d runs paused at %(step)s?",
                              n), to, num=n, step=step)
    if action == "skip":
        if error:
            return fill(ungettext("Skip %(step)s in %(num)d run paused there on %(error)s?",
                                  "Skip %(step)s in all %(num)d runs paused there on %(error)s?", n),
                        to, num=n, step=step, error=error)
        return fill(ungettext("Skip %(step)s in %(num)d run?", "Skip %(step)s in all %(num)d runs?", n),
                    to, num=n, step=step)
    if error:
        return fill(ungettext("Cancel %(num)d run paused at %(step)s on %(error)s?",
                              "Cancel all %(num)d runs paused at %(step)s on %(error)s?", n),
                    to, num=n, step=step, error=error)
    return fill(ungettext("Cancel %(num)d run at %(step)s?", "Cancel all %(num)d runs at %(step)s?", n),
                to, num=n, step=step)


def action_confirm(action: str, workflow_class: str, step: str | None, to: str = PLAIN,
                   open_step: bool = True, children: int = 0) -> str:
    """The confirm question of a run page button (``open_step``: the run has an open step, which
    resume at step and cancel cancel; ``children``: its ongoing child runs, which cancel cancels
    and skip or resume at step leave running)."""
    questions = {
        "resume": N_("Resume this %(workflow)s run?"),
        "resume_at": N_("Cancel the open step and resume this %(workflow)s run at the chosen step?"),
        "run_now": N_("Run %(step)s now instead of at its scheduled time?"),
        "skip": N_("Skip %(step)s and go on with the next step?"),
        "rerun": N_("Run this %(workflow)s run again from the chosen step?"),
        "cancel": N_("Cancel this %(workflow)s run? Its open step is cancelled and nothing else runs."),
        "upgrade": N_("Continue this %(workflow)s run on the current definition of its class, at %(step)s?"),
    }
    if not open_step:  # paused on a step that ended: there is nothing to cancel but the run
        questions.update(resume_at=N_("Resume this %(workflow)s run at the chosen step?"),
                         cancel=N_("Cancel this %(workflow)s run? Nothing else in it runs."))
    question = fill(ugettext(questions[action]), to, workflow=workflow_class, step=step or "")
    if children and action == "cancel":
        return question + " " + ngettext("Its ongoing child run is cancelled too.",
                                         "Its %(num)d ongoing child runs are cancelled too.", children)
    if children and action in ("skip", "resume_at"):
        return question + " " + ngettext("Its ongoing child run keeps running.",
                                         "Its %(num)d ongoing child runs keep running.", children)
    return question
