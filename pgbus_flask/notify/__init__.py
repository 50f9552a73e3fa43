"""Telling a person: blinker signals after commit, and webhooks delivered from an outbox.

The triggers of migration 0019 notice, in the transaction of each change, a run entering or leaving
an attention group, a run finished or cancelled, a step attempt failed. Each notice is:

- a line in the transaction's setting ``pgbus.notices``, which :class:`NoticeHook` has the database
  layer read with the COMMIT (only while a receiver is connected or webhooks are set) and hands to
  :func:`pgbus_flask.signals.dispatch` once committed;
- an outbox row of ``pgbus_notices`` when a declared webhook target wants it (written in that same
  transaction: nothing is lost when Redis or the process dies after the commit).

:func:`pump` (an RQ job kicked after such a commit, and a part of every sweep) turns outbox rows into
deliveries: one per run event and target, and for attention groups at most one message per group and
target per ``PGBUS_NOTIFY_INTERVAL`` (opened, "N more", resolved), the rest waiting in
``pgbus_notify_groups`` until the interval passes. :func:`deliver` (an RQ job per delivery) sends one
message, signed per the Standard Webhooks spec, and retries with backoff for a day. The sweep part
(:func:`sweep_part`) announces runs past their threshold (the "absence" notice), pumps, sends again
the deliveries whose job Redis lost, and forgets old deliveries.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib import error as urlerror
from urllib import request as urlrequest

from psycopg.types.json import Jsonb

from .. import db, reporting, signals
from ..errors import PgbusError
from . import messages
from .targets import Target

if TYPE_CHECKING:
    from ..engine import Engine

log = logging.getLogger("pgbus_flask.notify")

PUMP_JOB = "pgbus_flask.notify.jobs.pump"
DELIVER_JOB = "pgbus_flask.notify.jobs.deliver"
#: The advisory lock key of the pump (one pump at a time, across every process).
PUMP_LOCK = 0x70627573_0023
#: Outbox rows, due groups and lost deliveries taken at a time.
BATCH = 500
#: A message not delivered within this of its making is given up (failed).
GIVE_UP_AFTER = timedelta(days=1)
#: Delivered and failed messages are kept this long for the Notifications page.
KEEP_DELIVERIES = timedelta(days=7)
#: A delivery due longer than this ago with no try under way lost its job: the sweep sends it again.
LOST_AFTER = timedelta(seconds=60)
#: Room a try has beyond the target's timeout before another may take it over.
LEASE_MARGIN = 30.0


class UnknownTarget(PgbusError):
    """A webhook target name that PGBUS_WEBHOOKS does not declare."""


def retry_delay(attempts: int) -> timedelta:
    """How long after its ``attempts``-th failed try a message is tried again: 5 s, doubling, at most an hour."""
    return timedelta(seconds=min(5 * 2 ** max(attempts - 1, 0), 3600))


# -- the process's notices --------------------------------------------------------


class NoticeHook:
    """What the database layer asks at each COMMIT (:meth:`wanted`), and what it calls with the
    committed transaction's notices (:meth:`committed`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def wanted(self) -> bool:
        return bool(self.engine.settings.webhooks) or signals.watching()

    def committed(self, notices: list[dict[str, Any]]) -> None:
        if signals.watching():
            signals.dispatch(notices, self._count_group, self._report)
        if self.engine.settings.webhooks and any(notice["outbox"] for notice in notices):
            kick(self.engine)

    def _count_group(self, group: tuple[str, str, str, str]) -> int:
        with self.engine.db.connection() as conn:
            return group_runs(conn, group)[0]

    def _report(self, exc: BaseException, context: dict[str, Any]) -> None:
        _report(self.engine, exc, "signal_receiver", context)


def install(engine: Engine) -> None:
    """Give ``engine``'s database the notice hook (the engine does it when made)."""
    engine.db.notice_hook = NoticeHook(engine)


def _report(engine: Engine, exc: BaseException, where: str, context: dict[str, Any]) -> None:
    """Tell PGBUS_ERROR_REPORTER and Sentry (pgbus_flask.reporting; it never raises)."""
    reporting.report(exc, where, engine=engine, run_id=context.get("run_id"),
                     workflow_class=context.get("workflow_class"), step=context.get("step"))


