"""The dashboard's pages and form posts (every state change is a POST through the runner's verbs)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import Blueprint, abort, current_app, g, redirect, render_template, request, url_for
from markupsafe import Markup
from werkzeug.exceptions import BadRequest, MethodNotAllowed, NotFound
from werkzeug.wrappers import Response

from .. import payload, queries, runner, states, verbs
from ..engine import Engine
from ..errors import (
    ActionNotAllowed,
    DatabaseUnavailable,
    PgbusError,
    SchemaMissing,
    SubjectConflict,
    TooManyPendingSignals,
    WorkflowNotFound,
)
from ..handle import Page, Run
from ..present import shapes
from ..present.state import Presentation, batch_name
from ..workflow import Workflow, registry
from . import helpers, inputs, notices
from .i18n import bdi, clock_tag, code, gettext, markup, number, ugettext, ungettext
from .schedules import overview_items as schedule_items
from .timeline import BUCKETS, MAX_BARS, render_buckets
from .timeline import render as render_timeline

FILTERS = ("workflow_class", "status", "step", "reason", "error_class", "subject", "text")
PAGE_SIZE = 50

#: Errors with a page of their own (404, 503) rather than the form they came from.
NOT_INPUT_ERRORS = (WorkflowNotFound, DatabaseUnavailable, SchemaMissing)

# Characters no HTML page can carry: lone surrogates cannot be encoded, NUL is dropped by parsers.
_UNSENDABLE = re.compile("[\x00\ud800-\udfff]")


def render(template: str, **context: Any) -> str:
    """``render_template``, with any character UTF-8 cannot encode replaced (a last guard: stored
    JSON may hold lone surrogates, and :func:`pretty` already writes those as escapes).

    ``live=True`` makes the page refresh its ``data-live`` regions in place (``PGBUS_LIVE_REFRESH``)."""
    page = render_template(template, **context)
    return _UNSENDABLE.sub("\ufffd", page)


def no_page() -> str:
    """What the dashboard says of an address it has no page at."""
    return gettext("The dashboard has no page at this address. Check the link, or start from the overview.")


def refused(exc: PgbusError) -> Markup:
    """The message of an error that refused a request: what was wrong, and that nothing changed."""
    return markup(ugettext("Nothing was changed: %(problem)s"), problem=bdi(exc))


def too_many_signals(exc: TooManyPendingSignals) -> Markup:
    """Why a signal was refused at its run's limit of pending signals, and what frees room."""
    return markup(ungettext("Nothing was stored: this run already holds %(num)s pending signal, the most "
                            "%(setting)s allows. A signal stays pending until a step waiting for its name takes it.",
                            "Nothing was stored: this run already holds %(num)s pending signals, the most "
                            "%(setting)s allows. A signal stays pending until a step waiting for its name takes it.",
                            exc.limit), num=number(exc.limit), setting=code("PGBUS_MAX_PENDING_SIGNALS"))


def read_filters() -> dict[str, str | None]:
    """The runs list's filters from the query string (checked; None when empty)."""
    filters = {name: inputs.text(request.args, name) for name in FILTERS}
    if filters["status"] and filters["status"] not in states.RUN_STATUSES:
        raise BadRequest(markup(ugettext("Unknown status %(value)s."), value=inputs.shown(filters["status"])))
    if filters["reason"] and filters["reason"] not in states.STUCK_REASONS:
        raise BadRequest(markup(ugettext("Unknown stuck reason %(value)s."), value=inputs.shown(filters["reason"])))
    return filters


