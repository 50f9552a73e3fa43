"""Runs, steps and verbs in words: labels, badges, the next-step sentence, the audit sentence, the
buttons' labels and confirm questions, the bulk buttons, the engine's own messages.

Every label lives here, marked with ``N_``/``C_`` so ``pybabel extract`` finds it, keyed by the values
of :mod:`pgbus_flask.states` (the verbs' words are in :mod:`pgbus_flask.verbs`). Each function that says
something takes the viewer's :class:`~pgbus_flask.present.words.Words` and, when it needs one, ``now``;
none reads ``flask.g``. The dashboard binds them to its request (:mod:`pgbus_flask.web.helpers`); the
JSON API, the CLI and the MCP server say them in English (:func:`~pgbus_flask.present.words.english`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from markupsafe import Markup, escape

from .. import payload, states, verbs
from ..queries import IDS_LIMIT, AttentionGroup
from ..runner import ResumePlan
from ..verbs import NP_
from .state import Presentation
from .words import C_, N_, Name, Words, bdi, code, identifier, isolated, markup, name_tag

log = logging.getLogger("pgbus_flask.web")

#: Each kind of thing has its status words in a context of its own (run, step attempt, signal, child job),
#: so that a language with genders agrees each with its noun: "Cancelada" (la ejecución) beside
#: "Cancelado" (el paso) is right in Spanish only when they name different things.
RUN_STATUS_LABELS = {
    "ready": C_("run status", "Ready"), "running": C_("run status", "Running"), "waiting": C_("run status", "Waiting"),
    "paused": C_("run status", "Paused"), "finished": C_("run status", "Finished"),
    "cancelled": C_("run status", "Cancelled"),
}
RUN_STATUS_TONES = {
    "ready": "blue", "running": "blue", "waiting": "yellow", "paused": "yellow", "finished": "green",
    "cancelled": "gray",
}
BADGE_LABELS = {
    "scheduled": C_("run status", "Scheduled"), "queued": C_("run status", "Queued"),
    "overdue": C_("run status", "Overdue"),
    "running": C_("run status", "Running"), "possibly_stalled": C_("run status", "Possibly stalled"),
    "waiting": C_("run status", "Waiting"), "paused": C_("run status", "Paused"),
    "paused_error": C_("run status", "Failed, paused"), "stalled": C_("run status", "Stalled"),
    "finished": C_("run status", "Finished"), "cancelled": C_("run status", "Cancelled"),
}
STEP_STATUS_LABELS = {
    "scheduled": C_("step status", "Scheduled"), "in_progress": C_("step status", "In progress"),
    "waiting": C_("step status", "Waiting"), "completed": C_("step status", "Completed"),
    "failed": C_("step status", "Failed"),
    "skipped": C_("step status", "Skipped"), "cancelled": C_("step status", "Cancelled"),
}
STEP_TONES = {
    "scheduled": "gray", "in_progress": "blue", "waiting": "yellow", "completed": "green", "failed": "red",
    "skipped": "gray", "cancelled": "gray",
}
SIGNAL_STATUS_LABELS = {
    "pending": C_("signal status", "Pending"), "claimed": C_("signal status", "Claimed"),
    "consumed": C_("signal status", "Consumed"),
}
SIGNAL_TONES = {"pending": "yellow", "claimed": "blue", "consumed": "green"}
CHILD_STATUS_LABELS = {
    "pending": C_("child job status", "Pending"), "done": C_("child job status", "Done"),
    "failed": C_("child job status", "Failed"),
}
CHILD_TONES = {"pending": "yellow", "done": "green", "failed": "red"}
STUCK_REASON_LABELS = {
    "stalled": C_("stuck reason", "Stalled"), "paused_error": C_("stuck reason", "Paused on an error"),
    "paused_manual": C_("stuck reason", "Paused by hand"), "overdue": C_("stuck reason", "Overdue"),
    "waiting_overdue": C_("stuck reason", "Waiting too long"),
}
#: The verbs as buttons and in "Done: Resume." (an audit event's words are EVENT_LABELS).
ACTION_LABELS = {verb.name: verb.label for verb in verbs.VERBS}
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
    "slot_waiting": C_("event", "Waiting for a slot"), "slot_granted": C_("event", "Slot granted"),
    "arguments_replaced": C_("event", "Arguments replaced by a later start"),
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

#: The outside verbs the run page has a button for, in their order (signal has its own form;
#: pause and reschedule stay in the CLI and the Python API).
DASHBOARD_ACTIONS = verbs.DASHBOARD_ACTIONS
#: The run page's primary button is the first of these the run allows: what moves it on as planned
#: (resume does what its resume plan says). Resume at step, skip and cancel drop work: never primary.
PRIMARY_ACTIONS = tuple(name for name in DASHBOARD_ACTIONS if verbs.BY_NAME[name].primary)

#: Bulk actions each stuck reason allows (resume needs a paused run).
BULK_BY_REASON = {reason: verbs.bulk_for(reason) for reason in states.STUCK_REASONS}


def label(words: Words, labels: Mapping[str, tuple[str, str]], key: str | None) -> str:
    """The translated label of ``key`` in its role (the key itself when it has none)."""
    return words.label(labels, key)


def badge(text: str, tone: str, kind: str, value: str) -> Markup:
    return Markup('<span class="pgbus-badge tone-%s" data-testid="%s-badge" data-value="%s">%s</span>') % (
        tone, kind, value, text)


def run_badge(words: Words, presentation: Presentation) -> Markup:
    """The presenter's badge for a run."""
    return badge(label(words, BADGE_LABELS, presentation.badge), presentation.tone, "status", presentation.badge)


