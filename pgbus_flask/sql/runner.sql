-- The runner's statements (pgbus_flask/runner/): the transitions of runs, steps, signals,
-- batches and child runs. The statements whose text depends on the arguments (the row moves'
-- columns, the audit events written together) are composed in pgbus_flask/filters.py.

-- name: fan_out_child
-- A fan-out child's arguments and status, its batch's function, and its step's status.
SELECT c.args, c.status, b.func, s.status AS step_status FROM pgbus_batch_children c
JOIN pgbus_batches b ON b.id = c.batch_id JOIN pgbus_workflow_steps s ON s.id = b.step_id
WHERE c.batch_id = %s AND c.position = %s;

-- name: lock_run
-- A run's row locked until the transaction ends, with the transaction's now() and the status of step attempt %s (if any).
SELECT w.*, now() AS tx_now, (SELECT status FROM pgbus_workflow_steps WHERE id = %s) AS attempt_status
FROM pgbus_workflows w WHERE w.workflow_id = %s FOR UPDATE;

-- name: latest_step
-- A run's latest step attempt.
SELECT * FROM pgbus_workflow_steps WHERE workflow_id = %s ORDER BY id DESC LIMIT 1;

-- name: completed_outputs
-- The outputs of a run's completed attempts, oldest first (the latest of each step wins).
SELECT step_name, output FROM pgbus_workflow_steps WHERE workflow_id = %s AND status = 'completed'
ORDER BY attempt, id;

-- name: consume_signal_of_step
-- The signal held by a step's attempts (if any) is consumed: the step has ended.
UPDATE pgbus_workflow_signals SET status = 'consumed', consumed_at = now()
WHERE status = 'claimed' AND claimed_by_step_id IN
  (SELECT id FROM pgbus_workflow_steps WHERE workflow_id = %s AND step_name = %s);

-- name: cancel_open_steps
-- Cancel a run's open step attempts (%s: the open step statuses).
UPDATE pgbus_workflow_steps SET status = 'cancelled', outcome = 'cancelled', finished_at = now()
WHERE workflow_id = %s AND status = ANY(%s);

-- name: close_open_batches
-- Close a run's open fan-out batch: its remaining children will not run, and nothing awaits them (the sweep's lost children no longer read them: pgbus_batch_children_awaited_enqueued).
WITH closed AS (
    UPDATE pgbus_batches SET status = 'finished', finished_at = now()
    WHERE workflow_id = %s AND status = 'open' RETURNING id
)
UPDATE pgbus_batch_children SET awaited = false
WHERE batch_id IN (SELECT id FROM closed) AND status = 'pending';

-- name: schedule_step
-- A new scheduled attempt of a step, its id drawn first so that its first job id is written with it, due after %(delay)s seconds or at %(at)s when later.
INSERT INTO pgbus_workflow_steps (id, workflow_id, workflow_class, step_name, attempt, status,
                                  scheduled_at, enqueued_at, job_id, wait_until_pending)
SELECT n.id, %(wid)s, %(cls)s, %(step)s, a.attempt, 'scheduled',
       GREATEST(now() + make_interval(secs => %(delay)s), %(at)s::timestamptz), now(), %(prefix)s || n.id,
       %(pending)s
FROM (SELECT nextval('pgbus_workflow_steps_id_seq') AS id) n,
     (SELECT COALESCE(MAX(attempt), 0) + 1 AS attempt FROM pgbus_workflow_steps
      WHERE workflow_id = %(wid)s AND step_name = %(step)s) a
RETURNING *;

-- name: set_current_step
-- Set a run's current step.
UPDATE pgbus_workflows SET current_step = %s, updated_at = now() WHERE workflow_id = %s;

-- name: resend_step
-- Send a scheduled step again with its next job id (due at %s if given), unless it was claimed or sent again meanwhile.
UPDATE pgbus_workflow_steps SET enqueued_at = now(), sends = %s, job_id = %s,
  scheduled_at = COALESCE(%s, scheduled_at), wait_until_pending = wait_until_pending AND %s
WHERE id = %s AND status = 'scheduled' AND sends = %s RETURNING *;