class Pages:
    """The views of one blueprint, bound to its engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- shared pieces -----------------------------------------------------------------

    def sync_clock(self, db_now: datetime | None = None) -> None:
        """Use PostgreSQL's clock for this page (the one every stored time comes from), so that
        "overdue" or "possibly stalled" never depends on the web host's clock."""
        g.pgbus_now = db_now or queries.db_now(self.engine)

    def klass(self, name: str) -> type[Workflow] | None:
        return runner.load_class(self.engine, name)

    def wait_for(self, workflow_class: str, step_name: str | None) -> str | None:
        """The signal ``step_name`` of ``workflow_class`` waits for, when the class is known here."""
        return shapes.wait_for(self.engine, workflow_class, step_name)

    def present(self, row: Mapping[str, Any]) -> Presentation:
        return shapes.presentation_of(self.engine, row, g.pgbus_now)

    def subject(self, row: Mapping[str, Any]) -> Any:
        return helpers.subject_link(self.engine.settings.subject_url, row.get("subject_type"), row.get("subject_id"))

    def class_names(self, selected: str | None) -> list[str]:
        """The class filter's choices: the classes registered here (a full count would scan every run)."""
        return sorted(set(registry()) | ({selected} if selected else set()))

    # -- overview ------------------------------------------------------------------------

    def overview(self) -> str:
        self.sync_clock()
        counts = queries.status_counts(self.engine)
        stuck = queries.stuck_reason_counts(self.engine)
        classes = sorted({cls for cls, _ in counts})
        table = {cls: {status: counts.get((cls, status), 0) for status in states.RUN_STATUSES} for cls in classes}
        stuck_by_class = {cls: {reason: stuck.get((cls, reason), 0) for reason in states.STUCK_REASONS}
                          for cls in sorted({cls for cls, _ in stuck})}
        cards = {
            "ongoing": sum(n for (_, status), n in counts.items() if status in states.ONGOING),
            "paused": sum(n for (_, status), n in counts.items() if status == "paused"),
            "attention": sum(stuck.values()),
            "attention_capped": stuck.any_capped,  # the overdue counts stop at COUNT_CAP a group
        }
        # The ready and waiting runs that need a person (overdue, waiting too long), marked in the counts
        # table from the stuck counts already read; a paused run always needs one.
        marked = {(cls, states.STUCK_REASON_STATUS[reason]): (reason, n, (cls, reason) in stuck.capped)
                  for (cls, reason), n in stuck.items() if reason not in states.PAUSED_REASONS}
        return render("pgbus/overview.html", live=True, cards=cards, table=table, stuck=stuck_by_class,
                      capped=stuck.capped, statuses=states.RUN_STATUSES, reasons=states.STUCK_REASONS,
                      marked=marked, schedules=schedule_items(self.engine, g.pgbus_now),
                      limits=queries.limits_card(self.engine))

    # -- runs list -----------------------------------------------------------------------

    def runs(self) -> str:
        filters = read_filters()
        before = inputs.whole_number(request.args.get("before"), "before")
        self.sync_clock()
        rows, cursor = queries.list_runs(self.engine, queries.RunFilter(before=before, limit=PAGE_SIZE, **filters))
        shapes.with_limit_lines(self.engine, rows)
        items = [{"row": row, "p": self.present(row), "subject": self.subject(row)} for row in rows]
        query = {k: v for k, v in filters.items() if v}
        # A text search that read its window of runs without filling the page: say why "Older runs" is there.
        searched = queries.TEXT_WINDOW if cursor is not None and len(rows) < PAGE_SIZE else None
        return render("pgbus/runs.html", live=True, items=items, filters=filters, query=query, cursor=cursor,
                               before=before, class_names=self.class_names(filters["workflow_class"]),
                               statuses=states.RUN_STATUSES, reasons=states.STUCK_REASONS, searched=searched)

    # -- one run -----------------------------------------------------------------------

    def load(self, workflow_id: str) -> Run:
        return Run(self.engine, workflow_id)

    def timeline(self, run: Run, steps: Page, complete: bool) -> Markup:
        """The run's timeline: a bar per attempt (``steps`` when ``complete``, else read again) up to
        ``MAX_BARS`` attempts, beyond that a bar per step drawn from an aggregate."""
        rows = steps.rows if complete else None
        if rows is None and steps.older is None and run.attempt_count() <= MAX_BARS:
            rows = run.steps()  # a page further back, of a run with few attempts (a link typed by hand)
        if rows is not None and len(rows) <= MAX_BARS:
            return render_timeline(rows, run.pause_events(), g.pgbus_now)
        end = run.row["finished_at"] or g.pgbus_now
        return render_buckets(run.attempt_buckets(run.row["created_at"], end, BUCKETS), run.pause_events(),
                              run.row["created_at"], end)

    def run_page(self, workflow_id: str, *, error: str | Markup | None = None, status: int = 200,
                 form: Mapping[str, str] | None = None) -> tuple[str, int]:
        cursors = read_cursors()
        run = self.load(workflow_id)
        self.sync_clock(run.row["db_now"])
        steps, events = run.steps_page(cursors["steps_before"]), run.events_page(cursors["events_before"])
        signals = run.signals_page(cursors["signals_before"], bounded_payloads=True)
        children, batches = run.children_page(cursors["children_before"]), run.batches_page(cursors["batches_before"])
        row = shapes.run_values(run)
        latest = run.latest_step or {}
        klass = run.klass
        plan = run.resume_plan()
        actions = helpers.dashboard_actions(run.available_actions)
        open_step = latest.get("step_name") if latest.get("status") in states.OPEN_STEP else None
        attempts = [
            {"row": s, "seconds": ((s["finished_at"] or g.pgbus_now) - s["started_at"]).total_seconds()
             if s["started_at"] else None}
            for s in steps.rows
        ]
        notice = notices.take("action", "signal", run=str(run.workflow_id))
        ongoing_children = run.ongoing_children() if actions else 0
        pages = {**cursors, "older_steps": steps.older, "older_events": events.older}

        def page_url(anchor: str, **changed: int | None) -> str:
            """This page with some lists' cursors changed (the others stay where they are)."""
            args: dict[str, Any] = {name: value for name, value in {**cursors, **changed}.items() if value is not None}
            return url_for(".run", workflow_id=run.workflow_id, _anchor=anchor, **args)

        return render(
            "pgbus/run.html", live=True, run=run, row=row, p=self.present(row), subject=self.subject(row), plan=plan,
            actions=actions, primary=helpers.primary_action(actions), verbs=verbs.BY_NAME,
            buttons={a: helpers.action_button(a, plan, open_step) for a in actions},
            step_names=[s.name for s in klass.steps] if klass else [], attempts=attempts, events=events.rows,
            pages=pages, page_url=page_url, signals=signals, batches=batches, children=children,
            payloads={sig["id"]: shown_json(sig["payload"], sig["payload_head"]) for sig in signals.rows},
            timeline=self.timeline(run, steps, cursors["steps_before"] is None and steps.older is None),
            arguments=pretty(run.arguments), error=error, form=form or {},
            outputs={step: shown_json(value, limit=INLINE_CHARS) for step, value in run.outputs().items()},
            notice=notice, signal_allowed=signal_matters(run), parent=run.parent(),
            step_gone=klass is not None and runner.step_gone(klass, latest.get("step_name") or run.current_step),
            confirms={a: helpers.action_confirm(a, run.workflow_class, run.current_step, helpers.TEXT,
                                                open_step=open_step is not None, children=ongoing_children)
                      for a in actions},
        ), status

    def act(self, workflow_id: str, action: str) -> Response | tuple[str, int]:
        if action not in helpers.DASHBOARD_ACTIONS:
            raise NotFound(markup(ugettext("The dashboard has no action %(value)s."), value=inputs.shown(action)))
        run = self.load(workflow_id)
        reason = inputs.text(request.form, "reason")
        params, missing = inputs.verb_params(verbs.BY_NAME[action], request.form)
        if missing is not None:
            raise BadRequest(gettext(missing))
        step = params.get("step")
        if request.form.get("confirmed") != "1":
            latest = run.latest_step or {}
            ongoing = run.ongoing_children()
            question = helpers.action_confirm(action, run.workflow_class, step or run.current_step, helpers.HTML,
                                              open_step=latest.get("status") in states.OPEN_STEP, children=ongoing)
            fields = {"reason": reason or "", **{k: v for k, v in params.items() if isinstance(v, str)}}
            return render(
                "pgbus/confirm.html", question=question, target=url_for(".act", workflow_id=run.workflow_id,
                                                                         action=action),
                fields=fields, back=url_for(".run", workflow_id=run.workflow_id),
                submit=helpers.label(helpers.ACTION_LABELS, action)), 200
        try:
            run.act(action, actor=g.pgbus_actor, reason=reason, **params)
        except (ActionNotAllowed, SubjectConflict) as exc:
            return self.run_page(workflow_id, error=_not_allowed(exc, run), status=409)
        except NOT_INPUT_ERRORS:
            raise
        except PgbusError as exc:
            return self.run_page(workflow_id, error=refused(exc), status=400)
        notices.keep("action", run=str(run.workflow_id), action=action)
        return redirect(url_for(".run", workflow_id=run.workflow_id), 303)

    def signal(self, workflow_id: str) -> Response | tuple[str, int]:
        run = self.load(workflow_id)
        form = {k: inputs.check(k, request.form.get(k, "")) for k in ("name", "payload", "idempotency_key", "reason")}
        raw = form["payload"].strip()
        try:
            data = json.loads(raw) if raw else None
        except json.JSONDecodeError as exc:  # where, in the viewer's words; the parser's own English as code
            where = markup(ugettext("The payload is not valid JSON at line %(line)s, column %(column)s: "
                                    "%(problem)s"), line=number(exc.lineno), column=number(exc.colno),
                           problem=code(exc.msg))
            return self.run_page(workflow_id, error=where, status=400, form=form)
        except ValueError as exc:
            message = gettext("The payload is not valid JSON: %(problem)s", problem=str(exc))
            return self.run_page(workflow_id, error=message, status=400, form=form)
        except RecursionError:
            message = gettext("The payload is nested too deeply to be read.")
            return self.run_page(workflow_id, error=message, status=400, form=form)
        name = form["name"].strip()
        if not name or len(name) > states.SIGNAL_NAME_LIMIT:  # in the viewer's words, not the engine's English
            message = gettext("Nothing was changed: a signal's name has 1 to %(limit)s characters.",
                              limit=number(states.SIGNAL_NAME_LIMIT))
            return self.run_page(workflow_id, error=message, status=400, form=form)
        try:
            result = run.signal(name, data, idempotency_key=form["idempotency_key"].strip() or None,
                                actor=g.pgbus_actor, reason=form["reason"].strip() or None)
        except NOT_INPUT_ERRORS:
            raise
        except TooManyPendingSignals as exc:  # the run's state, not the form, stands in the way: a conflict
            return self.run_page(workflow_id, error=too_many_signals(exc), status=409, form=form)
        except PgbusError as exc:
            return self.run_page(workflow_id, error=refused(exc), status=400, form=form)
        notices.keep("signal", run=str(run.workflow_id), duplicate=bool(result.duplicate_delivery))
        return redirect(url_for(".run", workflow_id=run.workflow_id), 303)

    # -- attention -----------------------------------------------------------------------

    def attention(self) -> str:
        workflow_class = inputs.text(request.args, "workflow_class")
        self.sync_clock()
        groups = queries.attention_groups(self.engine, workflow_class)
        items = [
            {"g": group, "actions": [(a, helpers.bulk_confirm(a, group, helpers.TEXT),
                                      helpers.bulk_confirm(a, group, helpers.HTML))
                                     for a in helpers.BULK_BY_REASON[group.reason]],
             "runs_url": helpers.group_runs_url(group)}
            for group in groups
        ]
        result = notices.take("bulk")
        return render("pgbus/attention.html", live=True, items=items, result=result, workflow_class=workflow_class)

    def bulk(self) -> Response | tuple[str, int]:
        form = {name: inputs.check(name, request.form.get(name, ""))
                for name in ("action", "workflow_class", "step_name", "stuck_reason", "error_class", "reason")}
        action = form["action"]
        key = {"workflow_class": form["workflow_class"], "step_name": form["step_name"],
               "reason": form["stuck_reason"], "error_class": form["error_class"] or None}
        if action not in verbs.BULK_ACTIONS:
            raise BadRequest(markup(ugettext("The dashboard has no action %(value)s."), value=inputs.shown(action)))
        if key["reason"] not in states.STUCK_REASONS:
            raise BadRequest(markup(ugettext("Unknown stuck reason %(value)s."),
                                    value=inputs.shown(form["stuck_reason"])))
        reason = form["reason"].strip() or None
        if request.form.get("confirmed") != "1":
            group = next((grp for grp in queries.attention_groups(self.engine, key["workflow_class"])
                          if grp.key() == key), None)
            if group is None:
                notices.keep("bulk", action=action, moved=0, refused=0)
                return redirect(url_for(".attention"), 303)
            fields = {"action": action, "workflow_class": group.workflow_class, "step_name": group.step_name,
                      "stuck_reason": group.reason, "error_class": group.error_class or "", "reason": reason or ""}
            return render("pgbus/confirm.html", question=helpers.bulk_confirm(action, group, helpers.HTML),
                          target=url_for(".bulk"), fields=fields, back=url_for(".attention"),
                          submit=helpers.bulk_button(action, group.count, group.capped)), 200
        try:
            result = queries.bulk_act(self.engine, action, key, actor=g.pgbus_actor, reason=reason)
        except NOT_INPUT_ERRORS:
            raise
        except PgbusError as exc:
            raise BadRequest(refused(exc)) from None
        notices.keep("bulk", action=action, moved=result.moved, refused=result.refused)
        return redirect(url_for(".attention"), 303)

    def missing(self, rest: str = "") -> str:
        """Any other address under the prefix: the dashboard's own "page not found" in the viewer's
        language (routing's 404 never reaches the blueprint's handlers, so it would otherwise be the
        host app's or Werkzeug's English page)."""
        allowed = set(current_app.url_map.bind_to_environ(request.environ).allowed_methods()) - {"GET", "HEAD"}
        if allowed - {"OPTIONS"}:  # an address that takes a form: the wrong method, not a missing page
            raise MethodNotAllowed(valid_methods=sorted(allowed))
        raise NotFound(no_page())

    # -- limits ------------------------------------------------------------------------

    def limits(self) -> str:
        """Every limit and rate: its kind, capacity, keys, slots in use, runs waiting and busiest keys."""
        self.sync_clock()
        items = [{"l": use, "kind": helpers.label(helpers.LIMIT_KIND_LABELS, use.kind),
                  "capacity": helpers.capacity_text(use.kind, use.capacity, use.per_seconds),
                  # a rate with runs in line: when its wake-up lets the next ones start
                  "wake": clock_tag(use.wake_at, g.pgbus_now) if use.waiting and use.wake_at else None}
                 for use in queries.limits(self.engine)]
        return render("pgbus/limits.html", live=True, items=items)

    # -- batch -------------------------------------------------------------------------

    def batch(self, batch_id: str) -> str:
        number = inputs.whole_number(batch_id, "batch_id")
        after = inputs.whole_number(request.args.get("after"), "after", minimum=0, maximum=inputs.INT_MAX)
        self.sync_clock()
        found = queries.batch_page(self.engine, number, after, bounded_values=True) if number is not None else None
        if found is None:
            abort(404, markup(ugettext("No batch has the id %(value)s."), value=inputs.shown(batch_id)))
        batch, children = found
        total = max(int(batch["total"]), 1)
        return render("pgbus/batch.html", live=True, batch=batch, children=children, subject=self.subject(batch),
                      name=batch_name(batch["workflow_class"], batch["step_name"]),
                      done_pct=100.0 * batch["done"] / total, failed_pct=100.0 * batch["failed"] / total,
                      args={c["position"]: shown_json(c["args"], c["args_head"]) for c in children.rows},
                      results={c["position"]: shown_json(c["result"], c["result_head"]) for c in children.rows
                               if c["result"] is not None or c["result_head"] is not None})