#: The tone of each stuck reason's badge (the attention page's groups, the lists' markers).
STUCK_REASON_TONES = {"stalled": "red", "paused_error": "red", "paused_manual": "yellow", "overdue": "yellow",
                      "waiting_overdue": "yellow"}


def attention_badge(words: Words, reason: str) -> Markup:
    """The marker of a run that needs a person: its stuck reason, beside its status badge in the lists
    ("Waiting" alone would not say that a wait of three days is stuck)."""
    return Markup('<span class="pgbus-badge tone-%s attention-badge" data-testid="attention-badge" data-value="%s"'
                  ' title="%s"><span aria-hidden="true">\u26a0 </span>%s</span>') % (
        STUCK_REASON_TONES.get(reason, "yellow"), reason, words.gettext("Needs attention"),
        label(words, STUCK_REASON_LABELS, reason))


def status_badge(words: Words, status: str) -> Markup:
    """A plain run-status badge (counts tables, filters)."""
    return badge(label(words, RUN_STATUS_LABELS, status), RUN_STATUS_TONES.get(status, "gray"), "run-status", status)


def step_badge(words: Words, status: str) -> Markup:
    return badge(label(words, STEP_STATUS_LABELS, status), STEP_TONES.get(status, "gray"), "step", status)


def signal_badge(words: Words, status: str) -> Markup:
    return badge(label(words, SIGNAL_STATUS_LABELS, status), SIGNAL_TONES.get(status, "gray"), "signal", status)


def child_badge(words: Words, status: str) -> Markup:
    return badge(label(words, CHILD_STATUS_LABELS, status), CHILD_TONES.get(status, "gray"), "child", status)


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
    "waiting_rate": N_("Rate-limited: %(rate)s allows %(per)s; %(step)s starts at %(time)s."),
    "waiting_limit": N_("Waiting for a slot of %(limit)s at %(step)s, for %(duration)s."),
    "paused_error": N_("Paused for %(duration)s: %(step)s failed with %(error)s. Retry it to go on."),
    "paused_failed": N_("Paused for %(duration)s: %(step)s failed. Retry it to go on."),
    "stalled": N_("Paused for %(duration)s: %(step)s stalled (its worker stopped responding). Retry it to go on."),
    "paused_manual": N_("Paused at %(step)s for %(duration)s; nothing runs until someone resumes it."),
    "finished": N_("Finished %(ago)s."),
    "cancelled": N_("Cancelled %(ago)s."),
}


