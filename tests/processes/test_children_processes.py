"""Child workflows through real worker processes: children ending at once in two processes, every
job delivered three times, and each parent step still settles exactly once."""

from __future__ import annotations

from pathlib import Path

from pgbus_flask.engine import Engine
from tests.child_workflows import Fulfilment
from tests.support import procs
from tests.support.procs import rows, scalar, wait_finished


def test_children_ending_in_two_processes_settle_their_parent_once(engine: Engine, pg_url: str, redis_url: str,
                                                                   tmp_path: Path) -> None:
    engine.deliveries = 3  # the first steps, sent from here
    args = ("--no-sweep", "--no-scheduler", "--worker-class", "tests.proc_workflows.TripleDeliveryWorker")
    with procs.workers(pg_url, redis_url, tmp_path, 2, args=args) as ws:
        for _ in range(10):
            Fulfilment.start(parcels=list(range(8)))
        wait_finished(engine, 10 + 10 * 8, ws, timeout=90)
    # Every parent: 8 children, one children_finished, one completed ship_all, and the invoice saw 8 outputs.
    per_parent = rows(engine, """
        SELECT p.workflow_id,
               (SELECT count(*) FROM pgbus_workflows c WHERE c.parent_workflow_id = p.workflow_id) AS children,
               (SELECT count(*) FROM pgbus_workflow_events e WHERE e.workflow_id = p.workflow_id
                 AND e.event = 'children_finished') AS settled,
               (SELECT count(*) FROM pgbus_workflow_steps s WHERE s.workflow_id = p.workflow_id
                 AND s.step_name = 'ship_all' AND s.status = 'completed') AS completed,
               (SELECT jsonb_array_length(s.output->'shipped') FROM pgbus_workflow_steps s
                 WHERE s.workflow_id = p.workflow_id AND s.step_name = 'invoice') AS invoiced
        FROM pgbus_workflows p WHERE p.workflow_class = 'Fulfilment'""")
    assert len(per_parent) == 10
    assert {(r["children"], r["settled"], r["completed"], r["invoiced"]) for r in per_parent} == {(8, 1, 1, 8)}
    # No step ran twice although every job was delivered three times.
    assert scalar(engine, "SELECT count(*) FROM pgbus_workflow_steps WHERE status <> 'completed'") == 0
    assert scalar(engine, "SELECT count(*) FROM pgbus_workflow_steps") == 10 * 3 + 80 * 2
