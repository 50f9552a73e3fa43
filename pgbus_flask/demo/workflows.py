"""The demo's workflows (``pgbus-demo``): importable by worker processes
(``PGBUS_IMPORT=pgbus_flask.demo.workflows``).

- :class:`OrderWorkflow`: reserve stock, capture the payment (reattempted
  after a backoff when the gateway flakes), wait for ``payment_confirmed``
  (2 hours at most), notify 12 vendors in a fan-out (one can fail), ship.
- :class:`OnboardingWorkflow`: create the account, send the verification
  e-mail, wait as long as it takes for ``email_verified``, send the welcome.
- :class:`InvoiceSync`: push an invoice to the ERP; ``sync_to_erp`` raises
  TimeoutError while the ERP is down. An operator "fixes" it by bringing
  the ERP back (the demo's ``/erp`` page, or ``SET pgbus-demo:erp-online 1``
  in Redis), then resumes the paused runs (one by one or in bulk).
- :class:`QuarterClose`: syncs a quarter's last invoices as child runs of
  :class:`InvoiceSync` and waits for them; with the ERP down it waits on
  paused children.
- ``StockCount`` (declared by :func:`declare_schedules`, only in ``pgbus-demo`` and its
  workers): started by the sweep every 2 minutes, a scheduled class.
- :class:`MonthlyReport`: a long ``render_pdf`` on the ``rendering`` queue
  (its own worker) and an ``upload`` whose first attempt can hang past its
  2-second stall deadline (the sweep declares it stalled; resume retries it).
- :class:`PartnerCatalogSync`: a fan-out to 12 partner shops on the
  ``partners`` queue, which no worker of the demo serves (start one with
  ``pgbus-worker --queues partners`` to see those runs move on).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from redis import Redis

from .. import Workflow, step
from ..definition import registry

#: The Redis key saying the (pretend) ERP answers; absent or "0" means down.
ERP_KEY = "pgbus-demo:erp-online"

VENDORS = (
    "acme-textiles", "baltic-buttons", "copper-kettle", "delta-dyes", "evergreen-wool", "fjord-leather",
    "granite-zips", "harbor-thread", "indigo-mills", "juniper-linen", "kestrel-cotton", "nordic-knits",
)

PARTNERS = (
    "shop.alpine.test", "shop.brightside.test", "shop.cobalt.test", "shop.dunes.test", "shop.ember.test",
    "shop.fernway.test", "shop.glacier.test", "shop.hollow.test", "shop.ivory.test", "shop.jetty.test",
    "shop.kiln.test", "shop.lumen.test",
)


def erp_online(redis: Redis) -> bool:
    """Whether the pretend ERP answers (see :data:`ERP_KEY`)."""
    return redis.get(ERP_KEY) in (b"1", "1")


def set_erp_online(redis: Redis, online: bool) -> None:
    """Bring the pretend ERP up or down."""
    redis.set(ERP_KEY, "1" if online else "0")


# -- fan-out children (module-level so RQ can import them) ---------------------


def notify_vendor(vendor: str, order_id: int, failing_vendor: str | None = None) -> str:
    """Tell one vendor about an order; ``failing_vendor`` answers 503."""
    if vendor == failing_vendor:
        raise ConnectionError(f"{vendor}: vendor API answered 503 Service Unavailable")
    return f"{vendor} notified of order {order_id}"


def push_catalog(partner: str, catalog: str) -> str:
    """Push a catalog's prices to one partner shop."""
    return f"{catalog} pushed to {partner}"


# -- workflows -------------------------------------------------------------------


class OrderWorkflow(Workflow):
    """An order from checkout to shipping."""

    queue = "orders"

    @step
    def reserve_stock(self) -> dict[str, Any]:
        items = self.kwargs.get("items", [])
        return {"order_id": self.kwargs["order_id"], "warehouse": "AMS-2",
                "reserved": [{"sku": item["sku"], "qty": item["qty"]} for item in items]}

    @step(on_error="reattempt", max_reattempts=3, backoff=timedelta(minutes=15))
    def capture_payment(self) -> dict[str, Any]:
        if self.kwargs.get("gateway_flaky") and self.attempt == 1:
            raise ConnectionError("payment gateway psp.example.test reset the connection")
        return {"payment_intent": f"pi_{self.kwargs['order_id']}", "amount": self.kwargs.get("total", "0.00"),
                "currency": "EUR"}

    @step(wait_for="payment_confirmed", wait_timeout=timedelta(hours=2))
    def confirm_payment(self) -> Any:
        assert self.received_signal is not None
        return {"confirmation": self.received_signal.payload}

    @step
    def notify_vendors(self) -> Any:
        # Only the first attempt meets the failing vendor: "Retry notify_vendors" succeeds.
        failing = self.kwargs.get("failing_vendor") if self.attempt == 1 else None
        return self.fan_out(notify_vendor, [(vendor, self.kwargs["order_id"], failing) for vendor in VENDORS])

    @step
    def ship(self) -> dict[str, Any]:
        return {"carrier": "DHL", "tracking": f"JD0146000{self.kwargs['order_id']}"}