#: A run in line for a concurrency slot, by the limit's kind (``run``: a class's limit, said of the
#: class's runs; ``step``: a step's) and whether the limit has a key; plural by the limit's capacity.
SLOT_MESSAGES: dict[tuple[str, bool], tuple[str, str]] = {
    ("run", True): NP_("Waiting for a slot: %(limit)s runs at most %(num)s at once for key %(key)s "
                       "(%(running)s running, %(waiting)s waiting), for %(duration)s.",
                       "Waiting for a slot: %(limit)s runs at most %(num)s at once for key %(key)s "
                       "(%(running)s running, %(waiting)s waiting), for %(duration)s."),
    ("run", False): NP_("Waiting for a slot: %(limit)s runs at most %(num)s at once "
                        "(%(running)s running, %(waiting)s waiting), for %(duration)s.",
                        "Waiting for a slot: %(limit)s runs at most %(num)s at once "
                        "(%(running)s running, %(waiting)s waiting), for %(duration)s."),
    ("step", True): NP_("Waiting for a slot: %(limit)s allows %(num)s at once for key %(key)s "
                        "(%(running)s running, %(waiting)s waiting), for %(duration)s.",
                        "Waiting for a slot: %(limit)s allows %(num)s at once for key %(key)s "
                        "(%(running)s running, %(waiting)s waiting), for %(duration)s."),
    ("step", False): NP_("Waiting for a slot: %(limit)s allows %(num)s at once "
                         "(%(running)s running, %(waiting)s waiting), for %(duration)s.",
                         "Waiting for a slot: %(limit)s allows %(num)s at once "
                         "(%(running)s running, %(waiting)s waiting), for %(duration)s."),
}
#: A run in line for a rate whose wake-up has no moment yet.
RATE_NO_TIME = N_("Rate-limited: %(rate)s allows %(per)s; %(step)s starts when its window has room.")
#: A rate's capacity in words, by its window in seconds ("10 a second"); any other window is said
#: with :data:`RATE_EVERY` ("10 every 30 seconds"). Plural by the count.
RATE_WINDOWS: dict[float, tuple[str, str]] = {
    1: NP_("%(num)s a second", "%(num)s a second"),
    60: NP_("%(num)s a minute", "%(num)s a minute"),
    3600: NP_("%(num)s an hour", "%(num)s an hour"),
    86400: NP_("%(num)s a day", "%(num)s a day"),
}
RATE_EVERY = NP_("%(num)s every %(period)s", "%(num)s every %(period)s")
#: A concurrency limit's capacity in words.
AT_ONCE = NP_("%(num)s at once", "%(num)s at once")
#: The kinds of limit (``pgbus_limits.kind``), as the Limits page names them.
LIMIT_KIND_LABELS = {
    "run": C_("limit kind", "Class limit"), "step": C_("limit kind", "Step limit"), "rate": C_("limit kind", "Rate"),
}


def rate_text(words: Words, count: int, per_seconds: float) -> str:
    """What a rate allows, in words: "10 a second", "100 a minute", "600 an hour", "10 every 30 seconds"."""
    window = RATE_WINDOWS.get(per_seconds)
    if window is not None:
        return words.ngettext(*window, count)
    return words.ngettext(*RATE_EVERY, count, period=words.period(per_seconds))


def capacity_text(words: Words, kind: str, capacity: int, per_seconds: float | None) -> str:
    """A limit's or a rate's capacity in words: "2 at once", "10 a second"."""
    if kind == "rate":
        return rate_text(words, capacity, per_seconds or 1.0)
    return words.ngettext(*AT_ONCE, capacity)


def _in_line_sentence(words: Words, presentation: Presentation, args: dict[str, Any]) -> Markup:
    """A run in line for a slot ("Waiting for a slot: stripe allows 5 at once (5 running, 12 waiting),
    for 3 minutes.") or for a rate ("Rate-limited: stripe allows 10 a second; charge starts at 14:02.")."""
    given = presentation.next_args
    if presentation.next_key == "waiting_rate":
        args["per"] = rate_text(words, int(given["capacity"]), float(given["per_seconds"]))
        if given.get("time") is None:
            return markup(words.ugettext(RATE_NO_TIME), **args)
        return markup(words.ugettext(NEXT_MESSAGES["waiting_rate"]), **args)
    capacity = int(given["capacity"])
    keyed = given.get("key") not in (None, "")
    message = SLOT_MESSAGES[("run" if given.get("kind") == "run" else "step", keyed)]
    return markup(words.ungettext(*message, capacity), limit=args["limit"], num=words.number(capacity),
                  key=args.get("key", ""), running=words.number(int(given["running"])),
                  waiting=words.number(int(given["waiting"])), duration=args["duration"])


