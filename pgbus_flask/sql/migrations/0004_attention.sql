-- 0004: what a person must see, kept on the run row, and the counts of runs, kept in a table, so that
-- no dashboard read scans every run (docs/architecture.md; pgbus_flask/attention.py keeps both).
--
-- A run's attention columns say which stuck reason it has, or will have once its time passes: a
-- paused run's reason (stalled, paused_error or paused_manual, from its latest step) since it paused;
-- a ready run is 'overdue' once its step has been due longer than PGBUS_STALL_THRESHOLD, counted
-- from the step's scheduled_at; a run waiting on a signal with no wait_timeout is 'waiting_overdue'
-- once it has waited longer than PGBUS_WAITING_THRESHOLD, counted from waiting_since. The runner
-- sets them in the statement that writes each transition's audit events (pgbus_workflow_attention).

ALTER TABLE pgbus_workflows
    ADD COLUMN attention_reason      text CHECK (attention_reason IN
                                          ('stalled', 'paused_error', 'paused_manual', 'overdue', 'waiting_overdue')),
    ADD COLUMN attention_since       timestamptz,
    ADD COLUMN attention_step_id     bigint,
    ADD COLUMN attention_error_class text;

-- A run's attention columns from its row and latest step, written only when they change; true when
-- they did. The runner calls it in the statement that writes a transaction's audit events: two index
-- probes, planned once per connection (a set-based UPDATE was planned again at every call).
CREATE FUNCTION pgbus_workflow_attention(run_id uuid) RETURNS boolean LANGUAGE plpgsql AS $$
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
    step_batch_id bigint;
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
    SELECT s.id, s.status, s.error_class, s.scheduled_at, s.waiting_since, s.timeout_at, s.batch_id
      INTO step_id, step_status, step_error_class, step_scheduled_at, step_waiting_since, step_timeout_at,
           step_batch_id
      FROM pgbus_workflow_steps s WHERE s.workflow_id = run_id ORDER BY s.id DESC LIMIT 1;
    new_reason := CASE
        WHEN run_status = 'paused' AND step_status = 'failed' AND step_error_class = 'pgbus_flask.errors.StepStalled'
            THEN 'stalled'
        WHEN run_status = 'paused' AND step_status = 'failed' AND step_error_class IS NOT NULL THEN 'paused_error'
        WHEN run_status = 'paused' THEN 'paused_manual'
        WHEN run_status = 'ready' AND step_status = 'scheduled' THEN 'overdue'
        WHEN run_status = 'waiting' AND step_status = 'waiting' AND step_timeout_at IS NULL AND step_batch_id IS NULL
            THEN 'waiting_overdue'
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
WHERE status IN ('ready', 'waiting', 'paused') AND pgbus_workflow_attention(workflow_id);

-- The paused runs of each attention group, oldest first: attention_ids, and the first, last and
-- newest run of each group in attention_groups.
CREATE INDEX pgbus_workflows_attention_paused
    ON pgbus_workflows (workflow_class, current_step, attention_reason, (COALESCE(attention_error_class, '')),
                        attention_since, id)
    WHERE attention_reason IN ('stalled', 'paused_error', 'paused_manual');
-- The ready and waiting runs by how long they have been due or waiting: the overdue ones are a range.
CREATE INDEX pgbus_workflows_attention_due
    ON pgbus_workflows (attention_reason, attention_since) INCLUDE (workflow_class)
    WHERE attention_reason IN ('overdue', 'waiting_overdue');
