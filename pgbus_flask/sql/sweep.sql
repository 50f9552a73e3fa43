-- The sweep (pgbus_flask/sweep.py): its lock, and the statement each part starts from. Each
-- part's statement is driven by a partial index (tests/db/test_sweep_plans.py checks the plans),
-- so its cost follows what it finds, not the size of the tables.

-- name: sweep_lock
-- One sweeper at a time on every machine: a transaction-level advisory lock, held until that transaction ends.
SELECT pg_try_advisory_xact_lock(%s) AS got;

-- name: sweep_serially
-- The planner cannot tell how many rows are past a deadline and, on a big table, starts parallel workers or JIT-compiles the plan (50-200 ms at a million runs) to find none: a sweep that usually finds nothing reads serially and without JIT, for this transaction. And with a plan made for this cutoff: after five runs psycopg's prepared statement would take PostgreSQL's generic plan, which, not knowing the cutoff, expects a share of the table past it (222,000 fan-out children at ten million runs) and sets up Memoize caches that size, 3.6 ms of executor start-up to read an empty range.
SELECT set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true),
       set_config('plan_cache_mode', 'force_custom_plan', true);

-- name: sweep_stalled
-- Attempts in progress past their stall deadline, the oldest first (pgbus_workflow_steps_in_progress).
SELECT id, workflow_id FROM pgbus_workflow_steps WHERE status = 'in_progress'
  AND stall_at < now() ORDER BY stall_at LIMIT %s;

-- name: sweep_overdue
-- One page of scheduled steps due longer than the threshold ago, after the cursor, in (scheduled_at, id) order (pgbus_workflow_steps_scheduled), each with whether it is overdue (its run looked up step by step): its run is ready and it was sent longer than the threshold ago (x 2^resends, at most 16x: a step Redis keeps losing is resent less and less often). The page is read before the run's status, so the steps of paused runs, which stay scheduled, cost a sweep at most a page however many there are.
WITH page AS (
    SELECT s.id, s.workflow_id, s.sends, s.job_id, s.scheduled_at, s.enqueued_at, s.resends
    FROM pgbus_workflow_steps s
    WHERE s.status = 'scheduled' AND s.scheduled_at < now() - make_interval(secs => %(threshold)s)
      AND (s.scheduled_at, s.id) > (%(after_at)s, %(after_id)s)
    ORDER BY s.scheduled_at, s.id LIMIT %(limit)s
)
SELECT p.id, p.sends, p.job_id, p.scheduled_at,
       (p.enqueued_at IS NULL
        OR p.enqueued_at < now() - make_interval(secs => %(threshold)s * power(2, least(p.resends, 4))))
       AND EXISTS (SELECT 1 FROM pgbus_workflows w WHERE w.workflow_id = p.workflow_id AND w.status = 'ready') AS due
FROM page p ORDER BY p.scheduled_at, p.id;

-- name: sweep_expired_waits
-- One page of waits for a signal past their deadline, after the cursor, in (timeout_at, id) order (pgbus_workflow_steps_wait_deadline), each with whether it is due: its run still waits (a run paused while it waited keeps its waiting step, and is skipped). As sweep_overdue, the page is read before the runs, so such runs cost a sweep at most a page however many there are.
WITH page AS (
    SELECT s.id, s.workflow_id, s.timeout_at FROM pgbus_workflow_steps s
    WHERE s.status = 'waiting' AND s.timeout_at IS NOT NULL AND s.timeout_at < now()
      AND (s.timeout_at, s.id) > (%(after_at)s, %(after_id)s)
    ORDER BY s.timeout_at, s.id LIMIT %(limit)s
)
SELECT p.id, p.workflow_id, p.timeout_at,
       EXISTS (SELECT 1 FROM pgbus_workflows w WHERE w.workflow_id = p.workflow_id AND w.status = 'waiting') AS due
FROM page p ORDER BY p.timeout_at, p.id;

-- name: sweep_lost_children
-- Pending children of open batches whose step still waits, never sent or sent before the cutoff: two ranges of pgbus_batch_children_awaited_enqueued (NULL, then the oldest first), each joined child by child, so that LIMIT stops it and a sweep with nothing due reads no child.
(SELECT c.batch_id, c.position, c.job_id, b.queue FROM pgbus_batch_children c
   JOIN pgbus_batches b ON b.id = c.batch_id AND b.status = 'open'
   JOIN pgbus_workflow_steps s ON s.id = b.step_id AND s.status = 'waiting'
 WHERE c.status = 'pending' AND c.awaited AND c.enqueued_at IS NULL
 LIMIT %(limit)s)
UNION ALL
(SELECT c.batch_id, c.position, c.job_id, b.queue FROM pgbus_batch_children c
   JOIN pgbus_batches b ON b.id = c.batch_id AND b.status = 'open'
   JOIN pgbus_workflow_steps s ON s.id = b.step_id AND s.status = 'waiting'
 WHERE c.status = 'pending' AND c.awaited AND c.enqueued_at < now() - make_interval(secs => %(threshold)s)
 ORDER BY c.enqueued_at LIMIT %(limit)s)
LIMIT %(limit)s;

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

-- name: sweep_flow
-- Flow control's safety net in one statement (pgbus_workflow_steps_blocked): the lines of concurrency limits (limit, key) with a waiting run and a free slot (a capacity raised since, or a waiter a grant skipped while another transaction held its run); the rates with waiting runs whose wake-up is missing or late by %(late)s seconds (its job lost with Redis, or never sent); and, deleted on the way, the slot rows of at most %(limit)s keys that hold none and have no run in line (a claim makes them again; a slot taken meanwhile is left: the recheck of holder IS NULL).
WITH idle AS (
    DELETE FROM pgbus_limit_slots t USING (
        SELECT limit_name, limit_key FROM pgbus_limit_slots GROUP BY limit_name, limit_key
        HAVING bool_and(holder_run IS NULL AND holder_step IS NULL) LIMIT %(limit)s
    ) k
    WHERE t.limit_name = k.limit_name AND t.limit_key = k.limit_key
      AND t.holder_run IS NULL AND t.holder_step IS NULL
      AND NOT EXISTS (SELECT 1 FROM pgbus_workflow_steps s WHERE s.blocked_on = t.limit_name
                        AND s.blocked_key = t.limit_key AND s.status = 'scheduled')
)
SELECT 'line' AS kind, l.blocked_on AS name, l.blocked_key AS key FROM (
    SELECT DISTINCT s.blocked_on, s.blocked_key FROM pgbus_workflow_steps s
    JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id AND w.status = 'waiting'
    WHERE s.blocked_on IS NOT NULL AND s.blocked_key IS NOT NULL AND s.status = 'scheduled'
) l
JOIN pgbus_limits m ON m.name = l.blocked_on AND m.kind <> 'rate'
WHERE (SELECT count(*) FROM pgbus_limit_slots t WHERE t.limit_name = l.blocked_on AND t.limit_key = l.blocked_key
         AND t.slot <= m.capacity AND (t.holder_run IS NOT NULL OR t.holder_step IS NOT NULL)) < m.capacity
UNION ALL
SELECT 'rate', m.name, NULL FROM pgbus_limits m
WHERE m.kind = 'rate' AND (m.wake_at IS NULL OR m.wake_at < now() - make_interval(secs => %(late)s))
  AND EXISTS (SELECT 1 FROM pgbus_workflow_steps s WHERE s.blocked_on = m.name AND s.blocked_key IS NULL
                AND s.status = 'scheduled')
LIMIT %(limit)s;