#: The lists of a run page and the query argument of each one's keyset cursor.
CURSORS = ("steps_before", "events_before", "signals_before", "children_before", "batches_before")


def read_cursors() -> dict[str, int | None]:
    """The run page's cursors from the query string (checked; None for a list on its newest page)."""
    return {name: inputs.whole_number(request.args.get(name), name) for name in CURSORS}


#: A JSON value longer than this many characters (indented) is shown cut, with the rest a click away.
PREVIEW_CHARS = 200
#: The longest JSON text a page carries whole (in a disclosure); a longer one is a link to its JSON read.
INLINE_CHARS = 2_000


@dataclass(frozen=True)
class ShownJson:
    """A stored JSON value as a page shows it: ``text``, all of it or its start (``cut``); when cut,
    ``whole`` is all of it if a page may carry that much, else None (a link reads it)."""

    text: str
    cut: bool = False
    whole: str | None = None


def shown_json(value: Any, head: str | None = None, limit: int = PREVIEW_CHARS) -> ShownJson:
    """``value`` (or, for a value too large to read on a page, ``head``: the start of its stored JSON
    text, see :func:`pgbus_flask.handle.bounded`) cut to ``limit`` characters; the whole of a value up to
    :data:`INLINE_CHARS` comes too (one click away on the page), a longer one is a link away."""
    if head is not None:
        return ShownJson(escape_surrogates(head[:limit]), cut=True)
    text = pretty(value)
    if len(text) <= limit:
        return ShownJson(text)
    return ShownJson(text[:limit], cut=True, whole=text if len(text) <= INLINE_CHARS else None)


