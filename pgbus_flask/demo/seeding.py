"""Seeding: the real engine and workers driven into every state the dashboard presents."""

from __future__ import annotations

import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from psycopg import sql
from rq import SimpleWorker

from ..engine import Engine
from ..handle import Run
from ..testing import wait_until
from .services import SEED_KEY_PREFIX, WAIT, Services
from .workflows import (
    InvoiceSync,
    MonthlyReport,
    OnboardingWorkflow,
    OrderWorkflow,
    PartnerCatalogSync,
    QuarterClose,
    set_erp_online,
)


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
        from ..sweep import sweep

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
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}

        def progress(run: Run) -> bool:
            batches = run.batches()
            if batches and batches[-1]["done"] >= children_done:
                return True
            worker = _PartnerWorker([self.engine.queue("partners")], connection=self.engine.redis)
            try:
                worker.work(burst=True, max_jobs=1, logging_level="WARNING")
            finally:
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
            return False

        self.until(label, progress, f"has {children_done} partner jobs done")


class _PartnerWorker(SimpleWorker):
    """A burst worker of one job that takes no commands: without RQ's command-channel thread, whose
    stop can wait up to a minute (redis-py 8.2), each of the seeding's short turns ends at once."""

    def subscribe(self) -> None:
        pass

    def unsubscribe(self) -> None:
        pass


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
    from ..states import RUN_STATUSES

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
    set_erp_online(engine.redis, True)
    _start_the_first_runs(s)
    _fill_part_of_a_partner_batch(s)
    _take_the_erp_down(s)
    _take_payments(s)
    _onboard_customers(s)
    _run_reports(s)
    _queue_catalogs(s)
    _finish_and_spread(s)
    return s.runs


def _start_the_first_runs(s: Seeder) -> None:
    """Everything the main worker can run at once."""
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


def _fill_part_of_a_partner_batch(s: Seeder) -> None:
    """A batch of partner jobs, 7 of 12 done by this process."""
    # The partners queue has no worker: act as one here for one batch, stopping at 7 of 12.
    s.start("catalog-spring-2027", PartnerCatalogSync, ("Catalog", "spring-2027"), catalog="spring-2027")
    s.work_partner_jobs("catalog-spring-2027", children_done=7)
    s.at("catalog-spring-2027", "waiting", "push_prices")


def _take_the_erp_down(s: Seeder) -> None:
    """Invoices synced while the ERP is up, three more and a quarter's close paused once it is down."""
    # Invoices sync while the ERP is up; then it goes down and three more pause.
    for number in ("0190", "0191"):
        s.at(f"invoice-{number}", "finished")
    set_erp_online(s.engine.redis, False)
    for number, amount in (("0192", "310.00"), ("0193", "87.50"), ("0194", "4410.00")):
        s.start(f"invoice-{number}", InvoiceSync, ("Invoice", f"INV-2026-{number}"), invoice=f"INV-2026-{number}",
                amount=amount)
    # The quarter's close syncs two more invoices as child runs: they pause too, and it waits.
    s.start("close-2026-q4", QuarterClose, ("Quarter", "2026-Q4"), quarter="2026-Q4",
            invoices=[("INV-2026-0195", "640.00"), ("INV-2026-0196", "18.20")])


def _take_payments(s: Seeder) -> None:
    """Three orders paid (one meets a failing vendor), one cancelled, one reattempting."""
    # Payments: confirm three orders (one of which meets a failing vendor), cancel one.
    for label in ("order-1042", "order-1044", "order-1047", "order-1045", "order-1048"):
        s.at(label, "waiting", "confirm_payment")
    for label in ("order-1042", "order-1044", "order-1047"):
        s.runs[label].signal("payment_confirmed", {"psp": "stripe", "intent": f"pi_{label[-4:]}"},
                             idempotency_key=f"evt_{label}", actor="webhook:psp")
    s.runs["order-1048"].cancel(actor="dashboard:bob", reason="Customer cancelled by phone before paying")
    s.at("order-1046", "ready", "capture_payment", "scheduled")


def _onboard_customers(s: Seeder) -> None:
    """Onboarding: one verified, one on hold, two waiting (one for 3 days)."""
    # Onboarding: one verifies, one is put on hold by an operator, two keep waiting.
    for customer in (311, 312, 313, 314):
        s.at(f"customer-{customer}", "waiting", "wait_for_verification")
    s.runs["customer-313"].signal("email_verified", {"ip": "203.0.113.7"}, idempotency_key="verify-313")
    s.runs["customer-314"].pause(actor="dashboard:alice",
                                 reason="Customer asked us to hold the welcome pack until their SSO is set up")
    s.shift("customer-312", timedelta(days=3))


def _run_reports(s: Seeder) -> None:
    """Reports: one stalled, one rendering for two hours."""
    # Reports: 2026-10's upload hangs until the sweep declares it stalled; then 2026-11
    # takes the rendering worker for two hours.
    s.at("report-2026-09", "finished")
    s.sweeping_until_paused("report-2026-10")
    s.start("report-2026-11", MonthlyReport, ("Report", "2026-11"), month="2026-11", render_seconds=2 * 3600)
    s.at("report-2026-11", "running", "render_pdf")


def _queue_catalogs(s: Seeder) -> None:
    """Catalogs: queued now, queued an hour ago, and put off until tomorrow."""
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


def _finish_and_spread(s: Seeder) -> None:
    """The runs that finish or pause by themselves, and the finished ones spread over the last hours."""
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
