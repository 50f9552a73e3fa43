-- The sweep (pgbus_flask/sweep.py): its lock, and the statement each part starts from. Each
-- part's statement is driven by a partial index (tests/db/test_sweep_plans.py checks the plans),
-- so its cost follows what it finds, not the size of the tables.

-- name: sweep_lock
-- One sweeper at a time on every machine: a transaction-level advisory lock, held until that transaction ends.
SELECT pg_try_advisory_xact_lock(%s) AS got;

-- name: sweep_serially
-- The planner cannot tell how many rows are past a deadline and, on a big table, starts parallel workers to find none: a sweep that usually finds nothing reads serially.
SET LOCAL max_parallel_workers_per_gather = 0;

-- name: sweep_stalled
-- Attempts in progress past their stall deadline, the oldest first (pgbus_workflow_steps_in_progress).
SELECT id, workflow_id FROM pgbus_workflow_steps WHERE status = 'in_progress'
  AND stall_at < now() ORDER BY stall_at LIMIT %s;

-- name: sweep_overdue
-- Steps of ready runs due and sent longer than the threshold ago (x 2^resends, at most 16x: a step Redis keeps losing is resent less and less often), after the cursor (pgbus_workflow_steps_scheduled).
SELECT s.id, s.sends, s.job_id, s.scheduled_at FROM pgbus_workflow_steps s
  JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id AND w.status = 'ready'
WHERE s.status = 'scheduled' AND s.scheduled_at < now() - make_interval(secs => %s)
  AND (s.enqueued_at IS NULL
       OR s.enqueued_at < now() - make_interval(secs => %s * power(2, least(s.resends, 4))))
  AND (s.scheduled_at, s.id) > (%s, %s)
ORDER BY s.scheduled_at, s.id LIMIT %s;

-- name: sweep_expired_waits
-- Waits for a signal past their deadline, the oldest first (pgbus_workflow_steps_wait_deadline).
SELECT s.id, s.workflow_id FROM pgbus_workflow_steps s
  JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id AND w.status = 'waiting'
WHERE s.status = 'waiting' AND s.timeout_at IS NOT NULL AND s.timeout_at < now()
ORDER BY s.timeout_at LIMIT %s;

-- name: sweep_lost_children
-- Pending children of open batches whose step still waits, sent before the cutoff or never sent (pgbus_batch_children_pending_enqueued).
SELECT c.batch_id, c.position, c.job_id, b.queue FROM pgbus_batch_children c
  JOIN pgbus_batches b ON b.id = c.batch_id AND b.status = 'open'
  JOIN pgbus_workflow_steps s ON s.id = b.step_id AND s.status = 'waiting'
WHERE c.status = 'pending'
  AND (c.enqueued_at IS NULL OR c.enqueued_at < now() - make_interval(secs => %s))
ORDER BY c.batch_id, c.position LIMIT %s;

-- name: sweep_retention_finished
-- Delete a batch of finished runs older than PGBUS_RETENTION_FINISHED, the oldest first (pgbus_workflows_finished_updated); their rows go with them.
DELETE FROM pgbus_workflows WHERE id IN (SELECT id FROM pgbus_workflows
  WHERE status = 'finished' AND updated_at < now() - make_interval(secs => %s)
  ORDER BY updated_at LIMIT %s);

-- name: sweep_retention_cancelled
-- Delete a batch of cancelled runs older than PGBUS_RETENTION_CANCELLED, the oldest first (pgbus_workflows_cancelled_updated); their rows go with them.
DELETE FROM pgbus_workflows WHERE id IN (SELECT id FROM pgbus_workflows
  WHERE status = 'cancelled' AND updated_at < now() - make_interval(secs => %s)
  ORDER BY updated_at LIMIT %s);