-- name: resend_lost
-- Send again the steps whose jobs Redis lost, as the sweep read them, unless claimed, sent again or their run stopped being ready since.
UPDATE pgbus_workflow_steps s
SET sends = s.sends + 1, resends = s.resends + 1, enqueued_at = now(), job_id = seen.next_job_id
FROM unnest(%(ids)s::bigint[], %(sends)s::integer[], %(jobs)s::text[], %(next)s::text[])
         AS seen (id, sends, job_id, next_job_id),
     pgbus_workflows w
WHERE s.id = seen.id AND s.sends = seen.sends AND s.status = 'scheduled'
  AND w.workflow_id = s.workflow_id AND w.status = 'ready'
RETURNING s.*, seen.job_id AS replaces, w.priority AS run_priority;

-- name: earlier_outcomes
-- The outcomes of a step's earlier attempts, the latest first (how many reattempts in a row).
SELECT outcome FROM pgbus_workflow_steps WHERE workflow_id = %s AND step_name = %s AND id <> %s
  AND outcome IS NOT NULL ORDER BY attempt DESC;

-- name: start_run
-- Start a run: its row, its first step (scheduled, due now or after %(wait)s seconds, its id drawn first) and the started and step_scheduled events, in one statement (an idempotency key already used writes nothing); the run's attention columns are those of a ready run.
WITH ids AS (
    SELECT nextval('pgbus_workflow_steps_id_seq') AS step_id, now() + make_interval(secs => %(wait)s) AS due
), run AS (
    INSERT INTO pgbus_workflows (workflow_id, workflow_class, status, current_step, subject_type, subject_id,
                                 idempotency_key, definition_digest, arguments, started_by,
                                 attention_reason, attention_since, attention_step_id, parent_workflow_id,
                                 parent_step_name, priority, limit_name, limit_key, traceparent)
    SELECT %(wid)s, %(cls)s, 'ready', %(step)s, %(stype)s, %(sid)s, %(key)s, %(digest)s, %(args)s, %(actor)s,
           'overdue', due, step_id, %(parent)s, %(parent_step)s, %(priority)s, %(limit)s, %(limit_key)s,
           %(traceparent)s
    FROM ids
    ON CONFLICT (workflow_class, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING *
), first AS (
    -- its id drawn first (ids): the run's attention_step_id, and its first job id (scheduling.step_job_id)
    INSERT INTO pgbus_workflow_steps (id, workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                      enqueued_at, job_id, wait_until_pending)
    SELECT attention_step_id, workflow_id, workflow_class, current_step, 1, 'scheduled', attention_since, now(),
           %(prefix)s || attention_step_id, %(pending)s
    FROM run
    RETURNING id, step_name, attempt, scheduled_at
), audit AS (
    INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details)
    SELECT %(wid)s, e.event, %(actor)s, e.id, e.step_name, e.attempt, e.details
    FROM (SELECT 1 AS n, 'started' AS event, NULL::bigint AS id, NULL::text AS step_name, NULL::integer AS attempt,
                 %(started)s::jsonb AS details FROM run
          UNION ALL SELECT 2, 'step_scheduled', id, step_name, attempt,
                           -- a later first step: when, as pgbus_flask.payload stores a datetime
                           CASE WHEN scheduled_at > now() THEN jsonb_build_object('scheduled_at', jsonb_build_object(
                               '__pgbus__', 'datetime', 'v', to_char(scheduled_at AT TIME ZONE 'UTC',
                                                                     'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')))
                           ELSE %(nothing)s END FROM first) AS e
    ORDER BY e.n
)
SELECT run.*, now() AS db_now FROM run;

-- name: run_steps
-- A run's step attempts (just started: its first one).
SELECT * FROM pgbus_workflow_steps WHERE workflow_id = %s;

-- name: ongoing_run_of_subject
-- The ongoing run of a class on a subject (%s: the ongoing statuses), the one a new start conflicts with.
SELECT workflow_id FROM pgbus_workflows WHERE workflow_class = %s AND subject_type = %s
  AND subject_id = %s AND status = ANY(%s);

-- name: run_of_idempotency_key
-- The run of a class started with an idempotency key.
SELECT workflow_id FROM pgbus_workflows WHERE workflow_class = %s AND idempotency_key = %s;

