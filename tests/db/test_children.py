"""Child workflows: a step starts runs of other workflows and waits until they end."""

from __future__ import annotations

import pytest

from pgbus_flask import runner
from pgbus_flask.engine import Engine
from pgbus_flask.errors import DefinitionError
from pgbus_flask.handle import Run
from pgbus_flask.sweep import sweep
from tests.child_workflows import Fulfilment, FulfilmentTolerant, Mixed, OneChild, Shipment
from tests.support import work


def children_of(engine: Engine, parent_id: object) -> list[runner.Row]:
    """The parent's child runs, as the Python API lists them."""
    return Run(engine, parent_id).children()


def test_parent_waits_for_its_children_and_completes_with_their_outputs(engine: Engine) -> None:
    run = Fulfilment.start(parcels=[1, 2, 3])
    work(engine)
    run.refresh()
    assert run.status == "finished"
    kids = children_of(engine, run.workflow_id)
    assert [k["workflow_class"] for k in kids] == ["Shipment"] * 3
    assert {k["status"] for k in kids} == {"finished"} and {k["parent_step_name"] for k in kids} == {"ship_all"}
    out = run.outputs()["ship_all"]
    assert out["outputs"] == [{"shipped": 1}, {"shipped": 2}, {"shipped": 3}]
    assert (out["finished"], out["cancelled"], out["total"]) == (3, 0, 3)
    assert out["workflow_ids"] == [str(k["workflow_id"]) for k in kids]
    assert run.outputs()["invoice"] == {"shipped": out["outputs"]}
    events = [e["event"] for e in run.events()]
    assert events.index("children_started") < events.index("children_finished") < events.index("finished")
    started = next(e for e in run.events() if e["event"] == "children_started")
    assert started["details"]["total"] == 3 and started["details"]["classes"] == ["Shipment"]
    child = engine_run(engine, kids[0]["workflow_id"])
    assert child.events()[0]["details"]["parent"] == str(run.workflow_id)
    assert (child.parent_id, child.parent_step, child.parent()) == (run.workflow_id, "ship_all", run)
    assert run.parent() is None and child.children() == []


def engine_run(engine: Engine, workflow_id: object) -> Run:
    return Run(engine, workflow_id)


def test_a_child_paused_on_an_error_keeps_the_parent_waiting(engine: Engine) -> None:
    run = Fulfilment.start(parcels=[1, 2], failing=[2])
    work(engine)
    run.refresh()
    assert (run.status, run.current_step) == ("waiting", "ship_all")
    kids = {k["workflow_id"]: k["status"] for k in children_of(engine, run.workflow_id)}
    assert sorted(kids.values()) == ["finished", "paused"]
    paused = next(engine_run(engine, wid) for wid, status in kids.items() if status == "paused")
    # The operator skips the failing child's step: it finishes, and the parent goes on.
    paused.skip(actor="cli:ops", reason="shipped by hand")
    work(engine)
    run.refresh()
    assert run.status == "finished"
    assert run.outputs()["ship_all"]["outputs"] == [{"shipped": 1}, {"parcel": 2}]


def test_a_cancelled_child_fails_the_parent_step_by_default(engine: Engine) -> None:
    run = Fulfilment.start(parcels=[1, 2], failing=[2])
    work(engine)
    paused = next(k for k in children_of(engine, run.workflow_id) if k["status"] == "paused")
    engine_run(engine, paused["workflow_id"]).cancel(actor="cli:ops", reason="parcel lost")
    run.refresh()
    assert (run.status, run.current_step) == ("paused", "ship_all")
    failed = run.steps()[-1]
    assert failed["status"] == "failed" and failed["error_class"] == "pgbus_flask.errors.ChildRunsCancelled"
    assert failed["error_message"].startswith("1 of 2 child runs were cancelled; first: Shipment ")
    # Resume retries the step: it finds the same children (no second set) and fails again at once.
    run.resume(actor="cli:ops", reason="try again")
    work(engine)
    run.refresh()
    assert run.status == "paused" and len(children_of(engine, run.workflow_id)) == 2
    # Rerunning the cancelled child, then resuming the parent, gets it through.
    engine_run(engine, paused["workflow_id"]).rerun(actor="cli:ops", step="ship", reason="new carrier")
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflows SET arguments = jsonb_set(arguments, '{kwargs,fail}', 'false')"
                     " WHERE workflow_id = %s", (paused["workflow_id"],))
    work(engine)
    run.resume(actor="cli:ops", reason="child shipped")
    work(engine)
    run.refresh()
    assert run.status == "finished" and len(children_of(engine, run.workflow_id)) == 2


def test_children_start_only_when_the_step_runs(engine: Engine) -> None:
    run = FulfilmentTolerant.start(parcels=[1, 2])
    assert children_of(engine, run.workflow_id) == []
    work(engine)
    run.refresh()
    assert run.status == "finished"
    assert run.outputs()["report"] == {"finished": 2, "cancelled": 0}


def test_continue_policy_with_a_cancelled_child(engine: Engine) -> None:
    run = FulfilmentTolerant.start(parcels=[1, 2])
    # Run only the parent's step: the children are then queued, not run yet.
    runner.run_attempt(engine, run.steps()[-1]["id"])
    kids = children_of(engine, run.workflow_id)
    assert len(kids) == 2 and run.refresh().status == "waiting"
    engine_run(engine, kids[0]["workflow_id"]).cancel(actor="cli:ops", reason="not needed")
    work(engine)
    run.refresh()
    assert run.status == "finished"
    out = run.outputs()["ship_all"]
    assert (out["finished"], out["cancelled"]) == (1, 1) and out["outputs"] == [None, {"shipped": 2}]


