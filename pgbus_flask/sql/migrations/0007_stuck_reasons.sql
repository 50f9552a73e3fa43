-- 0007: the stuck reasons as the reference (pgbus 0.20) has them.
--
-- paused_error: a paused run whose latest step failed, whatever it failed with (before: only a failure
-- with an error class). A step that asked for its own pause (self.pause(): outcome 'paused') or for a
-- reattempt while the run was paused (outcome 'reattempted') did not fail: paused_manual, as before.
-- waiting_overdue: a run waiting longer than PGBUS_WAITING_THRESHOLD on a step without a wait_timeout,
-- on a signal or on a fan-out batch (before: never on a batch, so a fan-out whose children never finish
-- was never surfaced).
--
-- The reads are unchanged: they read the attention columns through the partial indexes of 0004.

-- A run's attention columns from its row and latest step, written only when they change; true when
-- they did. The runner calls it in the statement that writes a transaction's audit events: two index
-- probes, planned once per connection (a set-based UPDATE was planned again at every call). As migration
-- 0007 left it: paused_error when the latest step failed (not when it asked for its own pause or
-- reattempt), waiting_overdue for a wait on a fan-out batch too.
CREATE OR REPLACE FUNCTION pgbus_workflow_attention(run_id uuid) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    run_status text;
    run_paused_at timestamptz;
    stored_reason text;
    stored_since timestamptz;
    stored_step_id bigint;
    stored_error_class text;
    step_id bigint;
    step_status text;
    step_error_class text;
    step_scheduled_at timestamptz;
    step_waiting_since timestamptz;
    step_timeout_at timestamptz;
    step_outcome text;
    new_reason text;
    new_since timestamptz;
BEGIN
    SELECT w.status, w.paused_at, w.attention_reason, w.attention_since, w.attention_step_id,
           w.attention_error_class
      INTO run_status, run_paused_at, stored_reason, stored_since, stored_step_id, stored_error_class
      FROM pgbus_workflows w WHERE w.workflow_id = run_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    SELECT s.id, s.status, s.error_class, s.scheduled_at, s.waiting_since, s.timeout_at, s.outcome
      INTO step_id, step_status, step_error_class, step_scheduled_at, step_waiting_since, step_timeout_at,
           step_outcome
      FROM pgbus_workflow_steps s WHERE s.workflow_id = run_id ORDER BY s.id DESC LIMIT 1;
    new_reason := CASE
        WHEN run_status = 'paused' AND step_status = 'failed' AND step_error_class = 'pgbus_flask.errors.StepStalled'
            THEN 'stalled'
        WHEN run_status = 'paused' AND step_status = 'failed'
             AND step_outcome IS DISTINCT FROM 'paused' AND step_outcome IS DISTINCT FROM 'reattempted'
            THEN 'paused_error'
        WHEN run_status = 'paused' THEN 'paused_manual'
        WHEN run_status = 'ready' AND step_status = 'scheduled' THEN 'overdue'
        WHEN run_status = 'waiting' AND step_status = 'waiting' AND step_timeout_at IS NULL THEN 'waiting_overdue'
        END;
    IF new_reason IS NULL THEN
        step_id := NULL;
        step_error_class := NULL;
    ELSE
        new_since := CASE run_status WHEN 'paused' THEN run_paused_at WHEN 'ready' THEN step_scheduled_at
                                     ELSE step_waiting_since END;
    END IF;
    IF (stored_reason, stored_since, stored_step_id, stored_error_class)
       IS NOT DISTINCT FROM (new_reason, new_since, step_id, step_error_class) THEN
        RETURN false;
    END IF;
    UPDATE pgbus_workflows SET attention_reason = new_reason, attention_since = new_since,
                               attention_step_id = step_id, attention_error_class = step_error_class
     WHERE workflow_id = run_id;
    RETURN true;
END
$$;

SELECT count(*) FROM pgbus_workflows
WHERE status IN ('waiting', 'paused') AND pgbus_workflow_attention(workflow_id);