-- name: open_batch
-- Open a fan-out batch of %s children for a step.
INSERT INTO pgbus_batches (workflow_id, step_id, step_name, func, queue, on_child_failure, status, total)
VALUES (%s, %s, %s, %s, %s, %s, 'open', %s) RETURNING *;

-- name: add_batch_child
-- Add a pending child to a batch (run with many rows at once).
INSERT INTO pgbus_batch_children (batch_id, position, args, status, job_id, enqueued_at)
VALUES (%s, %s, %s, 'pending', %s, now());

-- name: run_of_batch
-- The run a batch belongs to.
SELECT workflow_id FROM pgbus_batches WHERE id = %s;

-- name: record_batch_child
-- Record a pending child's result or error once (nothing when it was recorded already).
UPDATE pgbus_batch_children SET status = %s, finished_at = now(), result = %s, error_class = %s,
  error_message = %s, error_code = %s, error_params = %s
WHERE batch_id = %s AND position = %s AND status = 'pending' RETURNING position;

-- name: count_batch_child
-- Count a child as done or failed in its batch.
UPDATE pgbus_batches SET done = done + %s, failed = failed + %s WHERE id = %s RETURNING *;

-- name: finish_batch
-- Close an open batch (nothing when it was closed already).
UPDATE pgbus_batches SET status = 'finished', finished_at = now() WHERE id = %s
  AND status = 'open' RETURNING *;

-- name: step_by_id
-- One step attempt.
SELECT * FROM pgbus_workflow_steps WHERE id = %s;

-- name: first_failed_child
-- A batch's first failed child (its position and error).
SELECT position, error_class, error_message FROM pgbus_batch_children WHERE batch_id = %s
  AND status = 'failed' ORDER BY position LIMIT 1;

-- name: batch_results
-- A batch's children's results, in position order.
SELECT result FROM pgbus_batch_children WHERE batch_id = %s ORDER BY position;

-- name: child_generation
-- How many times a run was rerun or resumed at a step (each starts a new generation of child runs, with keys of their own).
SELECT count(*) AS generation FROM pgbus_workflow_events WHERE workflow_id = %s
  AND (event = 'rerun' OR (event = 'resumed' AND details->>'plan' = 'resume_at'));

-- name: runs_of_keys
-- The runs of these classes with these idempotency keys (the children a retried step started before), read without waiting.
SELECT workflow_class, idempotency_key, workflow_id FROM pgbus_workflows
WHERE workflow_class = ANY(%s) AND idempotency_key = ANY(%s) AND idempotency_key IS NOT NULL;

-- name: child_runs
-- The class and status of these runs.
SELECT workflow_id, workflow_class, status FROM pgbus_workflows WHERE workflow_id = ANY(%s);

-- name: child_outputs
-- The output of each of these runs' latest completed attempt.
SELECT DISTINCT ON (workflow_id) workflow_id, output FROM pgbus_workflow_steps
WHERE workflow_id = ANY(%s) AND status = 'completed' ORDER BY workflow_id, id DESC;

-- name: step_waiting_on_child
-- A parent's step waiting on the child run %s (its latest).
SELECT * FROM pgbus_workflow_steps WHERE workflow_id = %s AND status = 'waiting'
  AND %s = ANY(child_ids) ORDER BY id DESC LIMIT 1;

-- name: ongoing_children
-- The ongoing child runs of a run (%s: the ongoing statuses).
SELECT workflow_id FROM pgbus_workflows WHERE parent_workflow_id = %s AND status = ANY(%s);

-- name: orphaned_parents
-- Cancelled runs, cancelled more than %s seconds ago, that still have ongoing children (at most %s).
SELECT DISTINCT c.parent_workflow_id FROM pgbus_workflows c
JOIN pgbus_workflows p ON p.workflow_id = c.parent_workflow_id
WHERE c.parent_workflow_id IS NOT NULL AND c.status IN ('ready', 'running', 'waiting', 'paused')
  AND p.status = 'cancelled' AND p.updated_at < now() - make_interval(secs => %s) LIMIT %s;

