-- The reads of the dashboard, the CLI and operators (pgbus_flask/queries.py): counts, run ids
-- by prefix, batches. The reads whose text depends on their filters are in pgbus_flask/filters.py.

-- name: now
-- The database's clock: the transaction's start time.
SELECT now() AS now;

-- name: begin_now
-- Nothing: a statement that makes psycopg send the BEGIN it holds back (orm.py: a Session's transaction begins now).
SELECT 1 AS one;

-- name: jit_off
-- JIT off for the rest of this transaction (a stuck read's plan costs more to compile than to run).
SET LOCAL jit = off;

-- name: status_counts
-- Runs by class and status, from the count rows (never from the runs).
SELECT workflow_class, status, sum(runs) AS runs FROM pgbus_run_counts GROUP BY 1, 2
HAVING sum(runs) <> 0;

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

-- name: run_row
-- A run's row, with the database's now().
SELECT *, now() AS db_now FROM pgbus_workflows WHERE workflow_id = %s;

-- name: run_attempts
-- Every step attempt of a run, oldest first.
SELECT * FROM pgbus_workflow_steps WHERE workflow_id = %s ORDER BY id;

-- name: run_events
-- A run's audit trail, oldest first.
SELECT * FROM pgbus_workflow_events WHERE workflow_id = %s ORDER BY id;

-- name: run_attempt_count
-- How many step attempts a run has.
SELECT count(*) AS n FROM pgbus_workflow_steps WHERE workflow_id = %s;

-- name: run_pause_events
-- The events of a run that start or end a paused stretch, oldest first (states.PAUSE_EVENTS, as the partial index pgbus_workflow_events_pauses lists them).
SELECT event, created_at FROM pgbus_workflow_events WHERE workflow_id = %s
  AND event IN ('paused', 'resumed', 'cancelled', 'rerun', 'step_skipped', 'finished') ORDER BY id;

-- name: run_attempt_buckets
-- A run's attempts counted by step, stretch of time (%(last)s + 1 stretches of %(width)s from %(start)s, by when each attempt's row was made) and status.
SELECT step_name, bucket, status, count(*) AS attempts, min(created_at) AS first,
       max(COALESCE(finished_at, %(end)s)) AS last, min(id) AS lowest
FROM (SELECT id, step_name, status, created_at, finished_at,
             LEAST(GREATEST(floor(extract(epoch FROM created_at - %(start)s)
                                  / extract(epoch FROM %(width)s::interval))::int, 0),
                   %(last)s) AS bucket
      FROM pgbus_workflow_steps WHERE workflow_id = %(wid)s) a
GROUP BY step_name, bucket, status;

-- name: run_signals
-- Every signal of a run, oldest first.
SELECT * FROM pgbus_workflow_signals WHERE workflow_id = %s ORDER BY id;

-- name: run_signal
-- One signal of a run, whole.
SELECT * FROM pgbus_workflow_signals WHERE workflow_id = %s AND id = %s;

-- name: run_batches
-- Every fan-out batch of a run, oldest first.
SELECT * FROM pgbus_batches WHERE workflow_id = %s ORDER BY id;

-- name: run_batch
-- One fan-out batch of a run.
SELECT * FROM pgbus_batches WHERE workflow_id = %s AND id = %s;

-- name: run_ongoing_children
-- How many child runs of a run are ongoing (pgbus_workflows_parent).
SELECT count(*) AS n FROM pgbus_workflows WHERE parent_workflow_id = %s
  AND status IN ('ready', 'running', 'waiting', 'paused');

-- name: run_child_ids
-- The child run ids each step attempt of a run started, oldest attempt first.
SELECT child_ids FROM pgbus_workflow_steps WHERE workflow_id = %s AND child_ids IS NOT NULL ORDER BY id;

-- name: runs_as_children
-- What a run page shows of these child runs.
SELECT workflow_id, workflow_class, status, current_step, parent_step_name, created_at,
  finished_at, attention_reason FROM pgbus_workflows WHERE workflow_id = ANY(%s);
