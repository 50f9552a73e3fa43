-- The reads of the dashboard, the CLI and operators (pgbus_flask/queries.py): counts, run ids
-- by prefix, batches, the limits and rates of flow control. The reads whose text depends on their
-- filters are in pgbus_flask/filters.py.

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

-- name: limit_lines
-- The limits and rates waiting steps are in line for (%(names)s with %(keys)s; a NULL key names a rate): each one's declaration and wake-up, and for a limit's key its slots held and its steps in line (pgbus_workflow_steps_blocked).
SELECT q.name, q.key, l.kind, l.capacity, l.per_seconds, l.wake_at,
       (SELECT count(*) FROM pgbus_limit_slots s WHERE s.limit_name = q.name AND s.limit_key = q.key
          AND (s.holder_run IS NOT NULL OR s.holder_step IS NOT NULL)) AS running,
       (SELECT count(*) FROM pgbus_workflow_steps b WHERE b.blocked_on = q.name AND b.blocked_key = q.key
          AND b.status = 'scheduled') AS waiting
FROM unnest(%(names)s::text[], %(keys)s::text[]) AS q(name, key)
LEFT JOIN LATERAL (SELECT m.kind, m.capacity, m.per_seconds, m.wake_at FROM pgbus_limits m
                   WHERE m.name = q.name AND (m.kind = 'rate') = (q.key IS NULL)
                   ORDER BY m.kind LIMIT 1) l ON TRUE;

-- name: limits
-- Every limit and rate as last declared (at most %(limit)s), with its keys, slots in use (a rate: the starts of its window now), steps in line and busiest keys (the %(top)s with the most in use and waiting), each read through index ranges of its name.
SELECT l.name, l.kind, l.capacity, l.per_seconds, l.wake_at, l.updated_at, slots.keys,
       CASE WHEN l.kind = 'rate' THEN
           (SELECT count(*) FROM unnest(l.starts) t WHERE t > now() - make_interval(secs => l.per_seconds))
       ELSE slots.in_use END AS in_use,
       CASE WHEN l.kind = 'rate' THEN
           (SELECT count(*) FROM pgbus_workflow_steps b WHERE b.blocked_on = l.name AND b.blocked_key IS NULL
              AND b.status = 'scheduled')
       ELSE
           (SELECT count(*) FROM pgbus_workflow_steps b WHERE b.blocked_on = l.name AND b.blocked_key IS NOT NULL
              AND b.status = 'scheduled') END AS waiting,
       CASE WHEN l.kind <> 'rate' AND %(top)s > 0 THEN (
           SELECT COALESCE(jsonb_agg(jsonb_build_object('key', k.key, 'in_use', k.in_use, 'waiting', k.waiting)
                                     ORDER BY k.in_use + k.waiting DESC, k.key), '[]'::jsonb)
           FROM (SELECT u.key, sum(u.in_use)::integer AS in_use, sum(u.waiting)::integer AS waiting
                 FROM (SELECT s.limit_key AS key, count(*) AS in_use, 0 AS waiting FROM pgbus_limit_slots s
                        WHERE s.limit_name = l.name AND (s.holder_run IS NOT NULL OR s.holder_step IS NOT NULL)
                        GROUP BY s.limit_key
                       UNION ALL
                       SELECT b.blocked_key, 0, count(*) FROM pgbus_workflow_steps b
                        WHERE b.blocked_on = l.name AND b.blocked_key IS NOT NULL AND b.status = 'scheduled'
                        GROUP BY b.blocked_key) u
                 GROUP BY u.key ORDER BY sum(u.in_use) + sum(u.waiting) DESC, u.key LIMIT %(top)s) k)
       END AS busiest
FROM pgbus_limits l
LEFT JOIN LATERAL (SELECT count(DISTINCT s.limit_key) AS keys,
                          count(*) FILTER (WHERE s.holder_run IS NOT NULL OR s.holder_step IS NOT NULL) AS in_use
                   FROM pgbus_limit_slots s WHERE s.limit_name = l.name AND l.kind <> 'rate') slots ON l.kind <> 'rate'
ORDER BY l.name, l.kind LIMIT %(limit)s;

-- name: limits_card
-- How many limits and rates are declared, and how many steps wait in line for them (pgbus_workflow_steps_blocked, a range of each): the overview's card.
SELECT count(*) AS limits,
       COALESCE(sum(CASE WHEN l.kind = 'rate' THEN
                    (SELECT count(*) FROM pgbus_workflow_steps b WHERE b.blocked_on = l.name
                       AND b.blocked_key IS NULL AND b.status = 'scheduled')
                ELSE
                    (SELECT count(*) FROM pgbus_workflow_steps b WHERE b.blocked_on = l.name
                       AND b.blocked_key IS NOT NULL AND b.status = 'scheduled') END), 0) AS waiting
FROM pgbus_limits l;