def group_runs(conn: Any, group: tuple[str, str, str, str]) -> tuple[int, str | None, int]:
    """How many runs of an attention group need a person now, its newest error message, and how many
    of those runs have the notice of their entering still in the outbox (read in the same statement:
    a later pump takes those notices, and must not count those runs again)."""
    workflow_class, step, reason, error_class = group
    name = "notify_group_runs_due" if reason in ("overdue", "waiting_overdue") else "notify_group_runs_paused"
    row = db.fetch_one(conn, name, {"workflow_class": workflow_class, "step": step, "reason": reason,
                                    "error_class": error_class})
    return (int(row["runs"]), row["error_message"], int(row["pending"])) if row else (0, None, 0)


# -- targets ------------------------------------------------------------------------


def declare(engine: Engine) -> None:
    """Store this process's webhook targets, so that the triggers write the outbox rows they want, and
    forget the targets it no longer names. A process without PGBUS_WEBHOOKS declares nothing."""
    targets = engine.settings.webhooks
    if not targets:
        return
    with engine.db.transaction() as tx:
        for target in targets:
            db.run(tx, "notify_declare_target", (target.name, list(target.events), list(target.classes)
                                                 if target.classes is not None else None))
        db.run(tx, "notify_forget_targets", ([target.name for target in targets],))


def target_named(engine: Engine, name: str) -> Target:
    for target in engine.settings.webhooks:
        if target.name == name:
            return target
    raise UnknownTarget(f"no webhook target is named {name!r} in PGBUS_WEBHOOKS")


# -- the pump -------------------------------------------------------------------------


@dataclass
class Pumped:
    """What one :func:`pump` did."""

    notices: int = 0
    deliveries: list[int] = field(default_factory=list)
    next_due: datetime | None = None


def pump(engine: Engine) -> Pumped:
    """Turn the outbox's notices and the attention groups' due messages into deliveries (sent once
    committed); nothing when another process pumps or this one has no targets."""
    done = Pumped()
    targets = engine.settings.webhooks
    if not targets:
        return done
    while True:
        with engine.db.transaction() as tx:
            got = db.fetch_one(tx, "notify_pump_lock", (PUMP_LOCK,))
            if not got or not got["got"]:
                return done
            now = db.fetch_one(tx, "now")["now"]  # type: ignore[index]
            notices = db.fetch_all(tx, "notify_take_notices", (BATCH,))
            made = _turn(engine, tx, targets, notices, now, done)
            tx.after_commit(partial(send, engine, made))
        done.notices += len(notices)
        done.deliveries += made
        if len(notices) < BATCH:
            break
    if done.next_due is not None:
        _kick_at(engine, done.next_due)
    return done


def _turn(engine: Engine, tx: db.Transaction, targets: tuple[Target, ...], notices: list[dict[str, Any]],
          now: datetime, done: Pumped) -> list[int]:
    made: list[int] = []
    entered: dict[tuple[str, str, str, str], int] = {}
    for notice in notices:
        kind = notice["kind"]
        if kind in messages.PER_RUN:
            data = None
            for target in targets:
                if target.wants(kind, notice["workflow_class"]):
                    data = data or messages.run_message(engine.settings, notice)
                    made.append(_add(engine, tx, target, messages.PER_RUN[kind], data, now))
        else:
            group = signals.group_of(notice)
            entered[group] = entered.get(group, 0) + (kind == "run_needs_attention")
    for row in db.fetch_all(tx, "notify_due_groups", (BATCH,)):
        entered.setdefault((row["workflow_class"], row["step"], row["reason"], row["error_class"]), 0)
    for group, count in entered.items():
        runs, error_message, pending = group_runs(tx, group)
        for target in targets:
            if target.wants("attention", group[0]):
                made += _tell(engine, tx, target, group, (runs, pending), count, error_message, now, done)
    return made