-- name: unsettled_child_waits
-- Steps waiting on child runs for more than %s seconds whose children have all ended (at most %s).
SELECT s.workflow_id, s.id FROM pgbus_workflow_steps s
WHERE s.status = 'waiting' AND s.child_ids IS NOT NULL
  AND s.waiting_since < now() - make_interval(secs => %s)
  AND NOT EXISTS (SELECT 1 FROM pgbus_workflows c WHERE c.workflow_id = ANY(s.child_ids)
                  AND c.status IN ('ready', 'running', 'waiting', 'paused')) LIMIT %s;

-- name: continue_inline
-- Lock the run, complete the attempt, claim the next step, move the run's current step and write the three audit events, in one statement that takes the run's lock before touching a step row (so it may be its transaction's first); each part guarded: if the attempt is no longer in progress or the run no longer running, nothing is written and no row returns.
WITH run AS (
    SELECT 1 FROM pgbus_workflows WHERE workflow_id = %(wid)s AND status = 'running' FOR UPDATE
), done AS (
    UPDATE pgbus_workflow_steps SET status = 'completed', finished_at = now(), outcome = 'completed',
        output = %(output)s
    WHERE id = %(done)s AND status = 'in_progress' AND EXISTS (SELECT 1 FROM run)
    RETURNING id, step_name, attempt
), next AS (
    INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status, scheduled_at,
                                      enqueued_at, started_at, stall_at, job_id, worker, app_revision)
    SELECT %(wid)s, %(cls)s, %(step)s,
           COALESCE((SELECT max(attempt) FROM pgbus_workflow_steps
                     WHERE workflow_id = %(wid)s AND step_name = %(step)s), 0) + 1,
           'in_progress', now(), now(), now(), now() + make_interval(secs => %(timeout)s),
           %(job)s, %(worker)s, %(rev)s
    FROM done
    RETURNING *
), moved AS (
    UPDATE pgbus_workflows SET current_step = %(step)s, updated_at = now()
    WHERE workflow_id = %(wid)s AND EXISTS (SELECT 1 FROM next)
), audit AS (
    INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details)
    SELECT %(wid)s, e.event, 'system', e.id, e.step_name, e.attempt, e.details
    FROM (SELECT 1 AS n, 'step_completed' AS event, id, step_name, attempt, %(nothing)s::jsonb AS details FROM done
          UNION ALL SELECT 2, 'step_scheduled', id, step_name, attempt, %(nothing)s::jsonb FROM next
          UNION ALL SELECT 3, 'step_started', id, step_name, attempt, %(started)s::jsonb FROM next) AS e
    ORDER BY e.n
)
SELECT * FROM next;

-- name: pending_signals_up_to
-- How many signals of a run are pending, counted up to %s only (an index-only range of pgbus_workflow_signals_pending).
SELECT count(*) AS n FROM (SELECT 1 FROM pgbus_workflow_signals WHERE workflow_id = %s
  AND status = 'pending' LIMIT %s) p;