-- The runs list, newest first, by each filter alone: a page is one range of one index, however the
-- runs are spread over the table (500,000 finished runs with the highest ids no longer stand between a
-- filter and its first page). pgbus_workflows_ongoing stays for processes of the previous version.
CREATE INDEX pgbus_workflows_status ON pgbus_workflows (status, id);
CREATE INDEX pgbus_workflows_class ON pgbus_workflows (workflow_class, id);
CREATE INDEX pgbus_workflows_step ON pgbus_workflows (current_step, id);
CREATE INDEX pgbus_workflows_attention ON pgbus_workflows (attention_reason, id) WHERE attention_reason IS NOT NULL;
-- (and one attention group's paused runs: the link from each group on the attention page)
CREATE INDEX pgbus_workflows_attention_group
    ON pgbus_workflows (workflow_class, attention_reason, current_step, (COALESCE(attention_error_class, '')), id)
    WHERE attention_reason IN ('stalled', 'paused_error', 'paused_manual');
-- How many runs each attention group holds: without it the planner multiplies the four columns'
-- selectivities, guesses 16 runs in a group of 66,667, and sorts the whole group to read its oldest.
CREATE STATISTICS pgbus_workflows_attention_groups (mcv)
    ON workflow_class, current_step, attention_reason, (COALESCE(attention_error_class, '')) FROM pgbus_workflows;

-- The events that start or end a paused stretch, which the timeline draws, without reading the
-- other 20,000 events of a run that polls.
CREATE INDEX pgbus_workflow_events_pauses ON pgbus_workflow_events (workflow_id, id)
    WHERE event IN ('paused', 'resumed', 'cancelled', 'rerun', 'step_skipped', 'finished');

-- Runs by class and status, and paused runs by attention group: each change adds a row of +1/-1
-- (no row two writers both update), and the sweep folds them into one row per key.
CREATE TABLE pgbus_run_counts (
    workflow_class   text NOT NULL,
    status           text NOT NULL,
    -- for paused runs: the attention group (current step, reason, error class or ''); '' otherwise
    step             text NOT NULL DEFAULT '',
    attention_reason text NOT NULL DEFAULT '',
    error_class      text NOT NULL DEFAULT '',
    runs             bigint NOT NULL
);
-- No key and no index: a change costs one heap insert, and every read and the fold read the whole
-- table, which the sweep keeps at one row per key (plus the changes since the last sweep).

INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
SELECT workflow_class, status,
       CASE WHEN status = 'paused' THEN current_step ELSE '' END,
       CASE WHEN status = 'paused' THEN COALESCE(attention_reason, '') ELSE '' END,
       CASE WHEN status = 'paused' THEN COALESCE(attention_error_class, '') ELSE '' END,
       count(*)
FROM pgbus_workflows GROUP BY 1, 2, 3, 4, 5;

-- Kept by triggers, so that every writer of a run row counts right: the runner, the retention
-- sweep's DELETE, and a person's hand-made fix.
CREATE FUNCTION pgbus_workflows_count_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs) VALUES
        (OLD.workflow_class, OLD.status,
         CASE WHEN OLD.status = 'paused' THEN OLD.current_step ELSE '' END,
         CASE WHEN OLD.status = 'paused' THEN COALESCE(OLD.attention_reason, '') ELSE '' END,
         CASE WHEN OLD.status = 'paused' THEN COALESCE(OLD.attention_error_class, '') ELSE '' END, -1),
        (NEW.workflow_class, NEW.status,
         CASE WHEN NEW.status = 'paused' THEN NEW.current_step ELSE '' END,
         CASE WHEN NEW.status = 'paused' THEN COALESCE(NEW.attention_reason, '') ELSE '' END,
         CASE WHEN NEW.status = 'paused' THEN COALESCE(NEW.attention_error_class, '') ELSE '' END, 1);
    RETURN NULL;
END
$$;

CREATE FUNCTION pgbus_workflows_count_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
        SELECT workflow_class, status,
               CASE WHEN status = 'paused' THEN current_step ELSE '' END,
               CASE WHEN status = 'paused' THEN COALESCE(attention_reason, '') ELSE '' END,
               CASE WHEN status = 'paused' THEN COALESCE(attention_error_class, '') ELSE '' END, count(*)
        FROM added GROUP BY 1, 2, 3, 4, 5;
    ELSE
        INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
        SELECT workflow_class, status,
               CASE WHEN status = 'paused' THEN current_step ELSE '' END,
               CASE WHEN status = 'paused' THEN COALESCE(attention_reason, '') ELSE '' END,
               CASE WHEN status = 'paused' THEN COALESCE(attention_error_class, '') ELSE '' END, -count(*)
        FROM removed GROUP BY 1, 2, 3, 4, 5;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER pgbus_workflows_count_update
    AFTER UPDATE ON pgbus_workflows FOR EACH ROW
    WHEN (OLD.workflow_class IS DISTINCT FROM NEW.workflow_class OR OLD.status IS DISTINCT FROM NEW.status
          OR (NEW.status = 'paused'
              AND (OLD.current_step, OLD.attention_reason, OLD.attention_error_class)
                  IS DISTINCT FROM (NEW.current_step, NEW.attention_reason, NEW.attention_error_class)))
    EXECUTE FUNCTION pgbus_workflows_count_update();
CREATE TRIGGER pgbus_workflows_count_insert
    AFTER INSERT ON pgbus_workflows REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION pgbus_workflows_count_rows();
CREATE TRIGGER pgbus_workflows_count_delete
    AFTER DELETE ON pgbus_workflows REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION pgbus_workflows_count_rows();