def batch_link(name: str, batch_id: Any, batch_url: Callable[[Any], str] | None) -> Markup:
    if batch_id is None or batch_url is None:
        return code(name)
    return Markup('<a href="%s">%s</a>') % (batch_url(batch_id), code(name))


def next_sentence(words: Words, presentation: Presentation, now: datetime,
                  batch_url: Callable[[Any], str] | None = None) -> Markup:
    """The "what happens next" sentence, with names as ``<code>`` and moments as ``<time>``."""
    args: dict[str, Any] = {}
    for key, value in presentation.next_args.items():
        if key in ("step", "signal", "error", "limit", "rate"):
            args[key] = code(value)
        elif key == "key":  # a limit's key: the app's text
            args[key] = bdi(value)
        elif key == "ago":
            args[key] = words.time_tag(value, now)
        elif key == "time":  # a clock time ("at 14:02"), the relative time as its tooltip
            args[key] = words.clock_tag(value, now)
        elif key == "since":  # how long it has lasted ("for 3 hours"), since when as its tooltip
            args["duration"] = words.span_tag(value, now)
        else:
            args[key] = value
    if presentation.next_key == "waiting_children":
        total = int(presentation.next_args["total"])
        return markup(words.ungettext("Waiting at %(step)s for %(num)s child run to end, for %(duration)s.",
                                "Waiting at %(step)s for %(num)s child runs to end, for %(duration)s.", total),
                      step=args["step"], num=words.number(total), duration=args["duration"])
    if presentation.next_key in ("waiting_slot", "waiting_rate"):
        return _in_line_sentence(words, presentation, args)
    if presentation.next_key == "waiting_batch":
        args["batch"] = batch_link(presentation.next_args["batch"], presentation.next_args.get("batch_id"), batch_url)
        total = int(presentation.next_args["total"])
        return markup(words.ungettext("Waiting for batch %(batch)s (%(done)s of %(num)s job done).",
                                "Waiting for batch %(batch)s (%(done)s of %(num)s jobs done).", total),
                      batch=args["batch"], done=args["done"], num=words.number(total))
    return markup(words.ugettext(NEXT_MESSAGES[presentation.next_key]), **args)


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


def action_button(words: Words, action: str, plan: ResumePlan | None, open_step: str | None) -> str:
    """A run page button's label (HTML). Resume says what its plan does ("Retry capture"); resume at
    step and cancel say which open step they cancel ("Cancel confirm and resume at the chosen step")."""
    verb = verbs.BY_NAME[action]
    if verb.label_from_plan:
        return resume_label(words, plan)
    if verb.label_open_step and open_step:
        return fill(words.ugettext(verb.label_open_step), HTML, step=Name(open_step))
    return escape(label(words, ACTION_LABELS, action))


# -- where a sentence goes decides how the names in it are isolated ----------------------
#: Plain text for the JSON API (its readers isolate what they show).
PLAIN = "plain"
#: Plain text whose names are wrapped in FSI ... PDI when needed: attributes, a confirm dialog.
TEXT = "text"
#: HTML whose names are ``<bdi>`` elements.
HTML = "html"


def fill(translated: str, to: str, **values: Any) -> str:
    """A translated message with ``values`` filled in for ``to`` (:data:`PLAIN`, :data:`TEXT` or
    :data:`HTML`). Ints, and in HTML :class:`Markup` (a count the locale wrote, ``escape(words.number(n))``),
    go in as they are; every other value is isolated: a :class:`Name` from code left to right, anything
    else (someone's text) in the direction of its first strong character."""
    if to == HTML:
        return markup(translated, **{k: v if isinstance(v, (int, Markup)) else name_tag(v) if isinstance(v, Name)
                                     else bdi(v) for k, v in values.items()})
    if to == TEXT:
        values = {k: v if isinstance(v, int) else identifier(v) if isinstance(v, Name) else isolated(v)
                  for k, v in values.items()}
    return translated % values


def resume_label(words: Words, plan: ResumePlan | None) -> str:
    """The Resume button's label (HTML): what resume will do ("Retry capture", "Finish the run")."""
    if plan is None or plan.action not in RESUME_LABELS:
        return label(words, ACTION_LABELS, "resume")
    return fill(words.ugettext(RESUME_LABELS[plan.action]), HTML, step=Name(plan.step or ""))


