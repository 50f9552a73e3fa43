"""The RQ job functions of notifications (RQ finds them by dotted path): the pump and one delivery."""

from __future__ import annotations

from ..engine import resolve_engine


def pump() -> None:
    """Turn the outbox into deliveries (pgbus_flask.notify.pump)."""
    from . import pump as pump_now

    pump_now(resolve_engine())


def deliver(delivery_id: int) -> None:
    """One try of one webhook message (pgbus_flask.notify.deliver)."""
    from . import deliver as deliver_now

    deliver_now(resolve_engine(), delivery_id)
