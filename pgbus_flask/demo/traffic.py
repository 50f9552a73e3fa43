"""Live traffic: new orders and sign-ups while the demo runs."""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ..config import redact
from ..engine import Engine
from ..handle import Run
from .seeding import ITEMS
from .workflows import OnboardingWorkflow, OrderWorkflow


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
