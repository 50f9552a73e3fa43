-- Telling a person (pgbus_flask/notify, docs/notifications.md): the webhook targets, the outbox the
-- triggers of migration 0019 fill, each target's memory of each attention group, and the deliveries.

-- name: notify_declare_target
-- Store one webhook target as this process declares it (name, events, classes).
INSERT INTO pgbus_notify_targets (name, events, classes) VALUES (%s, %s, %s)
ON CONFLICT (name) DO UPDATE SET events = EXCLUDED.events, classes = EXCLUDED.classes, declared_at = now()
WHERE (pgbus_notify_targets.events, pgbus_notify_targets.classes) IS DISTINCT FROM (EXCLUDED.events, EXCLUDED.classes);

-- name: notify_forget_targets
-- Forget the targets this process's PGBUS_WEBHOOKS no longer names (%s: the names it does), with their groups' memory.
WITH gone AS (DELETE FROM pgbus_notify_targets WHERE NOT (name = ANY (%s)) RETURNING name)
DELETE FROM pgbus_notify_groups g USING gone WHERE g.target = gone.name;

-- name: notify_pump_lock
-- One pump at a time (a transaction-level advisory lock: nothing outlives the transaction); false when another pumps.
SELECT pg_try_advisory_xact_lock(%s) AS got;