class OnboardingWorkflow(Workflow):
    """A new customer's first days: the verification wait has no deadline."""

    queue = "onboarding"

    @step
    def create_account(self) -> dict[str, Any]:
        return {"customer_id": self.kwargs["customer_id"], "plan": self.kwargs.get("plan", "starter")}

    @step
    def send_verification_email(self) -> dict[str, Any]:
        return {"to": self.kwargs["email"], "template": "verify-email"}

    @step(wait_for="email_verified")
    def wait_for_verification(self) -> Any:
        assert self.received_signal is not None
        return {"verified": self.received_signal.payload}

    @step
    def send_welcome(self) -> dict[str, Any]:
        return {"to": self.kwargs["email"], "template": "welcome"}


class InvoiceSync(Workflow):
    """Push an invoice to the ERP; fails (and pauses) while the ERP is down."""

    queue = "invoices"

    @step
    def export_invoice(self) -> dict[str, Any]:
        return {"invoice": self.kwargs["invoice"], "amount": self.kwargs.get("amount", "0.00")}

    @step
    def sync_to_erp(self) -> dict[str, Any]:
        if not erp_online(self.engine.redis):
            raise TimeoutError("ERP erp.example.test did not answer within 30 s")
        return {"erp_document": f"ERP-{self.kwargs['invoice']}"}

    @step
    def mark_synced(self) -> str:
        return f"{self.kwargs['invoice']} synced"


class QuarterClose(Workflow):
    """Close a quarter's books: sync its last invoices as child runs of :class:`InvoiceSync`
    (the step waits for them), then close. While the ERP is down the children pause, and the
    close waits for them: fix the ERP, resume the invoices, and the close goes on."""

    @step
    def sync_invoices(self) -> Any:
        return [self.start_child(InvoiceSync, invoice=invoice, amount=amount)
                for invoice, amount in self.kwargs["invoices"]]

    @step
    def close_books(self) -> str:
        synced = self.output_of("sync_invoices")
        return f"{self.kwargs['quarter']} closed with {synced['finished']} invoices synced"


class MonthlyReport(Workflow):
    """A monthly report: collect, render (slow, on its own worker), upload (can hang)."""

    queue = "reports"

    @step
    def collect_figures(self) -> dict[str, Any]:
        return {"month": self.kwargs["month"], "orders": 1874, "revenue": "219340.50"}

    @step(queue="rendering", timeout=timedelta(hours=3))
    def render_pdf(self) -> dict[str, Any]:
        time.sleep(float(self.kwargs.get("render_seconds", 0.2)))
        return {"pages": 42, "file": f"report-{self.kwargs['month']}.pdf"}

    @step(timeout=timedelta(seconds=2))
    def upload(self) -> str:
        if self.kwargs.get("sftp_hangs") and self.attempt == 1:
            self._hang_until_declared_stalled()
        return f"uploaded report-{self.kwargs['month']}.pdf"

    def _hang_until_declared_stalled(self, limit: float = 60.0) -> None:
        """Act like a dead SFTP connection: block until the sweep has given up on this attempt."""
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            with self.engine.db.connection() as conn:
                row = conn.execute(
                    "SELECT status FROM pgbus_workflow_steps WHERE workflow_id = %s AND step_name = %s"
                    " AND attempt = %s", (self.workflow_id, self.step_name, self.attempt),
                ).fetchone()
            if row is None or row[0] != "in_progress":
                return
            time.sleep(0.2)


class PartnerCatalogSync(Workflow):
    """Push a catalog to 12 partner shops (the ``partners`` queue has no worker in the demo)."""

    queue = "partners"

    @step
    def push_prices(self) -> Any:
        return self.fan_out(push_catalog, [(partner, self.kwargs["catalog"]) for partner in PARTNERS])

    @step
    def publish(self) -> str:
        return f"{self.kwargs['catalog']} live on {self.output_of('push_prices')['done']} partner shops"


#: Set by ``pgbus-demo`` for itself and its workers (not a ``PGBUS_*`` setting): declare the
#: demo's scheduled class. Unset in any other process that imports this module (a test, an app
#: trying the workflows), whose sweeps would otherwise start it every 2 minutes.
SCHEDULES_ENV = "PGBUSDEMO_SCHEDULES"


def declare_schedules() -> type[Workflow]:
    """Declare (once) ``StockCount``: counted by the sweep every 2 minutes."""
    existing = registry().get("StockCount")
    if existing is not None:
        return existing

    class StockCount(Workflow):
        """Count the warehouse's stock every 2 minutes (a schedule on the overview)."""

        schedule = timedelta(minutes=2)
        queue = "orders"

        @step
        def count(self) -> dict[str, Any]:
            return {"tick": self.tick.isoformat() if self.tick else None, "skus_counted": len(VENDORS) * 40}

    return StockCount


if os.environ.get(SCHEDULES_ENV) == "1":
    declare_schedules()
