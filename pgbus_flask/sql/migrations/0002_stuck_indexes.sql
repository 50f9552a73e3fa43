-- 0002: indexes for the stuck-run reads of the dashboard and for the sweep's lost fan-out children.

-- waiting_overdue: waiting steps with no deadline and no batch, by how long they have waited
-- (queries._stuck_sql starts its waiting branch here instead of visiting every waiting run).
CREATE INDEX pgbus_workflow_steps_waiting_no_deadline
    ON pgbus_workflow_steps (waiting_since) WHERE status = 'waiting' AND timeout_at IS NULL AND batch_id IS NULL;

-- sweep._lost_children: pending children sent before the stall cutoff (or never sent), instead of
-- scanning every child row.
CREATE INDEX pgbus_batch_children_pending_enqueued
    ON pgbus_batch_children (enqueued_at) WHERE status = 'pending';