def _tell(engine: Engine, tx: db.Transaction, target: Target, group: tuple[str, str, str, str],
          counted: tuple[int, int], entered: int, error_message: str | None, now: datetime,
          done: Pumped) -> list[int]:
    """What ``target`` is told about ``group`` now: opened, grew or resolved, or nothing (yet).

    ``counted`` is the group's runs now and how many of them a notice still in the outbox will
    announce again; "opened" counts every run there is, so those notices are owed back: the group's
    ``entered`` starts below zero by that many, and a run is counted by one message only."""
    runs, pending = counted
    state = db.fetch_one(tx, "notify_group_state", (target.name, *group)) or {
        "is_open": False, "told_runs": 0, "entered": 0, "told_at": None, "due_at": None}
    entered_since = state["entered"] + entered
    if not state["is_open"] and runs > 0:
        event = messages.GROUP_OPENED
    elif state["is_open"] and runs == 0:
        event = messages.GROUP_RESOLVED
    elif state["is_open"] and entered_since > 0:
        event = messages.GROUP_GREW
    else:
        event = None
    save = {"target": target.name, "workflow_class": group[0], "step": group[1], "reason": group[2],
            "error_class": group[3], "is_open": state["is_open"], "told_runs": state["told_runs"],
            # a closed group with no run forgets what entered and left untold; an open one keeps what it owes
            "entered": 0 if event is None and not state["is_open"] else entered_since, "told_at": state["told_at"],
            "due_at": None}
    made = []
    if event is not None:
        allowed_at = state["told_at"] + engine.settings.notify_interval if state["told_at"] else now
        if allowed_at <= now:
            data = messages.group_message(engine.settings, event, group, runs=runs, entered=entered_since,
                                          error_message=error_message)
            made.append(_add(engine, tx, target, event, data, now))
            owed = pending if event == messages.GROUP_OPENED else 0
            save.update(is_open=runs > 0, told_runs=runs, entered=-owed, told_at=now)
        else:
            save["due_at"] = allowed_at
            done.next_due = min(done.next_due or allowed_at, allowed_at)
    db.run(tx, "notify_group_save", save)
    return made


def _add(engine: Engine, tx: db.Transaction, target: Target, event_type: str, data: dict[str, Any], now: datetime,
         requested_by: str | None = None) -> int:
    body = messages.body(target.format, event_type, data, now, engine.settings)
    said = {key: value for key, value in data.items() if key != "sentence"}
    row = db.fetch_one(tx, "notify_add_delivery", (target.name, event_type, f"msg_{uuid.uuid4().hex}", Jsonb(body),
                                                   Jsonb(said), requested_by))
    assert row is not None
    return int(row["id"])


def send_test(engine: Engine, target_name: str, actor: str) -> int:
    """Make a test message for one target (the Notifications page's button) and send it: its delivery id."""
    target = target_named(engine, target_name)
    with engine.db.transaction() as tx:
        now = db.fetch_one(tx, "now")["now"]  # type: ignore[index]
        delivery = _add(engine, tx, target, messages.TEST, messages.test_message(engine.settings, actor), now,
                        requested_by=actor)
        tx.after_commit(lambda: send(engine, [delivery]))
    return delivery


# -- sending ----------------------------------------------------------------------------


def kick(engine: Engine) -> None:
    """Ask a worker to pump now (after a commit that wrote outbox rows); the sweep pumps anyway."""
    try:
        engine.queue(engine.settings.queue).enqueue(PUMP_JOB, job_id="pgbus-notify-pump", result_ttl=0,
                                                    failure_ttl=86400, description="pgbus notify pump")
    except Exception as exc:
        _report(engine, exc, "enqueue", {})
        log.exception("pgbus: the notification pump could not be enqueued; the sweep will pump")


def _kick_at(engine: Engine, at: datetime) -> None:
    try:
        engine.queue(engine.settings.queue).enqueue_at(
            at + timedelta(seconds=1), PUMP_JOB, job_id=f"pgbus-notify-pump-{int(at.timestamp())}", result_ttl=0,
            failure_ttl=86400, description="pgbus notify pump (a digest falls due)")
    except Exception:
        log.exception("pgbus: the digest's pump could not be scheduled; the sweep will pump")


def send(engine: Engine, deliveries: list[int], at: datetime | None = None) -> None:
    """Enqueue one job per delivery (at ``at`` when given); a failure is logged, the sweep sends again."""
    if not deliveries:
        return
    try:
        queue = engine.queue(engine.settings.queue)
        for delivery in deliveries:
            if at is None:
                queue.enqueue(DELIVER_JOB, delivery, result_ttl=0, failure_ttl=86400,
                              description=f"pgbus delivery {delivery}")
            else:
                queue.enqueue_at(at, DELIVER_JOB, delivery, result_ttl=0, failure_ttl=86400,
                                 description=f"pgbus delivery {delivery}")
    except Exception as exc:
        _report(engine, exc, "enqueue", {})  # first: Sentry's dedupe then drops the log line's untagged copy
        log.exception("pgbus: deliveries %s could not be enqueued; the sweep will send them", deliveries)
        _not_enqueued(engine, deliveries)


def _not_enqueued(engine: Engine, deliveries: list[int]) -> None:
    """Deliveries known to have no job (Redis refused it): the next sweep sends them again, rather
    than after :data:`LOST_AFTER`, the wait for a job Redis may still hold."""
    try:
        with engine.db.transaction() as tx:
            db.run(tx, "notify_not_enqueued", (LOST_AFTER.total_seconds(), deliveries))
    except Exception:
        log.exception("pgbus: deliveries %s are sent again only after %s", deliveries, LOST_AFTER)


