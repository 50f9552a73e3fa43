-- The stored schedules (pgbus_flask/schedules.py): what the sweep starts, and the reads and verbs on them.

-- name: schedules_due
-- The classes whose schedule has a tick due now, the most overdue first, at most %s (pgbus_schedules_due).
SELECT workflow_class FROM pgbus_schedules WHERE paused_at IS NULL AND undeclared_at IS NULL
  AND next_tick <= now() ORDER BY next_tick LIMIT %s;

-- name: schedule_lock
-- A schedule's row, locked until the transaction ends, with the transaction's now().
SELECT s.*, now() AS tx_now FROM pgbus_schedules s WHERE workflow_class = %s FOR UPDATE;

-- name: schedule_insert
-- Store the schedule of a class seen for the first time (nothing when another sweeper stored it first).
INSERT INTO pgbus_schedules (workflow_class, kind, schedule, timezone, missed, arguments, next_tick)
VALUES (%(name)s, %(kind)s, %(schedule)s, %(timezone)s, %(missed)s, %(arguments)s, %(next_tick)s)
ON CONFLICT (workflow_class) DO NOTHING RETURNING *;

-- name: schedule_event
-- Append to a schedule's audit trail.
INSERT INTO pgbus_schedule_events (workflow_class, event, actor, reason, details)
VALUES (%s, %s, %s, %s, %s);

-- name: schedules_list
-- Every stored schedule with its last run's status, and the database's now() (one row even with no schedule).
SELECT s.*, w.status AS last_run_status, now() AS db_now
FROM (SELECT now()) AS n LEFT JOIN pgbus_schedules s ON true
LEFT JOIN pgbus_workflows w ON w.workflow_id = s.last_run_id ORDER BY s.workflow_class;

-- name: schedules_stored
-- Every stored schedule, and the database's now() (one row even with no schedule).
SELECT s.*, now() AS db_now FROM (SELECT now()) AS n
LEFT JOIN pgbus_schedules s ON true;

-- name: schedule_names
-- The classes that have a stored schedule.
SELECT workflow_class FROM pgbus_schedules;

-- name: schedule_events
-- A schedule's audit trail, newest first, at most %s events.
SELECT * FROM pgbus_schedule_events WHERE workflow_class = %s
ORDER BY id DESC LIMIT %s;

-- name: schedule_pause
-- Pause a schedule that is not paused: the sweep starts nothing for it.
UPDATE pgbus_schedules SET paused_at = now(), paused_by = %s, paused_reason = %s,
  updated_at = now() WHERE workflow_class = %s AND paused_at IS NULL RETURNING *;

-- name: schedule_resume
-- Resume a paused schedule from its next tick %s.
UPDATE pgbus_schedules SET paused_at = NULL, paused_by = NULL, paused_reason = NULL,
  next_tick = %s, updated_at = now() WHERE workflow_class = %s AND paused_at IS NOT NULL
RETURNING *;

-- name: schedule_undeclare
-- Mark a schedule whose class no longer declares one: shown, never started.
UPDATE pgbus_schedules SET undeclared_at = now(), updated_at = now()
WHERE workflow_class = %s;

-- name: schedule_redeclare
-- Store a schedule's new declaration (declared again, or otherwise) and its next tick.
UPDATE pgbus_schedules SET kind = %s, schedule = %s, timezone = %s, missed = %s, arguments = %s,
  next_tick = %s, undeclared_at = NULL, updated_at = now() WHERE workflow_class = %s;

-- name: schedule_ticked
-- Record the tick a schedule started, its run, and its next tick.
UPDATE pgbus_schedules SET last_tick = %s, last_run_id = %s, next_tick = %s, updated_at = now()
WHERE workflow_class = %s;