-- name: notify_take_notices
-- The oldest outbox rows, taken out of the outbox (the pump's transaction turns them into deliveries or drops them).
DELETE FROM pgbus_notices WHERE id IN (SELECT id FROM pgbus_notices ORDER BY id LIMIT %s)
RETURNING id, kind, workflow_id, workflow_class, step, reason, error_class, error_message, attempt, created_at;

-- name: notify_due_groups
-- The attention groups whose message waited for the interval and is due now.
SELECT target, workflow_class, step, reason, error_class FROM pgbus_notify_groups
WHERE due_at IS NOT NULL AND due_at <= now() ORDER BY due_at LIMIT %s;

-- name: notify_group_state
-- What target %s was last told about attention group (class, step, reason, error class), locked for this pump.
SELECT is_open, told_runs, entered, told_at, due_at, now() AS now FROM pgbus_notify_groups
WHERE target = %s AND workflow_class = %s AND step = %s AND reason = %s AND error_class = %s FOR UPDATE;

-- name: notify_group_save
-- Store what a target was last told about an attention group (and when a waiting message falls due).
INSERT INTO pgbus_notify_groups (target, workflow_class, step, reason, error_class, is_open, told_runs, entered,
                                 told_at, due_at)
VALUES (%(target)s, %(workflow_class)s, %(step)s, %(reason)s, %(error_class)s, %(is_open)s, %(told_runs)s,
        %(entered)s, %(told_at)s, %(due_at)s)
ON CONFLICT (target, workflow_class, step, reason, error_class) DO UPDATE SET
    is_open = EXCLUDED.is_open, told_runs = EXCLUDED.told_runs, entered = EXCLUDED.entered,
    told_at = EXCLUDED.told_at, due_at = EXCLUDED.due_at;

-- name: notify_group_runs_paused
-- How many runs of one paused attention group (class, step, reason, error class) there are, the newest one's error
-- message, and how many of them have an entering notice still in the outbox (seen in the same snapshot as the count).
SELECT count(*) AS runs,
       count(*) FILTER (WHERE EXISTS (
         SELECT 1 FROM pgbus_notices n WHERE n.workflow_id = w.workflow_id AND n.kind = 'run_needs_attention'
            AND n.workflow_class = %(workflow_class)s AND COALESCE(n.step, '') = %(step)s
            AND COALESCE(n.reason, '') = %(reason)s AND COALESCE(n.error_class, '') = %(error_class)s)) AS pending,
       (SELECT s.error_message FROM pgbus_workflows w2 JOIN pgbus_workflow_steps s ON s.id = w2.attention_step_id
         WHERE w2.workflow_class = %(workflow_class)s AND w2.current_step = %(step)s
           AND w2.attention_reason IN ('stalled', 'paused_error', 'paused_manual') AND w2.attention_reason = %(reason)s
           AND COALESCE(w2.attention_error_class, '') = %(error_class)s AND w2.status = 'paused'
         ORDER BY w2.attention_since DESC LIMIT 1) AS error_message
FROM pgbus_workflows w
WHERE w.workflow_class = %(workflow_class)s AND w.current_step = %(step)s
  AND w.attention_reason IN ('stalled', 'paused_error', 'paused_manual') AND w.attention_reason = %(reason)s
  AND COALESCE(w.attention_error_class, '') = %(error_class)s AND w.status = 'paused';

-- name: notify_group_runs_due
-- How many runs of one overdue or waiting_overdue attention group the sweep announced (past their threshold), and how
-- many of them have an entering notice still in the outbox.
SELECT count(*) AS runs, NULL::text AS error_message,
       count(*) FILTER (WHERE EXISTS (
         SELECT 1 FROM pgbus_notices n WHERE n.workflow_id = w.workflow_id AND n.kind = 'run_needs_attention'
            AND n.workflow_class = %(workflow_class)s AND COALESCE(n.step, '') = %(step)s
            AND COALESCE(n.reason, '') = %(reason)s AND COALESCE(n.error_class, '') = %(error_class)s)) AS pending
FROM pgbus_workflows w
WHERE w.attention_reason IN ('overdue', 'waiting_overdue') AND w.attention_reason = %(reason)s
  AND w.workflow_class = %(workflow_class)s AND w.current_step = %(step)s
  AND COALESCE(w.attention_error_class, '') = %(error_class)s AND w.attention_notified;

-- name: notify_add_delivery
-- A message for a target, to be sent by an RQ job: its id.
INSERT INTO pgbus_deliveries (target, event_type, webhook_id, payload, data, requested_by)
VALUES (%s, %s, %s, %s, %s, %s) RETURNING id;

-- name: notify_claim_delivery
-- Take delivery %s for one try (due, not delivered, no live try): its row, or nothing.
UPDATE pgbus_deliveries SET status = 'sending', attempts = attempts + 1, lease_until = now() + make_interval(secs => %s),
                            updated_at = now()
WHERE id = %s AND next_attempt_at <= now()
  AND (status = 'pending' OR (status = 'sending' AND lease_until < now()))
RETURNING id, target, event_type, webhook_id, payload, attempts, created_at, now() AS now;

-- name: notify_delivered
-- The receiver answered 2xx: delivered, never sent again.
UPDATE pgbus_deliveries SET status = 'delivered', delivered_at = now(), updated_at = now(), lease_until = NULL,
                            response_status = %s, response_body = %s, last_error = NULL
WHERE id = %s AND status = 'sending';

-- name: notify_retry
-- The try failed: try again at %s, or give up (failed) when that is past a day after the message was made; its status.
UPDATE pgbus_deliveries SET status = CASE WHEN %s::timestamptz > created_at + interval '1 day' THEN 'failed' ELSE 'pending' END,
                            next_attempt_at = %s, updated_at = now(), lease_until = NULL,
                            response_status = %s, response_body = %s, last_error = %s
WHERE id = %s AND status = 'sending' RETURNING status;

-- name: notify_not_enqueued
-- Due deliveries whose job Redis refused: due as long ago as a lost one, so the next sweep sends them again.
UPDATE pgbus_deliveries SET next_attempt_at = now() - make_interval(secs => %s)
WHERE id = ANY(%s) AND status = 'pending' AND next_attempt_at <= now();

-- name: notify_lost_deliveries
-- Deliveries due a while ago (their job lost with Redis, or their try's worker gone): to be sent again.
SELECT id FROM pgbus_deliveries
WHERE status IN ('pending', 'sending') AND next_attempt_at <= now() - make_interval(secs => %s)
  AND (status = 'pending' OR lease_until < now())
ORDER BY next_attempt_at LIMIT %s;

-- name: notify_announce_due
-- Runs overdue or waiting past their threshold that no notice has announced yet: announced now (the trigger writes their notice).
UPDATE pgbus_workflows SET attention_notified = true
WHERE id IN (SELECT id FROM pgbus_workflows
              WHERE attention_reason = %(reason)s AND NOT attention_notified
                AND attention_since <= now() - make_interval(secs => %(threshold)s)
              ORDER BY attention_since LIMIT %(limit)s)
  AND attention_reason = %(reason)s AND NOT attention_notified;

-- name: notify_forget_deliveries
-- Delivered and failed deliveries older than %s seconds: deleted (at most %s).
DELETE FROM pgbus_deliveries WHERE id IN (
    SELECT id FROM pgbus_deliveries WHERE status IN ('delivered', 'failed')
       AND updated_at < now() - make_interval(secs => %s) ORDER BY updated_at LIMIT %s);

-- name: notify_recent_deliveries
-- The newest deliveries, all targets (%s: how many), for the Notifications page.
SELECT id, target, event_type, webhook_id, payload, data, status, attempts, next_attempt_at, response_status,
       response_body, last_error, requested_by, created_at, updated_at, delivered_at
FROM pgbus_deliveries ORDER BY id DESC LIMIT %s;
