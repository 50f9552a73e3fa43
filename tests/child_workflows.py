"""Workflows that start child workflows (tests/db/test_children.py)."""

from __future__ import annotations

from typing import Any

from pgbus_flask import Workflow, step


class Shipment(Workflow):
    """A child: packs and ships one parcel; pauses when told to fail."""

    @step
    def pack(self) -> dict[str, Any]:
        return {"parcel": self.kwargs["parcel"]}

    @step
    def ship(self) -> dict[str, Any]:
        if self.kwargs.get("fail"):
            raise RuntimeError(f"carrier refused parcel {self.kwargs['parcel']}")
        return {"shipped": self.kwargs["parcel"]}


class Fulfilment(Workflow):
    """A parent: ships every parcel of an order as child runs, then invoices."""

    @step
    def split(self) -> list[int]:
        return list(self.kwargs["parcels"])

    @step
    def ship_all(self) -> Any:
        return [self.start_child(Shipment, parcel=p, fail=p in self.kwargs.get("failing", ()))
                for p in self.output_of("split")]

    @step
    def invoice(self) -> dict[str, Any]:
        return {"shipped": self.output_of("ship_all")["outputs"]}


class FulfilmentTolerant(Workflow):
    """A parent that carries on when a child run was cancelled."""

    @step(on_child_failure="continue")
    def ship_all(self) -> Any:
        return [self.start_child(Shipment, parcel=p) for p in self.kwargs["parcels"]]

    @step
    def report(self) -> dict[str, Any]:
        out = self.output_of("ship_all")
        return {"finished": out["finished"], "cancelled": out["cancelled"]}


class OneChild(Workflow):
    """A parent with a single child (returned alone, not in a list)."""

    @step
    def delegate(self) -> Any:
        return self.start_child(Shipment, parcel=1, subject=("Parcel", self.kwargs["parcel_subject"]))


class Mixed(Workflow):
    """A step returning start_child(...) mixed with other values: a mistake, said so."""

    @step
    def bad(self) -> Any:
        return [self.start_child(Shipment, parcel=1), 42]