def audit_sentence(words: Words, event: Mapping[str, Any], to: str = PLAIN, now: datetime | None = None) -> str:
    """"Resumed by dashboard:alice: SMTP fixed", "Step failed (capture #2)".

    An event the engine wrote itself (actor ``system``) names no actor. In :data:`HTML` and
    :data:`TEXT`, a reason the engine wrote (``message_code`` in the details) is said in the
    viewer's language; :data:`PLAIN` (the JSON API) keeps the stored English.
    """
    name = event["event"]
    # our own words: escaped, not isolated; an event of a newer version reads as its name in words
    what: str = label(words, EVENT_LABELS, name) if name in EVENT_LABELS else humanize(name)
    due = due_moment(event)
    if due is not None:
        now = now or datetime.now(timezone.utc)
        moment = words.clock_tag(due, now) if to == HTML else words.clock(due, now)
        what = fill(words.ugettext(EVENTS_WITH_TIME[name]), to, time=moment)
    if event["actor"] == "system":
        sentence = escape(what) if to == HTML else what
    else:
        sentence = fill(words.ugettext("%(event)s by %(actor)s"), to, event=escape(what) if to == HTML else what,
                        actor=event["actor"])
    if event.get("step_name"):
        sentence = fill(words.ugettext("%(sentence)s (%(step)s #%(attempt)s)"), to, sentence=sentence,
                        step=Name(event["step_name"]), attempt=event.get("attempt") or 1)
    reason: Any = event.get("reason")
    details = event.get("details") or {}
    if reason and to != PLAIN and isinstance(details, Mapping) and details.get("message_code"):
        reason = system_message(words, details["message_code"], details.get("message_params"), reason,
                                now or datetime.now(timezone.utc), html=to == HTML)
    if reason:
        sentence = fill(words.ugettext("%(sentence)s: %(reason)s"), to, sentence=sentence, reason=reason)
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


def verb_tone(action: str, primary: bool) -> str:
    """A verb's button class: "primary" (``primary``: the page's primary button), "danger" when it drops
    work that cannot be got back (cancel, skip), else none."""
    return "primary" if primary else "danger" if verbs.BY_NAME[action].destructive else ""


def _bulk(action: str) -> verbs.BulkWords:
    words = verbs.BY_NAME[action].bulk
    if words is None:
        raise ValueError(f"{action} is not a bulk verb")
    return words


def bulk_one(words: Words, action: str) -> str:
    """The bulk button on a group of one run: "Resume this run"."""
    return words.gettext(_bulk(action).one)


def bulk_button(words: Words, action: str, n: int, capped: bool = False) -> str:
    """"Resume these 3 runs", "Resume this run"; of a bigger group (or one whose count stopped at
    the cap, a lower bound), the runs one call moves."""
    n = IDS_LIMIT if capped else min(n, IDS_LIMIT)
    if n == 1:
        return bulk_one(words, action)
    return words.ngettext(*_bulk(action).button, n)


def bulk_confirm(words: Words, action: str, group: AttentionGroup, to: str = PLAIN) -> str:
    """"Resume all 3 runs paused at capture on TimeoutError?", "Skip capture in the run?".

    One run has sentences of its own ("all" is never said of one); an overdue or waiting
    run is not paused, so only the paused groups (an error class) say "paused". A group bigger
    than one call moves (or counted only up to the cap) is asked about the oldest IDS_LIMIT runs."""
    said = _bulk(action)
    n, step, error = group.count, Name(group.step_name), Name(group.error_class) if group.error_class else None
    if group.capped or n > IDS_LIMIT:
        return fill(words.ugettext(said.oldest), to, num=escape(words.number(IDS_LIMIT)), step=step)
    values: dict[str, Any] = {"step": step, "error": error} if error else {"step": step}
    if n == 1:
        return fill(words.ugettext(said.one_error if error else said.one_plain), to, **values)
    many = said.many_error if error else said.many_plain
    return fill(words.ungettext(*many, n), to, num=escape(words.number(n)), **values)