def deliver(engine: Engine, delivery_id: int) -> str | None:
    """One try of one delivery: its status after it (None when it was not due, or another try holds it)."""
    with engine.db.transaction() as tx:
        row = db.fetch_one(tx, "notify_claim_delivery", (_lease(engine), delivery_id))
    if row is None:
        return None
    try:
        target = target_named(engine, row["target"])
    except UnknownTarget as exc:
        return _failed_try(engine, row, None, None, str(exc))
    data = json.dumps(row["payload"], separators=(",", ":"), ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "User-Agent": "pgbus-flask", "webhook-id": row["webhook_id"]}
    sent_at = datetime.now(timezone.utc)
    headers["webhook-timestamp"] = str(int(sent_at.timestamp()))
    if target.secret:
        from standardwebhooks import Webhook

        headers["webhook-signature"] = Webhook(target.secret).sign(row["webhook_id"], sent_at, data.decode())
    try:
        with urlrequest.urlopen(urlrequest.Request(target.url, data=data, headers=headers, method="POST"),
                                timeout=target.timeout) as answer:
            code, text = answer.status, answer.read(500).decode(errors="replace")
    except urlerror.HTTPError as exc:
        return _failed_try(engine, row, exc.code, exc.read(500).decode(errors="replace"), f"HTTP {exc.code}")
    except (urlerror.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return _failed_try(engine, row, None, None, f"{type(reason).__name__}: {reason}")
    if not 200 <= code < 300:
        return _failed_try(engine, row, code, text, f"HTTP {code}")
    with engine.db.transaction() as tx:
        db.run(tx, "notify_delivered", (code, text, delivery_id))
    return "delivered"


def _lease(engine: Engine) -> float:
    return max((t.timeout for t in engine.settings.webhooks), default=10.0) + LEASE_MARGIN


def _failed_try(engine: Engine, row: dict[str, Any], code: int | None, text: str | None, problem: str) -> str:
    next_at = row["now"] + retry_delay(row["attempts"])
    with engine.db.transaction() as tx:
        result = db.fetch_one(tx, "notify_retry", (next_at, next_at, code, text, problem, row["id"]))
    status = result["status"] if result else "failed"
    if status == "failed":
        given_up = DeliveryGivenUp(f"delivery {row['id']} to {row['target']} given up after {row['attempts']} tries:"
                                   f" {problem}")
        _report(engine, given_up, "webhook_delivery", {})
        log.warning("pgbus: %s", given_up)  # a warning: the report above is the event
    else:
        send(engine, [row["id"]], at=next_at)
    return status


class DeliveryGivenUp(PgbusError):
    """A webhook message that could not be delivered within a day (what the error reporter is told)."""


# -- the sweep's part ------------------------------------------------------------------


@dataclass
class Swept:
    announced: int = 0
    deliveries: int = 0
    resent: int = 0
    forgotten: int = 0


def sweep_part(engine: Engine) -> Swept:
    """Announce the runs past their threshold (each a run_needs_attention notice), declare the targets,
    pump, send again the deliveries whose job was lost, and forget old ones."""
    swept = Swept()
    settings = engine.settings
    for reason, threshold in (("overdue", settings.stall_threshold), ("waiting_overdue", settings.waiting_threshold)):
        if threshold is None:
            continue
        while True:
            with engine.db.transaction() as tx:
                found = db.run(tx, "notify_announce_due", {"reason": reason, "threshold": threshold.total_seconds(),
                                                           "limit": BATCH}).rowcount
            swept.announced += found
            if found < BATCH:
                break
    if not settings.webhooks:
        return swept
    declare(engine)
    swept.deliveries += len(pump(engine).deliveries)
    with engine.db.connection() as conn:
        lost = [row["id"] for row in db.fetch_all(conn, "notify_lost_deliveries", (LOST_AFTER.total_seconds(), BATCH))]
        swept.forgotten = db.run(conn, "notify_forget_deliveries", (KEEP_DELIVERIES.total_seconds(), BATCH)).rowcount
    send(engine, lost)
    swept.resent = len(lost)
    return swept


def recent_deliveries(engine: Engine, limit: int = 50) -> list[dict[str, Any]]:
    """The newest deliveries of every target, for the Notifications page, the JSON API and MCP."""
    with engine.db.connection() as conn:
        return db.fetch_all(conn, "notify_recent_deliveries", (limit,))