def test_cancelling_the_parent_cancels_its_ongoing_children(engine: Engine) -> None:
    run = Fulfilment.start(parcels=[1, 2, 3], failing=[3])
    work(engine)
    assert sorted(k["status"] for k in children_of(engine, run.workflow_id)) == ["finished", "finished", "paused"]
    run.cancel(actor="cli:ops", reason="order withdrawn")
    statuses = sorted(k["status"] for k in children_of(engine, run.workflow_id))
    assert statuses == ["cancelled", "finished", "finished"]
    cancelled = next(k for k in children_of(engine, run.workflow_id) if k["status"] == "cancelled")
    event = engine_run(engine, cancelled["workflow_id"]).events()[-1]
    assert (event["event"], event["actor"]) == ("cancelled", "system")
    assert str(run.workflow_id) in event["reason"]
    assert run.refresh().status == "cancelled"


def test_the_sweep_cancels_children_a_dead_process_left_behind(engine: Engine) -> None:
    run = Fulfilment.start(parcels=[1, 2], failing=[1, 2])
    work(engine)
    # As if the process died after the parent's cancel committed: cancel it without the cascade.
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflows SET status = 'cancelled', updated_at = now() - interval '1 hour'"
                     " WHERE workflow_id = %s", (run.workflow_id,))
    assert {k["status"] for k in children_of(engine, run.workflow_id)} == {"paused"}
    report = sweep(engine)
    assert report.child_runs_cancelled == 2
    assert {k["status"] for k in children_of(engine, run.workflow_id)} == {"cancelled"}
    assert sweep(engine).child_runs_cancelled == 0


def test_the_sweep_settles_a_step_whose_children_all_ended(engine: Engine) -> None:
    # A parent step left waiting although its child ended (written by hand, as a lost wake-up).
    run2 = Fulfilment.start(parcels=[5])
    step = run2.steps()[-1]
    runner.run_attempt(engine, step["id"])  # split
    step = run2.steps()[-1]
    runner.run_attempt(engine, step["id"])  # ship_all: starts the child, waits
    kid = children_of(engine, run2.workflow_id)[0]
    with engine.db.connection() as conn:
        conn.execute("UPDATE pgbus_workflows SET status = 'finished', parent_workflow_id = NULL"
                     " WHERE workflow_id = %s", (kid["workflow_id"],))
        conn.execute("UPDATE pgbus_workflow_steps SET waiting_since = now() - interval '1 hour'"
                     " WHERE workflow_id = %s AND status = 'waiting'", (run2.workflow_id,))
    assert run2.refresh().status == "waiting"
    assert sweep(engine).child_waits_settled == 1
    work(engine)
    assert run2.refresh().status == "finished"


def test_a_redelivered_parent_step_never_starts_a_second_set(engine: Engine) -> None:
    run = Fulfilment.start(parcels=[1, 2])
    first = run.steps()[-1]
    runner.run_attempt(engine, first["id"])  # split
    ship = run.steps()[-1]
    runner.run_attempt(engine, ship["id"])
    runner.run_attempt(engine, ship["id"])  # a second delivery: a no-op
    runner.run_attempt(engine, ship["id"])
    assert len(children_of(engine, run.workflow_id)) == 2
    work(engine)
    assert run.refresh().status == "finished" and len(children_of(engine, run.workflow_id)) == 2


def test_rerun_starts_a_new_set_of_children(engine: Engine) -> None:
    run = Fulfilment.start(parcels=[1])
    work(engine)
    assert run.refresh().status == "finished"
    run.rerun(actor="cli:ops", reason="again")
    work(engine)
    assert run.refresh().status == "finished"
    assert len(children_of(engine, run.workflow_id)) == 2


def test_a_child_that_cannot_start_fails_the_step_and_starts_none(engine: Engine) -> None:
    blocker = Shipment.start(parcel=9, subject=("Parcel", "p-9"))
    run = OneChild.start(parcel_subject="p-9")
    runner.run_attempt(engine, run.steps()[-1]["id"])
    run.refresh()
    assert run.status == "paused"
    failed = run.steps()[-1]
    assert failed["error_class"] == "pgbus_flask.errors.SubjectConflict"
    assert children_of(engine, run.workflow_id) == []
    blocker.cancel(reason="make room")
    run.resume(reason="subject free")
    work(engine)
    assert run.refresh().status == "finished"
    assert run.outputs()["delegate"]["outputs"] == [{"shipped": 1}]


def test_a_list_mixing_children_and_values_is_refused(engine: Engine) -> None:
    run = Mixed.start()
    work(engine)
    run.refresh()
    assert run.status == "paused"
    assert "mixes start_child" in run.steps()[-1]["error_message"]
    assert children_of(engine, run.workflow_id) == []


def test_start_child_needs_a_workflow_class(engine: Engine) -> None:
    context = Fulfilment(engine=engine, workflow_id=None, args=(), kwargs={}, subject=None, attempt=1,
                         step_name="split")
    with pytest.raises(DefinitionError, match="start_child needs a workflow class"):
        context.start_child(dict)  # type: ignore[arg-type]
    with pytest.raises(Exception, match="start_child arguments"):
        context.start_child(Shipment, parcel=object())