-- name: store_signal
-- Store a pending signal for a run (nothing when one is stored under its idempotency key already).
INSERT INTO pgbus_workflow_signals (workflow_id, name, payload, idempotency_key, status, sent_by)
VALUES (%s, %s, %s, %s, 'pending', %s)
ON CONFLICT (workflow_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING RETURNING *;

-- name: signal_of_key
-- The signal stored for a run under an idempotency key.
SELECT * FROM pgbus_workflow_signals WHERE workflow_id = %s AND idempotency_key = %s;

-- name: extend_wait_by_pause
-- Move a waiting step's deadline by the time its run spent paused (since %s).
UPDATE pgbus_workflow_steps SET timeout_at = timeout_at + (now() - %s) WHERE id = %s
  AND status = 'waiting' AND timeout_at IS NOT NULL;

-- name: adopt_definition
-- Record that a run now follows its class's current definition.
UPDATE pgbus_workflows SET definition_digest = %s, updated_at = now() WHERE workflow_id = %s;

-- name: skip_next_step
-- Record a step skipped before it ran: a new attempt, skipped.
INSERT INTO pgbus_workflow_steps (workflow_id, workflow_class, step_name, attempt, status,
    scheduled_at, finished_at, outcome)
SELECT %(wid)s, %(cls)s, %(step)s, COALESCE(MAX(attempt), 0) + 1, 'skipped', now(), now(), 'skipped'
FROM pgbus_workflow_steps WHERE workflow_id = %(wid)s AND step_name = %(step)s RETURNING *;

-- name: held_signal
-- The signal an earlier attempt of this step holds (claimed), if any.
SELECT * FROM pgbus_workflow_signals WHERE workflow_id = %s AND status = 'claimed' AND claimed_by_step_id IN
  (SELECT id FROM pgbus_workflow_steps WHERE workflow_id = %s AND step_name = %s) ORDER BY id LIMIT 1;

-- name: claim_signal
-- Claim the oldest pending signal of this name for a step attempt (none when there is none).
UPDATE pgbus_workflow_signals SET status = 'claimed', claimed_by_step_id = %(step)s, claimed_at = now()
WHERE id = (SELECT id FROM pgbus_workflow_signals WHERE workflow_id = %(wid)s AND name = %(name)s
            AND status = 'pending' ORDER BY id LIMIT 1)
  AND status = 'pending'
RETURNING *;

-- name: lock_run_of_step
-- The run of step attempt %s locked, with the step's name and attempt, the transaction's now(), whether its wait_until is still to be evaluated now, whether it is due, and its place in a flow-control line (one round trip).
SELECT w.*, s.step_name AS claim_step, s.attempt AS claim_attempt, now() AS tx_now,
  s.wait_until_pending AND s.status = 'scheduled' AND s.scheduled_at <= now() + interval '1 second'
  AS claim_pending, s.status = 'scheduled' AND s.scheduled_at <= now() + interval '1 second' AS claim_due,
  s.blocked_on AS claim_blocked_on, s.blocked_since AS claim_blocked_since FROM pgbus_workflows w
JOIN pgbus_workflow_steps s ON s.workflow_id = w.workflow_id AND s.id = %s FOR UPDATE OF w;

-- name: claim_attempt
-- Claim a scheduled step attempt that is due and mark its run running (when %(runnable)s), in one statement; %(started)s: its rate's start (else now()).
WITH claimed AS (
    UPDATE pgbus_workflow_steps SET status = 'in_progress', started_at = COALESCE(%(started)s, now()),
        stall_at = COALESCE(%(started)s, now()) + make_interval(secs => %(timeout)s), job_id = COALESCE(%(job)s, job_id),
        worker = %(worker)s, app_revision = %(rev)s, wait_until_pending = false
    WHERE id = %(id)s AND status = 'scheduled' AND scheduled_at <= now() + interval '1 second'
    RETURNING *
), running AS (
    UPDATE pgbus_workflows SET status = 'running', updated_at = now(), attention_reason = NULL,
        attention_since = NULL, attention_step_id = NULL, attention_error_class = NULL
    WHERE workflow_id = %(wid)s AND status = 'ready' AND %(runnable)s AND EXISTS (SELECT 1 FROM claimed)
)
SELECT * FROM claimed;

-- name: park_on_signal
-- An attempt in progress starts waiting for a signal, until now() plus %s seconds (kept from an earlier wait of it).
UPDATE pgbus_workflow_steps SET status = 'waiting', waiting_since = COALESCE(waiting_since, now()),
  timeout_at = COALESCE(timeout_at, now() + make_interval(secs => %s)) WHERE id = %s
  AND status = 'in_progress' RETURNING *;

-- name: postpone_to_wait_until
-- A scheduled step whose wait_until is later than now is due then instead (its wait_until evaluated).
UPDATE pgbus_workflow_steps SET scheduled_at = %s, wait_until_pending = false
WHERE id = %s AND status = 'scheduled' AND wait_until_pending AND scheduled_at < %s
  AND %s > now() RETURNING *;

-- name: stalled_attempt
-- A step attempt still in progress past its stall deadline (the sweep saw it; checked again under the run's lock).
SELECT * FROM pgbus_workflow_steps WHERE id = %s AND status = 'in_progress' AND stall_at < now();

-- name: expired_wait
-- A waiting step whose wait deadline passed (the sweep saw it; checked again under the run's lock).
SELECT * FROM pgbus_workflow_steps WHERE id = %s AND status = 'waiting' AND timeout_at < now();

-- name: resend_batch_child
-- A pending fan-out child whose job Redis lost gets a new job id (no row: it was recorded meanwhile).
UPDATE pgbus_batch_children SET job_id = %s, enqueued_at = now() WHERE batch_id = %s
  AND position = %s AND status = 'pending' RETURNING position;

-- name: take_slots
-- Take the concurrency slots a due step attempt needs (pgbus_take_slots, migration 0017): busy is NULL when all are held now, else the {limit, key} it waits in line for.
SELECT pgbus_take_slots(%s, %s, %s::text[], %s::text[], %s::integer[], %s::text[], %s) AS busy;

-- name: take_rate
-- A start of a rate for a due step attempt (pgbus_take_rate): started, or the moment its wake-up is due and whether this claim must send it.
SELECT * FROM pgbus_take_rate(%s, %s, %s, %s, %s, %s, %s);

-- name: wake_rate
-- A rate's wake-up (pgbus_wake_rate): the steps it woke and the moment of the next one.
SELECT * FROM pgbus_wake_rate(%s);

-- name: regrant_slots
-- Give the free slots of a (limit, key) to its waiters, its lock held (the sweep).
SELECT pg_advisory_xact_lock(pgbus_limit_lock(%(name)s, %(key)s)), pgbus_grant_slots(%(name)s, %(key)s) AS woken;

-- name: woken_steps
-- The steps a given-back slot or a rate's wake-up woke, as their jobs are sent (with their run's priority).
SELECT s.*, w.priority AS run_priority FROM pgbus_workflow_steps s
JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id
WHERE s.id = ANY(%s) AND s.status = 'scheduled' AND w.status = 'ready';

-- name: key_activity
-- A class limit's key under its lock (start() with on_busy refuse or replace): its runs that hold or may take a slot (ready, running), those in line for it, and its oldest run that has not started a step yet.
SELECT pg_advisory_xact_lock(pgbus_limit_lock(%(name)s, %(key)s)),
  (SELECT count(*) FROM pgbus_workflows WHERE limit_name = %(name)s AND limit_key = %(key)s
     AND status IN ('ready', 'running')) AS active,
  (SELECT count(*) FROM pgbus_workflow_steps WHERE blocked_on = %(name)s AND blocked_key = %(key)s
     AND status = 'scheduled') AS in_line,
  (SELECT w.workflow_id FROM pgbus_workflows w WHERE w.limit_name = %(name)s AND w.limit_key = %(key)s
     AND w.status IN ('ready', 'waiting') AND w.workflow_class = %(cls)s
     AND NOT EXISTS (SELECT 1 FROM pgbus_workflow_steps s WHERE s.workflow_id = w.workflow_id
                       AND (s.started_at IS NOT NULL OR s.status <> 'scheduled'))
   ORDER BY w.created_at, w.workflow_id LIMIT 1 FOR UPDATE OF w SKIP LOCKED) AS unstarted;

-- name: replace_arguments
-- The arguments of a run that has not started a step yet, replaced by a later start (on_busy replace).
UPDATE pgbus_workflows SET arguments = %s, updated_at = now() WHERE workflow_id = %s RETURNING workflow_id;

-- name: declare_limits
-- The limits and rates the registered classes declare (name, kind, capacity, window), stored where they changed: a capacity raised reaches the grants and the Limits page without waiting for a claim.
INSERT INTO pgbus_limits AS l (name, kind, capacity, per_seconds)
SELECT * FROM unnest(%s::text[], %s::text[], %s::integer[], %s::double precision[])
ON CONFLICT (kind, name) DO UPDATE SET capacity = EXCLUDED.capacity, per_seconds = EXCLUDED.per_seconds,
    updated_at = now()
WHERE l.capacity <> EXCLUDED.capacity OR l.per_seconds IS DISTINCT FROM EXCLUDED.per_seconds;

-- name: line_up
-- A run just started whose class limit's key is busy goes in line at once (pgbus_line_up): no job for it.
SELECT pgbus_line_up(%s, %s, %s, %s, %s) AS in_line, current_setting('pgbus.woken', true) AS woken;
