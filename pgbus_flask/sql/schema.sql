-- The whole pgbus-flask schema as the migrations leave it. tests/db/test_schema.py
-- checks that migrating from zero gives exactly this.

-- One row per run.
CREATE TABLE pgbus_workflows (
    id                bigserial PRIMARY KEY,
    workflow_id       uuid NOT NULL UNIQUE,
    workflow_class    text NOT NULL,
    status            text NOT NULL CHECK (status IN ('ready', 'running', 'waiting', 'paused', 'finished', 'cancelled')),
    current_step      text NOT NULL,
    subject_type      text,
    subject_id        text,
    idempotency_key   text,
    definition_digest text NOT NULL,
    arguments         jsonb NOT NULL DEFAULT '{}'::jsonb,
    started_by        text NOT NULL,
    paused_at         timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz,
    -- What a person must see (pgbus_flask/attention.py; the runner keeps it at every transition):
    -- the stuck reason the run has or will have once attention_since is older than its threshold,
    -- and its latest step's id and error class.
    attention_reason      text CHECK (attention_reason IN
                              ('stalled', 'paused_error', 'paused_manual', 'overdue', 'waiting_overdue')),
    attention_since       timestamptz,
    attention_step_id     bigint,
    attention_error_class text,
    -- A child run (migration 0009): its parent run and the parent's step that waits on it.
    parent_workflow_id    uuid,
    parent_step_name      text
);
CREATE UNIQUE INDEX pgbus_workflows_idempotency_key
    ON pgbus_workflows (workflow_class, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX pgbus_workflows_one_ongoing_per_subject
    ON pgbus_workflows (workflow_class, subject_type, subject_id)
    WHERE subject_type IS NOT NULL AND status IN ('ready', 'running', 'waiting', 'paused');
CREATE INDEX pgbus_workflows_ongoing
    ON pgbus_workflows (status, workflow_class) WHERE status IN ('ready', 'running', 'waiting', 'paused');
CREATE INDEX pgbus_workflows_status ON pgbus_workflows (status, id);
CREATE INDEX pgbus_workflows_class_status ON pgbus_workflows (workflow_class, status, id);
CREATE INDEX pgbus_workflows_subject ON pgbus_workflows (subject_type, subject_id);
-- What the retention sweep reads, one status at a time (0015).
CREATE INDEX pgbus_workflows_finished_updated ON pgbus_workflows (updated_at) WHERE status = 'finished';
CREATE INDEX pgbus_workflows_cancelled_updated ON pgbus_workflows (updated_at) WHERE status = 'cancelled';
CREATE INDEX pgbus_workflows_attention_paused
    ON pgbus_workflows (workflow_class, current_step, attention_reason, (COALESCE(attention_error_class, '')),
                        attention_since, id)
    WHERE attention_reason IN ('stalled', 'paused_error', 'paused_manual');
-- The overdue and waiting_overdue runs by attention group, each group's oldest first (0013).
CREATE INDEX pgbus_workflows_attention_due_groups
    ON pgbus_workflows (attention_reason, workflow_class, current_step, (COALESCE(attention_error_class, '')),
                        attention_since, id) INCLUDE (attention_error_class)
    WHERE attention_reason IN ('overdue', 'waiting_overdue');
CREATE INDEX pgbus_workflows_class ON pgbus_workflows (workflow_class, id);
CREATE INDEX pgbus_workflows_parent
    ON pgbus_workflows (parent_workflow_id)
    WHERE parent_workflow_id IS NOT NULL AND status IN ('ready', 'running', 'waiting', 'paused');
-- A run's child runs, a page at a time (0012).
CREATE INDEX pgbus_workflows_children
    ON pgbus_workflows (parent_workflow_id, id) WHERE parent_workflow_id IS NOT NULL;
CREATE INDEX pgbus_workflows_step ON pgbus_workflows (current_step, id);
CREATE INDEX pgbus_workflows_attention ON pgbus_workflows (attention_reason, id) WHERE attention_reason IS NOT NULL;
CREATE INDEX pgbus_workflows_attention_group
    ON pgbus_workflows (workflow_class, attention_reason, current_step, (COALESCE(attention_error_class, '')), id)
    WHERE attention_reason IN ('stalled', 'paused_error', 'paused_manual');
-- How many runs each attention group holds: without it the planner multiplies the four columns'
-- selectivities, guesses 16 runs in a group of 66,667, and sorts the whole group to read its oldest.
CREATE STATISTICS pgbus_workflows_attention_groups (mcv)
    ON workflow_class, current_step, attention_reason, (COALESCE(attention_error_class, '')) FROM pgbus_workflows;

-- One row per step attempt.
CREATE TABLE pgbus_workflow_steps (
    id              bigserial PRIMARY KEY,
    workflow_id     uuid NOT NULL REFERENCES pgbus_workflows (workflow_id) ON DELETE CASCADE,
    workflow_class  text NOT NULL,
    step_name       text NOT NULL,
    attempt         integer NOT NULL,
    status          text NOT NULL CHECK (status IN ('scheduled', 'in_progress', 'waiting', 'completed', 'failed', 'skipped', 'cancelled')),
    scheduled_at    timestamptz NOT NULL,
    enqueued_at     timestamptz,
    job_id          text,
    sends           integer NOT NULL DEFAULT 1,  -- jobs sent for this attempt (0004)
    resends         integer NOT NULL DEFAULT 0,  -- of them, sent by the sweep after Redis lost one
    started_at      timestamptz,
    stall_at        timestamptz,
    worker          text,
    app_revision    text,
    finished_at     timestamptz,
    outcome         text,
    output          jsonb,
    error_class     text,
    error_message   text,
    backtrace       text,
    waiting_since   timestamptz,
    timeout_at      timestamptz,
    wait_timed_out  boolean NOT NULL DEFAULT false,
    batch_id        bigint,
    created_at      timestamptz NOT NULL DEFAULT now(),
    error_code      text,   -- an engine message's code and parameters (0006), see messages.py
    error_params    jsonb,
    child_ids       uuid[],  -- the child runs a waiting attempt waits on (0009)
    on_child_failure text CHECK (on_child_failure IN ('fail', 'continue')),
    wait_until_pending boolean NOT NULL DEFAULT false,  -- its wait_until not evaluated yet (0011)
    next_not_before timestamptz,  -- the step's code asked the next step to wait until then (0011)
    UNIQUE (workflow_id, step_name, attempt)
);
CREATE INDEX pgbus_workflow_steps_latest ON pgbus_workflow_steps (workflow_id, id DESC);
CREATE INDEX pgbus_workflow_steps_waiting_children
    ON pgbus_workflow_steps (waiting_since) WHERE status = 'waiting' AND child_ids IS NOT NULL;
CREATE INDEX pgbus_workflow_steps_in_progress
    ON pgbus_workflow_steps (stall_at) WHERE status = 'in_progress';
CREATE INDEX pgbus_workflow_steps_scheduled
    ON pgbus_workflow_steps (scheduled_at) WHERE status = 'scheduled';
CREATE INDEX pgbus_workflow_steps_wait_deadline
    ON pgbus_workflow_steps (timeout_at) WHERE status = 'waiting' AND timeout_at IS NOT NULL;
CREATE INDEX pgbus_workflow_steps_waiting_no_deadline
    ON pgbus_workflow_steps (waiting_since) WHERE status = 'waiting' AND timeout_at IS NULL AND batch_id IS NULL;

-- The audit trail: append-only, removed with its run.
CREATE TABLE pgbus_workflow_events (
    id          bigserial PRIMARY KEY,
    workflow_id uuid NOT NULL REFERENCES pgbus_workflows (workflow_id) ON DELETE CASCADE,
    event       text NOT NULL,
    actor       text NOT NULL,
    reason      text,
    step_id     bigint,
    step_name   text,
    attempt     integer,
    details     jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pgbus_workflow_events_run ON pgbus_workflow_events (workflow_id, id);
CREATE INDEX pgbus_workflow_events_pauses ON pgbus_workflow_events (workflow_id, id)
    WHERE event IN ('paused', 'resumed', 'cancelled', 'rerun', 'step_skipped', 'finished');

-- Signals: pending -> claimed -> consumed.
CREATE TABLE pgbus_workflow_signals (
    id                 bigserial PRIMARY KEY,
    workflow_id        uuid NOT NULL REFERENCES pgbus_workflows (workflow_id) ON DELETE CASCADE,
    name               text NOT NULL,
    payload            jsonb,
    idempotency_key    text,
    status             text NOT NULL CHECK (status IN ('pending', 'claimed', 'consumed')),
    sent_by            text NOT NULL,
    claimed_by_step_id bigint,
    claimed_at         timestamptz,
    consumed_at        timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX pgbus_workflow_signals_idempotency_key
    ON pgbus_workflow_signals (workflow_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX pgbus_workflow_signals_pending
    ON pgbus_workflow_signals (workflow_id, name, id) WHERE status = 'pending';
CREATE INDEX pgbus_workflow_signals_claimed
    ON pgbus_workflow_signals (claimed_by_step_id) WHERE status = 'claimed';
CREATE INDEX pgbus_workflow_signals_run ON pgbus_workflow_signals (workflow_id, id);

-- Fan-out: one batch per fanned-out step attempt, one row per child job.
CREATE TABLE pgbus_batches (
    id               bigserial PRIMARY KEY,
    workflow_id      uuid NOT NULL REFERENCES pgbus_workflows (workflow_id) ON DELETE CASCADE,
    step_id          bigint NOT NULL,
    step_name        text NOT NULL,
    func             text NOT NULL,
    queue            text NOT NULL,
    on_child_failure text NOT NULL CHECK (on_child_failure IN ('fail', 'ignore')),
    status           text NOT NULL CHECK (status IN ('open', 'finished')),
    total            integer NOT NULL,
    done             integer NOT NULL DEFAULT 0,
    failed           integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX pgbus_batches_open ON pgbus_batches (created_at) WHERE status = 'open';
CREATE INDEX pgbus_batches_run ON pgbus_batches (workflow_id, id);  -- id since 0012: a run page's batches

CREATE TABLE pgbus_batch_children (
    batch_id      bigint NOT NULL REFERENCES pgbus_batches (id) ON DELETE CASCADE,
    position      integer NOT NULL,
    args          jsonb NOT NULL,
    status        text NOT NULL CHECK (status IN ('pending', 'done', 'failed')),
    job_id        text NOT NULL,
    enqueued_at   timestamptz,
    finished_at   timestamptz,
    result        jsonb,
    error_class   text,
    error_message text,
    error_code    text,   -- 0006
    error_params  jsonb,
    awaited       boolean NOT NULL DEFAULT true,  -- 0014: false once its batch closed without it
    PRIMARY KEY (batch_id, position)
);
CREATE INDEX pgbus_batch_children_pending
    ON pgbus_batch_children (batch_id) WHERE status = 'pending';
-- The sweep's lost children: pending ones a step still awaits, by when they were sent (0014).
CREATE INDEX pgbus_batch_children_awaited_enqueued
    ON pgbus_batch_children (enqueued_at) WHERE status = 'pending' AND awaited;

-- The audit trail is append-only (see migrations/0003_append_only_events.sql).
CREATE FUNCTION pgbus_workflow_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'pgbus_workflow_events is append-only: event % cannot be changed', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT 1 FROM pgbus_workflows WHERE workflow_id = OLD.workflow_id) THEN
        RAISE EXCEPTION 'pgbus_workflow_events is append-only: event % can only go with its run', OLD.id
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'delete the run from pgbus_workflows (the retention sweep does) and its events go with it';
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER pgbus_workflow_events_append_only
    BEFORE UPDATE OR DELETE ON pgbus_workflow_events
    FOR EACH ROW EXECUTE FUNCTION pgbus_workflow_events_append_only();

-- A run's attention columns from its row and latest step, written only when they change; true when
-- they did. The runner calls it in the statement that writes a transaction's audit events: two index
-- probes, planned once per connection (a set-based UPDATE was planned again at every call). As migration
-- 0007 left it: paused_error when the latest step failed (not when it asked for its own pause or
-- reattempt), waiting_overdue for a wait on a fan-out batch too.
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

-- Runs by class and status, and paused runs by attention group: each change adds a row of +1/-1
-- (no row two writers both update), and the sweep folds them into one row per key.
CREATE TABLE pgbus_run_counts (
    workflow_class   text NOT NULL,
    status           text NOT NULL,
    -- ongoing runs: their current step (0008); finished and cancelled: ''; paused: with the attention group
    step             text NOT NULL DEFAULT '',
    attention_reason text NOT NULL DEFAULT '',
    error_class      text NOT NULL DEFAULT '',
    runs             bigint NOT NULL
);
-- No key and no index: a change costs one heap insert, and every read and the fold read the whole
-- table, which the sweep keeps at one row per key (plus the changes since the last sweep).

-- Kept by triggers, so that every writer of a run row counts right: the runner, the retention
-- sweep's DELETE, and a person's hand-made fix.
CREATE FUNCTION pgbus_workflows_count_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs) VALUES
        (OLD.workflow_class, OLD.status,
         CASE WHEN OLD.status IN ('ready', 'running', 'waiting', 'paused') THEN OLD.current_step ELSE '' END,
         CASE WHEN OLD.status = 'paused' THEN COALESCE(OLD.attention_reason, '') ELSE '' END,
         CASE WHEN OLD.status = 'paused' THEN COALESCE(OLD.attention_error_class, '') ELSE '' END, -1),
        (NEW.workflow_class, NEW.status,
         CASE WHEN NEW.status IN ('ready', 'running', 'waiting', 'paused') THEN NEW.current_step ELSE '' END,
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
               CASE WHEN status IN ('ready', 'running', 'waiting', 'paused') THEN current_step ELSE '' END,
               CASE WHEN status = 'paused' THEN COALESCE(attention_reason, '') ELSE '' END,
               CASE WHEN status = 'paused' THEN COALESCE(attention_error_class, '') ELSE '' END, count(*)
        FROM added GROUP BY 1, 2, 3, 4, 5;
    ELSE
        INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
        SELECT workflow_class, status,
               CASE WHEN status IN ('ready', 'running', 'waiting', 'paused') THEN current_step ELSE '' END,
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
          OR (NEW.status IN ('ready', 'running', 'waiting', 'paused')
              AND OLD.current_step IS DISTINCT FROM NEW.current_step)
          OR (NEW.status = 'paused'
              AND (OLD.attention_reason, OLD.attention_error_class)
                  IS DISTINCT FROM (NEW.attention_reason, NEW.attention_error_class)))
    EXECUTE FUNCTION pgbus_workflows_count_update();
CREATE TRIGGER pgbus_workflows_count_insert
    AFTER INSERT ON pgbus_workflows REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION pgbus_workflows_count_rows();
CREATE TRIGGER pgbus_workflows_count_delete
    AFTER DELETE ON pgbus_workflows REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION pgbus_workflows_count_rows();

-- Insights (0008): pgbus_run_counts above also counts ongoing runs by current step.
-- 2. What happened: one row per (class, bucket, step, kind, label, bin). Runs started, finished
--    and cancelled and attempts ended are kept by 5 minutes (hourly once older than two days), for
--    the throughput chart; the rest by the hour (by the UTC day once older than two days). Kinds:
--      started, finished, cancelled         runs, by the bucket of the event (step '')
--      run_finished, run_cancelled          runs, by the bucket the run STARTED in (the funnel)
--      reached                              runs that reached the step, by the bucket the run started in
--      attempt                              attempts that ended, label = completed | failed
--      error                                failed attempts, label = error class
--      duration, wait                       attempts by bin of their run time / queue wait (ms), see
--                                           pgbus_insight_bin; max_ms the longest in the row
-- A trigger on the audit trail adds rows to pgbus_insight_deltas in the transaction of each
-- event (so every transition counts exactly once, and no writer waits on a counter row); the
-- sweep folds them into pgbus_insights, which pages read.

CREATE FUNCTION pgbus_insight_bin(ms double precision) RETURNS smallint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN ms IS NULL OR ms < 1 THEN 0 ELSE (1 + floor(ln(ms) / ln(1.5)))::smallint END
$$;

CREATE TABLE pgbus_insight_deltas (
    workflow_class text NOT NULL,
    bucket         timestamptz NOT NULL,
    step           text NOT NULL DEFAULT '',
    kind           text NOT NULL,
    label          text NOT NULL DEFAULT '',
    bin            smallint NOT NULL DEFAULT 0,
    n              bigint NOT NULL,
    max_ms         double precision
);
-- No index: a change costs one heap insert; the sweep reads them all and deletes what it folded.

CREATE TABLE pgbus_insights (
    workflow_class text NOT NULL,
    bucket         timestamptz NOT NULL,
    step           text NOT NULL DEFAULT '',
    kind           text NOT NULL,
    label          text NOT NULL DEFAULT '',
    bin            smallint NOT NULL DEFAULT 0,
    n              bigint NOT NULL,
    max_ms         double precision,
    PRIMARY KEY (workflow_class, bucket, step, kind, label, bin)
);
CREATE INDEX pgbus_insights_bucket ON pgbus_insights (bucket);

-- One row trigger (0016): only the events that count fire it (its WHEN), and it reads the step or the
-- run by key (enable_seqscan off: index probes whatever the tables' size when its plan was made).
CREATE FUNCTION pgbus_insights_from_event() RETURNS trigger LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF NEW.event IN ('step_completed', 'step_failed') THEN
        INSERT INTO pgbus_insight_deltas (workflow_class, bucket, step, kind, label, bin, n, max_ms)
        SELECT s.workflow_class,
               date_bin(CASE WHEN v.kind = 'attempt' THEN interval '5 minutes' ELSE interval '1 hour' END,
                        s.finished_at, timestamptz '2000-01-01 00:00+00'),
               s.step_name, v.kind, v.label, v.bin, 1, v.ms
        FROM pgbus_workflow_steps s
        CROSS JOIN LATERAL (SELECT 1000 * extract(epoch FROM s.finished_at - s.started_at)::double precision AS run_ms,
                                   1000 * extract(epoch FROM greatest(s.started_at - s.scheduled_at, interval '0'))
                                       ::double precision AS wait_ms) m
        CROSS JOIN LATERAL (VALUES
            (true, 'attempt', CASE WHEN NEW.event = 'step_completed' THEN 'completed' ELSE 'failed' END,
             0::smallint, NULL::double precision),
            (NEW.event = 'step_failed', 'error', COALESCE(s.error_class, ''), 0::smallint, NULL),
            (s.started_at IS NOT NULL, 'duration', '', pgbus_insight_bin(m.run_ms), m.run_ms),
            (s.started_at IS NOT NULL, 'wait', '', pgbus_insight_bin(m.wait_ms), m.wait_ms)
        ) AS v(keep, kind, label, bin, ms)
        WHERE s.id = NEW.step_id AND s.workflow_id = NEW.workflow_id AND s.finished_at IS NOT NULL AND v.keep;
    ELSE
        -- started, finished, cancelled: by the event's 5 minutes; finished, cancelled (run_*) and a
        -- first step_scheduled (reached): by the hour the run started in
        INSERT INTO pgbus_insight_deltas (workflow_class, bucket, step, kind, label, bin, n, max_ms)
        SELECT w.workflow_class, v.bucket, v.step, v.kind, '', 0::smallint, 1, NULL::double precision
        FROM pgbus_workflows w
        CROSS JOIN LATERAL (VALUES
            (NEW.event <> 'step_scheduled',
             date_bin(interval '5 minutes', NEW.created_at, timestamptz '2000-01-01 00:00+00'), '', NEW.event),
            (NEW.event <> 'started', date_bin(interval '1 hour', w.created_at, timestamptz '2000-01-01 00:00+00'),
             CASE WHEN NEW.event = 'step_scheduled' THEN NEW.step_name ELSE '' END,
             CASE WHEN NEW.event = 'step_scheduled' THEN 'reached' ELSE 'run_' || NEW.event END)
        ) AS v(keep, bucket, step, kind)
        WHERE w.workflow_id = NEW.workflow_id AND v.keep;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER pgbus_insights_from_events
    AFTER INSERT ON pgbus_workflow_events FOR EACH ROW
    WHEN (NEW.event IN ('started', 'finished', 'cancelled', 'step_completed', 'step_failed')
          OR (NEW.event = 'step_scheduled' AND NEW.attempt = 1))
    EXECUTE FUNCTION pgbus_insights_from_event();

-- Recurring starts (see migrations/0010_schedules.sql).
CREATE TABLE pgbus_schedules (
    workflow_class text PRIMARY KEY,
    kind           text NOT NULL CHECK (kind IN ('cron', 'interval')),
    schedule       text NOT NULL,   -- the cron expression as declared, or the interval in whole seconds
    timezone       text NOT NULL DEFAULT 'UTC',
    missed         text NOT NULL DEFAULT 'skip' CHECK (missed IN ('skip', 'all')),
    arguments      jsonb NOT NULL DEFAULT '{}'::jsonb,   -- schedule_kwargs
    next_tick      timestamptz NOT NULL,
    last_tick      timestamptz,
    last_run_id    uuid,            -- no foreign key: the retention sweep deletes old runs
    paused_at      timestamptz,
    paused_by      text,
    paused_reason  text,
    undeclared_at  timestamptz,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT pgbus_schedules_paused_by CHECK ((paused_at IS NULL) = (paused_by IS NULL))
);
-- What the sweep reads: the schedules due now (a handful of rows, whatever the number of runs).
CREATE INDEX pgbus_schedules_due ON pgbus_schedules (next_tick) WHERE paused_at IS NULL AND undeclared_at IS NULL;

-- A schedule's audit trail (declared, changed, undeclared by the sweep; paused, resumed by a person):
-- append-only, removed only with its schedule.
CREATE TABLE pgbus_schedule_events (
    id             bigserial PRIMARY KEY,
    workflow_class text NOT NULL REFERENCES pgbus_schedules (workflow_class) ON DELETE CASCADE,
    event          text NOT NULL,
    actor          text NOT NULL,
    reason         text,
    details        jsonb NOT NULL DEFAULT '{}'::jsonb,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pgbus_schedule_events_class ON pgbus_schedule_events (workflow_class, id);

CREATE FUNCTION pgbus_schedule_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'pgbus_schedule_events is append-only: event % cannot be changed', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT 1 FROM pgbus_schedules WHERE workflow_class = OLD.workflow_class) THEN
        RAISE EXCEPTION 'pgbus_schedule_events is append-only: event % can only go with its schedule', OLD.id
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN OLD;
END
$$;

CREATE TRIGGER pgbus_schedule_events_append_only
    BEFORE UPDATE OR DELETE ON pgbus_schedule_events
    FOR EACH ROW EXECUTE FUNCTION pgbus_schedule_events_append_only();
