-- The reads of the dashboard, the CLI and operators (pgbus_flask/queries.py): counts, run ids
-- by prefix, batches. The reads whose text depends on their filters are in pgbus_flask/filters.py.

-- name: now
-- The database's clock: the transaction's start time.
SELECT now() AS now;

-- name: jit_off
-- JIT off for the rest of this transaction (a stuck read's plan costs more to compile than to run).
SET LOCAL jit = off;

-- name: status_counts
-- Runs by class and status, from the count rows (never from the runs).
SELECT workflow_class, status, sum(runs) AS runs FROM pgbus_run_counts GROUP BY 1, 2
HAVING sum(runs) <> 0;

-- name: oldest_overdue
-- Per class, the seconds since the oldest overdue step was due: a range of pgbus_workflows_attention_due (an overdue run's attention_since is its step's scheduled_at).
SELECT w.workflow_class, extract(epoch FROM COALESCE(%(now)s::timestamptz, now()) - min(w.attention_since)) AS seconds
FROM pgbus_workflows w
WHERE w.attention_reason = 'overdue'
  AND w.attention_since < COALESCE(%(now)s::timestamptz, now()) - %(stall)s::interval
GROUP BY 1;

-- name: runs_by_id_range
-- The runs whose ids lie in [low, high], at most a few: a range scan of the unique index on workflow_id.
SELECT workflow_id, workflow_class, status FROM pgbus_workflows
WHERE workflow_id BETWEEN %s AND %s ORDER BY workflow_id LIMIT %s;

-- name: run_id_span
-- The highest and lowest run row id (where a text search's window of runs starts).
SELECT max(id) AS newest, min(id) AS oldest FROM pgbus_workflows;

-- name: batch
-- A fan-out batch with its run's class and subject.
SELECT b.*, w.workflow_class, w.subject_type, w.subject_id FROM pgbus_batches b
JOIN pgbus_workflows w ON w.workflow_id = b.workflow_id WHERE b.id = %s;

-- name: batch_children
-- Every child of a batch, in position order.
SELECT * FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position;

-- name: batch_child
-- One child of a batch, whole.
SELECT * FROM pgbus_batch_children WHERE batch_id = %s AND position = %s;