def signal_matters(run: Run) -> bool:
    """Whether the run page offers the send-signal form: the run is ongoing, it is not waiting for a
    fan-out batch (no signal ends that wait), and a step from its current one on waits for a signal
    (when its class is importable here; otherwise that cannot be told, and the form stays)."""
    if "signal" not in run.available_actions:
        return False
    latest = run.latest_step or {}
    if latest.get("status") == "waiting" and latest.get("batch_id") is not None:
        return False
    if run.klass is None:
        return True
    names = [spec.name for spec in run.klass.steps]
    first = names.index(run.current_step) if run.current_step in names else 0
    return any(spec.wait_for for spec in run.klass.steps[first:])


def pretty(value: Any) -> str:
    """Stored JSON, indented for reading (escaped by the template); a lone surrogate in a string
    shows as its ``\\udxxx`` escape, as JSON writes it."""
    text = json.dumps(payload.from_json(value), indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return escape_surrogates(text)


def escape_surrogates(text: str) -> str:
    """JSON text with each lone surrogate written as its ``\\uXXXX`` escape (the same JSON, encodable)."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _not_allowed(exc: PgbusError, run: Run) -> str:
    if isinstance(exc, ActionNotAllowed):
        allowed = ", ".join(helpers.label(helpers.ACTION_LABELS, a) for a in exc.allowed) or "—"
        return gettext("%(action)s is not possible now: the run is %(status)s. Nothing was changed. "
                       "Possible now: %(allowed)s.",
                       action=helpers.label(helpers.ACTION_LABELS, exc.action),
                       status=helpers.label(helpers.RUN_STATUS_LABELS, exc.status), allowed=allowed)
    return str(exc)


def register(bp: Blueprint, engine: Engine) -> Pages:
    """Add the pages of ``engine``'s dashboard to ``bp``."""
    pages = Pages(engine)
    bp.add_url_rule("/", "overview", pages.overview)
    bp.add_url_rule("/runs", "runs", pages.runs)
    bp.add_url_rule("/runs/<workflow_id>", "run", lambda workflow_id: pages.run_page(workflow_id))
    bp.add_url_rule("/runs/<workflow_id>/actions/<action>", "act", pages.act, methods=["POST"])
    bp.add_url_rule("/runs/<workflow_id>/signals", "signal", pages.signal, methods=["POST"])
    bp.add_url_rule("/attention", "attention", pages.attention)
    bp.add_url_rule("/attention/bulk", "bulk", pages.bulk, methods=["POST"])
    bp.add_url_rule("/batches/<batch_id>", "batch", pages.batch)
    bp.add_url_rule("/limits", "limits", pages.limits)
    bp.add_url_rule("/<path:rest>", "missing", pages.missing)  # the least specific rule: only what none takes
    return pages