def action_confirm(words: Words, action: str, workflow_class: str, step: str | None, to: str = PLAIN,
                   open_step: bool = True, children: int = 0) -> str:
    """The confirm question of a run page button (``open_step``: the run has an open step, which
    resume at step and cancel cancel; ``children``: its ongoing child runs, which cancel cancels
    and skip or resume at step leave running)."""
    verb = verbs.BY_NAME[action]
    asked = verb.confirm if open_step or verb.confirm_no_open_step is None else verb.confirm_no_open_step
    if asked is None:
        raise ValueError(f"the dashboard asks no question for {action}")
    question = fill(words.ugettext(asked), to, workflow=Name(workflow_class), step=Name(step or ""))
    if children and verb.children == "cancelled":
        return question + " " + words.ngettext("Its ongoing child run is cancelled too.",
                                         "Its %(num)s ongoing child runs are cancelled too.", children)
    if children and verb.children == "kept":
        return question + " " + words.ngettext("Its ongoing child run keeps running.",
                                         "Its %(num)s ongoing child runs keep running.", children)
    return question


# -- the engine's own messages (pgbus_flask.messages) in the viewer's language ----------------------

SYSTEM_MESSAGES: dict[str, str] = {
    "step_stalled": N_("Attempt %(attempt)s of %(step)s on %(worker)s passed its stall deadline (%(deadline_at)s) "
                       "without an outcome: its worker probably died."),
    "wait_timed_out": N_("No %(signal)s signal arrived by %(deadline_at)s."),
    "wait_timed_out_any": N_("No signal arrived by %(deadline_at)s."),
    "wait_timed_out_skipped": N_("The wait timed out."),
    "children_failed": N_("%(failed)s of %(total)s child jobs failed; the first was #%(position)s: %(error_class)s: "
                          "%(error)s"),
    "children_failed_unknown": N_("%(failed)s of %(total)s child jobs failed."),
    "child_lost": N_("Child job %(job)s ended as %(status)s in RQ without recording a result: its worker "
                     "probably died."),
    "unknown_workflow": N_("The workflow class %(workflow)s is not registered here (is its module in "
                           "PGBUS_IMPORT?)."),
    "unknown_step": N_("%(workflow)s has no step %(step)s."),
    "unknown_step_known": N_("%(workflow)s has no step %(step)s (its steps: %(known)s)."),
    "reattempt_requested": N_("The step asked to be attempted again."),
    "parent_cancelled": N_("Its parent run %(run)s was cancelled."),
    "child_runs_cancelled": N_("%(cancelled)s of %(total)s child runs were cancelled; the first was %(workflow)s "
                               "%(run)s."),
    "wait_until_failed": N_("The wait_until of %(step)s failed: %(error_class)s: %(error)s"),
    "child_function_not_allowed": N_("%(func)s is not a fan-out function of any registered workflow: workers run "
                                     "only functions defined in the module of a workflow class or in a module "
                                     "named by PGBUS_IMPORT. Nothing was run."),
}

#: Parameters shown as code identifiers.
_NAMES = frozenset({"step", "signal", "workflow", "error_class", "job", "worker", "known", "run", "func"})


def _moment(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _fallback(english: str | None, html: bool) -> str:
    """The stored English as it is: escaped later by the template (HTML), isolated in plain text."""
    return (english or "") if html else isolated(english or "")


def system_message(words: Words, code_: str | None, params: Mapping[str, Any] | None, english: str | None,
                   now: datetime, *, html: bool = True) -> str:
    """The message of ``code_`` in the viewer's language (Markup when ``html``), else ``english``
    (escaped by the template, isolated in plain text)."""
    template = SYSTEM_MESSAGES.get(code_ or "")
    values = dict(params or {})
    if template is None or not isinstance(params, Mapping):
        return _fallback(english, html)
    args: dict[str, Any] = {}
    for key, value in values.items():
        moment = _moment(value) if key.endswith("_at") else None
        if moment is not None:
            args[key] = words.clock_tag(moment, now) if html else words.clock_tag(moment, now).striptags()
        elif key in _NAMES:
            args[key] = code(value if value is not None else "—") if html else identifier(value)
        elif isinstance(value, int) and not isinstance(value, bool):  # a count or a position, as the locale writes it
            args[key] = escape(words.number(value)) if html else words.number(value)
        else:
            args[key] = bdi(value if value is not None else "—") if html else isolated(value)
    try:
        if html:
            return markup(words.ugettext(template), **args)
        return words.ugettext(template) % args
    except (KeyError, TypeError, ValueError):  # parameters this version's sentence does not take
        return _fallback(english, html)
