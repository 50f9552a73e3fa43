"""Signals the host app can receive (blinker, as Flask's own signals are), sent after commit.

::

    from pgbus_flask import signals

    @signals.run_needs_attention.connect
    def page_someone(sender, **notice):
        ...  # notice: run_id, workflow_class, step, reason, error_class, error_message, attempt

Each is sent in whichever process made the change (a worker, a web process, the sweep), once the
transaction that made it has committed, with the workflow class's name as the sender (so
``connect(receiver, sender="InvoiceSync")`` hears one class only). A receiver that raises is logged
and reported (``PGBUS_ERROR_REPORTER``, Sentry) and never breaks the change nor the other receivers.

How a change becomes a notice: the triggers of migration 0019 leave one line per notice in the
transaction's setting ``pgbus.notices``; :func:`watching` tells the database layer whether any
receiver is connected (the setting is read with the COMMIT only then), and :func:`dispatch` sends
them. ``attention_group_opened`` and ``attention_group_closed`` are derived after commit: a group
opened when the runs this transaction put in it are all the runs it holds, and closed when it holds
none. Two transactions that fill an empty group at the same instant may both say it opened: the
webhooks (pgbus_flask.notify) keep each group's state exactly; a signal is the process's own news.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from blinker import Namespace

log = logging.getLogger("pgbus_flask.signals")

_signals = Namespace()

#: A run entered an attention group (paused, stalled, or past a threshold the sweep saw).
run_needs_attention = _signals.signal("run-needs-attention")
#: A run left its attention group (resumed, retried, cancelled, skipped, moved on, picked up).
run_back_to_normal = _signals.signal("run-back-to-normal")
run_finished = _signals.signal("run-finished")
run_cancelled = _signals.signal("run-cancelled")
#: A step attempt failed (its error policy then retries, pauses or cancels).
step_failed = _signals.signal("step-failed")
#: The first run entered an attention group that held none.
attention_group_opened = _signals.signal("attention-group-opened")
#: The last run left an attention group.
attention_group_closed = _signals.signal("attention-group-closed")

BY_KIND = {
    "run_needs_attention": run_needs_attention,
    "run_back_to_normal": run_back_to_normal,
    "run_finished": run_finished,
    "run_cancelled": run_cancelled,
    "step_failed": step_failed,
}
GROUP_SIGNALS = (attention_group_opened, attention_group_closed)
ALL = (*BY_KIND.values(), *GROUP_SIGNALS)


def watching() -> bool:
    """Whether a receiver is connected to any of the signals (then each commit reads its notices)."""
    return any(signal.receivers for signal in ALL)


def parse(text: str | None) -> list[dict[str, Any]]:
    """The notices of a transaction's ``pgbus.notices`` setting, in the order they happened."""
    notices = []
    for line in (text or "").splitlines():
        if line:
            raw = json.loads(line)
            notices.append({"kind": raw["kind"], "run_id": raw["run"], "workflow_class": raw["class"],
                            "step": raw["step"], "reason": raw["reason"], "error_class": raw["error_class"],
                            "error_message": raw["error"], "attempt": raw["attempt"], "outbox": raw["outbox"]})
    return notices


def group_of(notice: dict[str, Any]) -> tuple[str, str, str, str]:
    """The attention group a run_needs_attention or run_back_to_normal notice is about."""
    return notice["workflow_class"], notice["step"] or "", notice["reason"] or "", notice["error_class"] or ""


def dispatch(notices: list[dict[str, Any]], count_group: Callable[[tuple[str, str, str, str]], int],
             report: Callable[[BaseException, dict[str, Any]], None]) -> None:
    """Send the signals of one committed transaction's notices. ``count_group`` counts the runs an
    attention group holds now (asked only when someone listens to the group signals)."""
    for notice in notices:
        fields = {key: value for key, value in notice.items() if key not in ("kind", "outbox")}
        _send(BY_KIND[notice["kind"]], notice["workflow_class"], fields, report)
    if not any(signal.receivers for signal in GROUP_SIGNALS):
        return
    entered: Counter[tuple[str, str, str, str]] = Counter()
    left: Counter[tuple[str, str, str, str]] = Counter()
    for notice in notices:
        if notice["kind"] == "run_needs_attention":
            entered[group_of(notice)] += 1
        elif notice["kind"] == "run_back_to_normal":
            left[group_of(notice)] += 1
    for group in dict.fromkeys([*entered, *left]):
        try:
            runs = count_group(group)
        except Exception as exc:
            report(exc, {"workflow_class": group[0], "step": group[1]})
            continue
        fields = {"workflow_class": group[0], "step": group[1], "reason": group[2], "error_class": group[3] or None,
                  "runs": runs}
        if entered[group] > left[group] and runs == entered[group] - left[group]:
            _send(attention_group_opened, group[0], fields, report)
        elif left[group] and runs == 0:
            _send(attention_group_closed, group[0], fields, report)


def _send(signal: Any, sender: str, fields: dict[str, Any],
          report: Callable[[BaseException, dict[str, Any]], None]) -> None:
    receivers: Iterable[Callable[..., Any]] = list(signal.receivers_for(sender))
    for receiver in receivers:
        try:
            receiver(sender, **fields)
        except Exception as exc:  # a receiver's failure is its own: the change is committed already
            # reported first: Sentry's dedupe then drops the logging integration's untagged copy
            report(exc, {"run_id": fields.get("run_id"), "workflow_class": sender, "step": fields.get("step")})
            log.exception("pgbus signal %s: receiver %r raised", signal.name, receiver)
