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
    parent_step_name      text,
    -- The W3C traceparent of start()'s producer span when the app traces (0018, pgbus_flask/tracing.py).
    traceparent           text
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
    step_blocked_since timestamptz;
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
    SELECT s.id, s.status, s.error_class, s.scheduled_at, s.waiting_since, s.timeout_at, s.outcome, s.blocked_since
      INTO step_id, step_status, step_error_class, step_scheduled_at, step_waiting_since, step_timeout_at,
           step_outcome, step_blocked_since
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
        WHEN run_status = 'waiting' AND step_status = 'scheduled' AND step_blocked_since IS NOT NULL
            THEN 'waiting_overdue'
        END;
    IF new_reason IS NULL THEN
        step_id := NULL;
        step_error_class := NULL;
    ELSE
        new_since := CASE WHEN run_status = 'paused' THEN run_paused_at
                          WHEN run_status = 'ready' THEN step_scheduled_at
                          WHEN step_status = 'scheduled' THEN step_blocked_since
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

-- Flow control (migration 0017, docs/flow-control.md): concurrency slots, rates, priorities.
ALTER TABLE pgbus_workflows
    ADD COLUMN priority integer,                          -- start(..., priority=); NULL: the class's or step's
    ADD COLUMN limit_name text,                           -- the class's concurrency limit, its key below
    ADD COLUMN limit_key text,
    ADD COLUMN holds_slot boolean NOT NULL DEFAULT false; -- holds its run-level limit's slot

ALTER TABLE pgbus_workflow_steps
    ADD COLUMN holds_slot boolean NOT NULL DEFAULT false, -- holds its step-level limit's slot
    ADD COLUMN blocked_on text,                           -- the limit or rate it waits for (its run waits)
    ADD COLUMN blocked_key text,                          -- the limit's key; NULL: blocked_on names a rate
    ADD COLUMN blocked_since timestamptz,                 -- kept once woken: it is then first in line
    ADD COLUMN blocked_priority integer;

-- Each limit and rate as last declared by a worker (capacity, kind, window): what the grants and
-- the Limits panel read.
CREATE TABLE pgbus_limits (
    name        text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('run', 'step', 'rate')),
    capacity    integer NOT NULL CHECK (capacity > 0),
    per_seconds double precision,                           -- a rate's window
    -- a rate: the starts of its last window, oldest first, and what its wake-up promised
    starts      timestamptz[] NOT NULL DEFAULT '{}',
    promised    integer NOT NULL DEFAULT 0,
    promised_until timestamptz,
    wake_at     timestamptz,                                -- the rate's wake-up job is due then
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
);

CREATE TABLE pgbus_limit_slots (
    limit_name  text NOT NULL,
    limit_key   text NOT NULL,
    slot        integer NOT NULL,
    holder_run  uuid,
    holder_step bigint,
    taken_at    timestamptz,
    PRIMARY KEY (limit_name, limit_key, slot),
    CHECK (holder_run IS NULL OR holder_step IS NULL)
);
CREATE INDEX pgbus_limit_slots_run ON pgbus_limit_slots (holder_run) WHERE holder_run IS NOT NULL;
CREATE INDEX pgbus_limit_slots_step ON pgbus_limit_slots (holder_step) WHERE holder_step IS NOT NULL;

-- The waiters of each limit and rate, first in line first.
CREATE INDEX pgbus_workflow_steps_blocked ON pgbus_workflow_steps
    (blocked_on, blocked_key, blocked_priority DESC, id) WHERE blocked_on IS NOT NULL AND status = 'scheduled';
-- The runs of a class limit's key that hold or wait for a slot (on_busy refuse and replace).
CREATE INDEX pgbus_workflows_limit_key ON pgbus_workflows (limit_name, limit_key)
    WHERE limit_name IS NOT NULL AND status IN ('ready', 'running', 'waiting');

-- The advisory lock of one (limit, key): every take, give-back and grant of its slots holds it.
CREATE FUNCTION pgbus_limit_lock(name text, key text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('pgbus-limit' || chr(31) || name || chr(31) || COALESCE(key, ''), 0)
$$;

-- Give the free slots of (name, key) to its waiters, first in line first (the caller holds the key's
-- lock). A waiter whose run or step another transaction holds is skipped (SKIP LOCKED: no deadlock);
-- that transaction's own give-back or the sweep grants it. Returns how many were woken.
CREATE FUNCTION pgbus_grant_slots(p_name text, p_key text) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    lim record;
    free_slot integer;
    waiter record;
    woken integer := 0;
BEGIN
    SELECT kind, capacity INTO lim FROM pgbus_limits WHERE name = p_name AND kind IN ('run', 'step')
      ORDER BY kind LIMIT 1;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    LOOP
        -- a free slot: a row given back, else a new row while fewer than the capacity exist
        SELECT slot INTO free_slot FROM pgbus_limit_slots
         WHERE limit_name = p_name AND limit_key = p_key AND slot <= lim.capacity
           AND holder_run IS NULL AND holder_step IS NULL ORDER BY slot LIMIT 1;
        IF NOT FOUND THEN
            SELECT COALESCE(max(slot), 0) + 1 INTO free_slot FROM pgbus_limit_slots
             WHERE limit_name = p_name AND limit_key = p_key;
            EXIT WHEN free_slot > lim.capacity;
            INSERT INTO pgbus_limit_slots (limit_name, limit_key, slot) VALUES (p_name, p_key, free_slot);
        END IF;
        SELECT s.id, s.workflow_id, s.step_name, s.attempt, s.sends, s.scheduled_at INTO waiter
          FROM pgbus_workflow_steps s JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id
         WHERE s.blocked_on = p_name AND s.blocked_key = p_key AND s.status = 'scheduled' AND w.status = 'waiting'
         ORDER BY s.blocked_priority DESC, s.id LIMIT 1 FOR UPDATE OF s, w SKIP LOCKED;
        EXIT WHEN NOT FOUND;
        UPDATE pgbus_limit_slots SET taken_at = now(),
               holder_run = CASE WHEN lim.kind = 'run' THEN waiter.workflow_id END,
               holder_step = CASE WHEN lim.kind = 'step' THEN waiter.id END
         WHERE limit_name = p_name AND limit_key = p_key AND slot = free_slot;
        UPDATE pgbus_workflow_steps SET blocked_on = NULL, blocked_key = NULL, holds_slot = (lim.kind = 'step'),
               sends = sends + 1, job_id = 'pgbus-step-' || id || '-send' || (sends + 1), enqueued_at = now(),
               scheduled_at = now()
         WHERE id = waiter.id;
        UPDATE pgbus_workflows SET status = 'ready', updated_at = now(), holds_slot = holds_slot OR lim.kind = 'run'
         WHERE workflow_id = waiter.workflow_id;
        INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details)
        VALUES (waiter.workflow_id, 'slot_granted', 'system', waiter.id, waiter.step_name, waiter.attempt,
                jsonb_build_object('limit', p_name, 'key', p_key));
        PERFORM pgbus_workflow_attention(waiter.workflow_id);
        PERFORM set_config('pgbus.woken', COALESCE(NULLIF(current_setting('pgbus.woken', true), ''), '')
                           || waiter.id || ',', true);
        woken := woken + 1;
    END LOOP;
    RETURN woken;
END
$$;

-- Give back every slot a run or a step attempt holds (one of the two ids is NULL), and grant each to
-- the next in line.
CREATE FUNCTION pgbus_give_back_slots(p_run uuid, p_step bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    held record;
BEGIN
    FOR held IN SELECT limit_name, limit_key FROM pgbus_limit_slots
                 WHERE (p_run IS NOT NULL AND holder_run = p_run) OR (p_step IS NOT NULL AND holder_step = p_step)
                 ORDER BY pgbus_limit_lock(limit_name, limit_key) LOOP
        PERFORM pg_advisory_xact_lock(pgbus_limit_lock(held.limit_name, held.limit_key));
        UPDATE pgbus_limit_slots SET holder_run = NULL, holder_step = NULL, taken_at = NULL
         WHERE limit_name = held.limit_name AND limit_key = held.limit_key
           AND ((p_run IS NOT NULL AND holder_run = p_run) OR (p_step IS NOT NULL AND holder_step = p_step));
        PERFORM pgbus_grant_slots(held.limit_name, held.limit_key);
    END LOOP;
END
$$;

CREATE FUNCTION pgbus_run_gives_back() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgbus_give_back_slots(OLD.workflow_id, NULL);
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.holds_slot := false;
    RETURN NEW;
END
$$;

CREATE FUNCTION pgbus_step_gives_back() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pgbus_give_back_slots(NULL, OLD.id);
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.holds_slot := false;
    RETURN NEW;
END
$$;

-- A run gives its slot back when it stops being ready or running (waits, pauses, ends), when it is
-- ready with its step due later (a delay, a backoff), or when its holds_slot is cleared.
CREATE TRIGGER pgbus_run_gives_back BEFORE UPDATE ON pgbus_workflows FOR EACH ROW
    WHEN (OLD.holds_slot AND (NOT NEW.holds_slot OR NEW.status NOT IN ('ready', 'running')
          OR (NEW.status = 'ready' AND NEW.attention_since > now() + interval '1 second')))
    EXECUTE FUNCTION pgbus_run_gives_back();
CREATE TRIGGER pgbus_run_gives_back_deleted BEFORE DELETE ON pgbus_workflows FOR EACH ROW
    WHEN (OLD.holds_slot) EXECUTE FUNCTION pgbus_run_gives_back();

-- A step attempt gives its slot back when it leaves scheduled and in_progress (completed, failed,
-- waiting, skipped, cancelled) or when its holds_slot is cleared.
CREATE TRIGGER pgbus_step_gives_back BEFORE UPDATE ON pgbus_workflow_steps FOR EACH ROW
    WHEN (OLD.holds_slot AND (NOT NEW.holds_slot OR NEW.status NOT IN ('scheduled', 'in_progress')))
    EXECUTE FUNCTION pgbus_step_gives_back();
CREATE TRIGGER pgbus_step_gives_back_deleted BEFORE DELETE ON pgbus_workflow_steps FOR EACH ROW
    WHEN (OLD.holds_slot) EXECUTE FUNCTION pgbus_step_gives_back();

-- A granted step whose run is paused before it ran gives its slot back too (it stays scheduled).
CREATE FUNCTION pgbus_paused_run_gives_back() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE pgbus_workflow_steps SET holds_slot = false WHERE workflow_id = NEW.workflow_id AND holds_slot;
    RETURN NULL;
END
$$;
CREATE INDEX pgbus_workflow_steps_holding ON pgbus_workflow_steps (workflow_id) WHERE holds_slot;
CREATE TRIGGER pgbus_paused_run_gives_back AFTER UPDATE ON pgbus_workflows FOR EACH ROW
    WHEN (NEW.status = 'paused' AND OLD.status = 'ready') EXECUTE FUNCTION pgbus_paused_run_gives_back();

-- Take the slots a step attempt needs at its claim, all or none: p_names, p_keys, p_caps and p_kinds
-- ('run' or 'step') describe them. Every key's lock is taken first, in one order. A slot the run or
-- the attempt already holds (granted) counts as taken. Returns NULL when all are held now; else
-- {name, key} of the first busy one, after the attempt was put in line for it (blocked_on, its run
-- waiting) and every slot it held given back. A claim behind waiters queues behind them even when a
-- slot is free (a capacity raised since): the grant then picks the first in line.
CREATE FUNCTION pgbus_take_slots(p_step bigint, p_run uuid, p_names text[], p_keys text[], p_caps integer[],
                                 p_kinds text[], p_priority integer) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE
    i integer;
    lock_id bigint;
    held boolean;
    taken integer;
    busy integer;
BEGIN
    FOR lock_id IN SELECT DISTINCT pgbus_limit_lock(p_names[j], p_keys[j]) FROM generate_subscripts(p_names, 1) j
                   ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(lock_id);
    END LOOP;
    FOR i IN 1 .. cardinality(p_names) LOOP
        IF NOT EXISTS (SELECT 1 FROM pgbus_limits WHERE kind = p_kinds[i] AND name = p_names[i]
                                                      AND capacity = p_caps[i]) THEN
            INSERT INTO pgbus_limits (name, kind, capacity) VALUES (p_names[i], p_kinds[i], p_caps[i])
            ON CONFLICT (kind, name) DO UPDATE SET capacity = EXCLUDED.capacity, updated_at = now();
        END IF;
        IF p_kinds[i] = 'run' THEN
            held := EXISTS (SELECT 1 FROM pgbus_limit_slots WHERE holder_run = p_run AND limit_name = p_names[i]);
        ELSE
            held := EXISTS (SELECT 1 FROM pgbus_limit_slots WHERE holder_step = p_step AND limit_name = p_names[i]);
        END IF;
        CONTINUE WHEN held;
        taken := NULL;
        IF NOT EXISTS (SELECT 1 FROM pgbus_workflow_steps s WHERE s.blocked_on = p_names[i]
                          AND s.blocked_key = p_keys[i] AND s.status = 'scheduled' AND s.id <> p_step) THEN
            UPDATE pgbus_limit_slots SET taken_at = now(),
                   holder_run = CASE WHEN p_kinds[i] = 'run' THEN p_run END,
                   holder_step = CASE WHEN p_kinds[i] = 'step' THEN p_step END
             WHERE limit_name = p_names[i] AND limit_key = p_keys[i] AND slot = (
                   SELECT slot FROM pgbus_limit_slots WHERE limit_name = p_names[i] AND limit_key = p_keys[i]
                      AND slot <= p_caps[i] AND holder_run IS NULL AND holder_step IS NULL ORDER BY slot LIMIT 1)
            RETURNING slot INTO taken;
            IF taken IS NULL THEN  -- none given back: a new row while fewer than the capacity exist
                SELECT COALESCE(max(slot), 0) + 1 INTO taken FROM pgbus_limit_slots
                 WHERE limit_name = p_names[i] AND limit_key = p_keys[i];
                IF taken <= p_caps[i] THEN
                    INSERT INTO pgbus_limit_slots (limit_name, limit_key, slot, holder_run, holder_step, taken_at)
                    VALUES (p_names[i], p_keys[i], taken, CASE WHEN p_kinds[i] = 'run' THEN p_run END,
                            CASE WHEN p_kinds[i] = 'step' THEN p_step END, now());
                ELSE
                    taken := NULL;
                END IF;
            END IF;
        END IF;
        IF taken IS NULL THEN
            busy := i;
            EXIT;
        END IF;
        IF p_kinds[i] = 'run' THEN
            UPDATE pgbus_workflows SET holds_slot = true WHERE workflow_id = p_run AND NOT holds_slot;
        ELSE
            UPDATE pgbus_workflow_steps SET holds_slot = true WHERE id = p_step AND NOT holds_slot;
        END IF;
    END LOOP;
    IF busy IS NULL THEN
        UPDATE pgbus_workflow_steps SET blocked_since = NULL WHERE id = p_step AND blocked_since IS NOT NULL;
        RETURN NULL;
    END IF;
    -- in line: give back what it holds (the triggers grant it on), and its run waits
    UPDATE pgbus_workflow_steps SET blocked_on = p_names[busy], blocked_key = p_keys[busy],
           blocked_since = COALESCE(blocked_since, now()), blocked_priority = p_priority, holds_slot = false
     WHERE id = p_step;
    UPDATE pgbus_workflows SET status = 'waiting', updated_at = now(), holds_slot = false
     WHERE workflow_id = p_run AND status = 'ready';
    PERFORM pgbus_workflow_attention(p_run);  -- in line: waiting since now (the event's refresh agrees)
    -- a slot left free (a capacity raised): the first in line takes it, this attempt maybe
    PERFORM pgbus_grant_slots(p_names[busy], p_keys[busy]);
    RETURN ARRAY[p_names[busy], p_keys[busy]];
END
$$;

-- A run started when its class limit's key has no free slot, or has runs in line already, goes in line
-- at once (its first step due now): no job is sent for it, and a given-back slot sends it as it would
-- any waiter. Under the key's lock, as every take and give-back. Returns whether it is in line (a
-- free slot the runs ahead of it could not take goes to the first waiting run, which may be this one).
CREATE FUNCTION pgbus_line_up(p_run uuid, p_name text, p_key text, p_cap integer, p_priority integer)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    first record;
BEGIN
    SELECT s.id, s.step_name, s.attempt INTO first FROM pgbus_workflow_steps s
     WHERE s.workflow_id = p_run AND s.status = 'scheduled' AND s.scheduled_at <= now() AND NOT s.wait_until_pending;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(pgbus_limit_lock(p_name, p_key));
    IF (SELECT count(*) FROM pgbus_limit_slots WHERE limit_name = p_name AND limit_key = p_key AND slot <= p_cap
          AND (holder_run IS NOT NULL OR holder_step IS NOT NULL)) < p_cap
       AND NOT EXISTS (SELECT 1 FROM pgbus_workflow_steps WHERE blocked_on = p_name AND blocked_key = p_key
                         AND status = 'scheduled') THEN
        RETURN false;
    END IF;
    UPDATE pgbus_workflow_steps SET blocked_on = p_name, blocked_key = p_key, blocked_since = now(),
           blocked_priority = p_priority WHERE id = first.id;
    UPDATE pgbus_workflows SET status = 'waiting', updated_at = now() WHERE workflow_id = p_run;
    INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details)
    VALUES (p_run, 'slot_waiting', 'system', first.id, first.step_name, first.attempt,
            jsonb_build_object('limit', p_name, 'key', p_key));
    PERFORM pgbus_workflow_attention(p_run);
    -- in line behind runs that cannot take a slot now (paused) while one is free: the first waiting
    -- run takes it, this one maybe (it is then ready, its job sent as any woken step's)
    PERFORM pgbus_grant_slots(p_name, p_key);
    RETURN EXISTS (SELECT 1 FROM pgbus_workflow_steps WHERE id = first.id AND blocked_on IS NOT NULL);
END
$$;

-- A rate's start at its claim: at most capacity starts in any window of per_seconds, counted from
-- the starts themselves (clock_timestamp() under the rate row's lock: the step's started_at). A
-- claim the rate's wake-up woke (p_woken) uses what that wake-up promised; any other claim queues
-- behind the waiters. Returns (started, the moment the attempt's run waits until: its wake-up's).
CREATE FUNCTION pgbus_take_rate(p_step bigint, p_run uuid, p_name text, p_cap integer, p_per double precision,
                                p_priority integer, p_woken boolean, OUT started timestamptz, OUT wake_at timestamptz,
                                OUT wake_new boolean) LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t timestamptz;
    live timestamptz[];
    v_promised integer;
    waiters integer;
    need integer;
    idx integer;
BEGIN
    INSERT INTO pgbus_limits (name, kind, capacity, per_seconds) VALUES (p_name, 'rate', p_cap, p_per)
    ON CONFLICT (kind, name) DO NOTHING;
    SELECT * INTO r FROM pgbus_limits WHERE kind = 'rate' AND name = p_name FOR UPDATE;
    IF r.capacity <> p_cap OR r.per_seconds IS DISTINCT FROM p_per THEN
        UPDATE pgbus_limits SET capacity = p_cap, per_seconds = p_per, updated_at = now()
         WHERE kind = 'rate' AND name = p_name;
    END IF;
    t := clock_timestamp();
    live := ARRAY(SELECT x FROM unnest(r.starts) x WHERE x > t - make_interval(secs => p_per) ORDER BY x);
    v_promised := CASE WHEN r.promised_until > t THEN r.promised ELSE 0 END;
    IF p_woken AND v_promised > 0 THEN
        v_promised := v_promised - 1;
    ELSIF NOT p_woken AND EXISTS (SELECT 1 FROM pgbus_workflow_steps WHERE blocked_on = p_name
                                      AND blocked_key IS NULL AND status = 'scheduled' AND id <> p_step) THEN
        v_promised := cardinality(live) + p_cap;  -- behind the waiters
    END IF;
    IF cardinality(live) + v_promised < p_cap THEN
        UPDATE pgbus_limits SET starts = live || t, promised = v_promised
         WHERE kind = 'rate' AND name = p_name;
        UPDATE pgbus_workflow_steps SET blocked_since = NULL WHERE id = p_step AND blocked_since IS NOT NULL;
        started := t;
        RETURN;
    END IF;
    UPDATE pgbus_workflow_steps SET blocked_on = p_name, blocked_key = NULL,
           blocked_since = COALESCE(blocked_since, now()), blocked_priority = p_priority, holds_slot = false
     WHERE id = p_step;
    UPDATE pgbus_workflows SET status = 'waiting', updated_at = now(), holds_slot = false
     WHERE workflow_id = p_run AND status = 'ready';
    PERFORM pgbus_workflow_attention(p_run);
    -- wake when as many starts have left the window as there are waiters (at most capacity)
    SELECT count(*) INTO waiters FROM pgbus_workflow_steps WHERE blocked_on = p_name AND blocked_key IS NULL
       AND status = 'scheduled';
    need := LEAST(GREATEST(waiters, 1), p_cap);
    idx := cardinality(live) + (CASE WHEN r.promised_until > t THEN r.promised ELSE 0 END) - p_cap + need;
    wake_at := CASE WHEN idx < 1 OR cardinality(live) = 0 THEN t
                    ELSE live[LEAST(idx, cardinality(live))] + make_interval(secs => p_per) END;
    wake_new := r.wake_at IS NULL OR r.wake_at < t - interval '30 seconds' OR r.wake_at > wake_at;
    IF wake_new THEN
        UPDATE pgbus_limits SET wake_at = pgbus_take_rate.wake_at WHERE kind = 'rate' AND name = p_name;
    ELSE
        wake_at := r.wake_at;
    END IF;
END
$$;

-- A rate's wake-up: wake as many waiters as the window has room for now, first in line first, and
-- promise them their starts for 30 seconds. Returns the woken steps and, when waiters remain, the
-- moment of the next wake-up.
CREATE FUNCTION pgbus_wake_rate(p_name text, OUT woken bigint[], OUT next_at timestamptz) LANGUAGE plpgsql AS $$
DECLARE
    r record;
    t timestamptz;
    live timestamptz[];
    v_promised integer;
    room integer;
    left_behind integer;
BEGIN
    SELECT * INTO r FROM pgbus_limits WHERE kind = 'rate' AND name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        woken := '{}';
        RETURN;
    END IF;
    t := clock_timestamp();
    live := ARRAY(SELECT x FROM unnest(r.starts) x WHERE x > t - make_interval(secs => r.per_seconds) ORDER BY x);
    v_promised := CASE WHEN r.promised_until > t THEN r.promised ELSE 0 END;
    room := GREATEST(r.capacity - cardinality(live) - v_promised, 0);
    WITH line AS (
        SELECT s.id FROM pgbus_workflow_steps s JOIN pgbus_workflows w ON w.workflow_id = s.workflow_id
         WHERE s.blocked_on = p_name AND s.blocked_key IS NULL AND s.status = 'scheduled' AND w.status = 'waiting'
         ORDER BY s.blocked_priority DESC, s.id LIMIT room FOR UPDATE OF s, w SKIP LOCKED
    ), moved AS (
        UPDATE pgbus_workflow_steps s SET blocked_on = NULL, sends = s.sends + 1,
               job_id = 'pgbus-step-' || s.id || '-send' || (s.sends + 1), enqueued_at = now(),
               scheduled_at = now()
          FROM line WHERE s.id = line.id RETURNING s.id, s.workflow_id, s.step_name, s.attempt
    ), runs AS (
        UPDATE pgbus_workflows w SET status = 'ready', updated_at = now() FROM moved
         WHERE w.workflow_id = moved.workflow_id AND w.status = 'waiting' RETURNING w.workflow_id
    ), audit AS (
        INSERT INTO pgbus_workflow_events (workflow_id, event, actor, step_id, step_name, attempt, details)
        SELECT workflow_id, 'slot_granted', 'system', id, step_name, attempt, jsonb_build_object('rate', p_name)
          FROM moved
    )
    SELECT COALESCE(array_agg(id ORDER BY id), '{}') INTO woken FROM moved;
    PERFORM pgbus_workflow_attention(s.workflow_id) FROM pgbus_workflow_steps s WHERE s.id = ANY(woken);
    SELECT count(*) INTO left_behind FROM pgbus_workflow_steps WHERE blocked_on = p_name AND blocked_key IS NULL
       AND status = 'scheduled';
    IF left_behind > 0 THEN
        next_at := CASE WHEN cardinality(live) = 0 THEN t + make_interval(secs => r.per_seconds)
                        ELSE live[LEAST(GREATEST(cardinality(live) + v_promised + cardinality(woken) - r.capacity
                                                 + LEAST(left_behind, r.capacity), 1), cardinality(live))]
                             + make_interval(secs => r.per_seconds) END;
        IF next_at <= t THEN
            next_at := t + make_interval(secs => r.per_seconds);
        END IF;
    END IF;
    UPDATE pgbus_limits SET promised = v_promised + cardinality(woken), promised_until = t + interval '30 seconds',
           wake_at = next_at
     WHERE kind = 'rate' AND name = p_name;
END
$$;

-- Telling a person (0019, docs/notifications.md): notices noticed by triggers, the webhook outbox,
-- each target's memory of each attention group, and the deliveries.
ALTER TABLE pgbus_workflows
    ADD COLUMN attention_notified boolean NOT NULL DEFAULT false; -- the sweep saw it past its threshold

-- The overdue and waiting_overdue runs the sweep has not announced yet, oldest first.
CREATE INDEX pgbus_workflows_due_unannounced ON pgbus_workflows (attention_reason, attention_since)
    WHERE attention_reason IN ('overdue', 'waiting_overdue') AND NOT attention_notified;

-- Each webhook target as last declared by a process with PGBUS_WEBHOOKS: which notices it wants
-- written to the outbox ('attention' stands for run_needs_attention and run_back_to_normal).
CREATE TABLE pgbus_notify_targets (
    name        text PRIMARY KEY,
    events      text[] NOT NULL,
    classes     text[],                       -- NULL: every class
    declared_at timestamptz NOT NULL DEFAULT now()
);

-- The outbox: notices a webhook target wants, not yet turned into deliveries by the pump.
CREATE TABLE pgbus_notices (
    id             bigserial PRIMARY KEY,
    kind           text NOT NULL CHECK (kind IN ('run_needs_attention', 'run_back_to_normal', 'run_finished',
                                                 'run_cancelled', 'step_failed')),
    workflow_id    uuid NOT NULL,
    workflow_class text NOT NULL,
    step           text,
    reason         text,
    error_class    text,
    error_message  text,
    attempt        integer,
    created_at     timestamptz NOT NULL DEFAULT now()
);

-- What each target was last told about each attention group: the digest's memory.
CREATE TABLE pgbus_notify_groups (
    target         text NOT NULL,
    workflow_class text NOT NULL,
    step           text NOT NULL,
    reason         text NOT NULL,
    error_class    text NOT NULL DEFAULT '',
    is_open        boolean NOT NULL DEFAULT false,  -- its last message said the group holds runs
    told_runs      bigint NOT NULL DEFAULT 0,       -- the runs the last message counted
    entered        bigint NOT NULL DEFAULT 0,       -- runs that entered since the last message
    told_at        timestamptz,                     -- the last message (NULL: none yet)
    due_at         timestamptz,                     -- a message waits for the interval until then
    PRIMARY KEY (target, workflow_class, step, reason, error_class)
);
CREATE INDEX pgbus_notify_groups_due ON pgbus_notify_groups (due_at) WHERE due_at IS NOT NULL;

-- One message to one target: sent by an RQ job, retried with backoff for a day.
CREATE TABLE pgbus_deliveries (
    id              bigserial PRIMARY KEY,
    target          text NOT NULL,
    event_type      text NOT NULL,              -- attention_group.opened, run.finished, test ...
    webhook_id      text NOT NULL UNIQUE,       -- Standard Webhooks' webhook-id: the same on every try
    payload         jsonb NOT NULL,              -- the body sent
    data            jsonb NOT NULL,              -- what it says, for the page to say it in the viewer's language
    status          text NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_until     timestamptz,                -- a try in progress owns it until then
    response_status integer,
    response_body   text,
    last_error      text,
    requested_by    text,                       -- the actor of a test message
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz
);
CREATE INDEX pgbus_deliveries_due ON pgbus_deliveries (next_attempt_at) WHERE status IN ('pending', 'sending');
CREATE INDEX pgbus_deliveries_recent ON pgbus_deliveries (target, id);
CREATE INDEX pgbus_deliveries_finished ON pgbus_deliveries (updated_at) WHERE status IN ('delivered', 'failed');

-- One notice: a line of JSON appended to the transaction's setting pgbus.notices, and an outbox row
-- when a declared target wants it.
CREATE FUNCTION pgbus_notice(p_kind text, p_run pgbus_workflows, p_step text, p_reason text, p_error_class text,
                             p_error_message text, p_attempt integer) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    kept boolean := false;
BEGIN
    IF EXISTS (SELECT 1 FROM pgbus_notify_targets t
                WHERE (p_kind = ANY (t.events)
                       OR (p_kind IN ('run_needs_attention', 'run_back_to_normal') AND 'attention' = ANY (t.events)))
                  AND (t.classes IS NULL OR p_run.workflow_class = ANY (t.classes))) THEN
        INSERT INTO pgbus_notices (kind, workflow_id, workflow_class, step, reason, error_class, error_message, attempt)
        VALUES (p_kind, p_run.workflow_id, p_run.workflow_class, p_step, p_reason, p_error_class,
                left(p_error_message, 2000), p_attempt);
        kept := true;
    END IF;
    PERFORM set_config('pgbus.notices', COALESCE(current_setting('pgbus.notices', true), '')
        || json_build_object('kind', p_kind, 'run', p_run.workflow_id, 'class', p_run.workflow_class,
                             'step', p_step, 'reason', p_reason, 'error_class', p_error_class,
                             'error', left(p_error_message, 2000), 'attempt', p_attempt, 'outbox', kept)::text
        || E'\n', true);
END
$$;

-- A run needs a person when it is paused (stalled, paused_error, paused_manual) or the sweep saw it past
-- its threshold (attention_notified); its attention group is (class, current step, reason, error class).
CREATE FUNCTION pgbus_workflows_notice() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    old_in boolean := (OLD.status = 'paused' AND OLD.attention_reason IN ('stalled', 'paused_error', 'paused_manual'))
                      OR OLD.attention_notified;
    new_in boolean := (NEW.status = 'paused' AND NEW.attention_reason IN ('stalled', 'paused_error', 'paused_manual'))
                      OR NEW.attention_notified;
    moved boolean := (OLD.current_step, OLD.attention_reason, COALESCE(OLD.attention_error_class, ''))
                     IS DISTINCT FROM (NEW.current_step, NEW.attention_reason, COALESCE(NEW.attention_error_class, ''));
    failure record;
BEGIN
    IF old_in AND (NOT new_in OR moved) THEN
        PERFORM pgbus_notice('run_back_to_normal', OLD, OLD.current_step, OLD.attention_reason,
                             OLD.attention_error_class, NULL, NULL);
    END IF;
    IF new_in AND (NOT old_in OR moved) THEN
        SELECT s.error_message, s.attempt INTO failure FROM pgbus_workflow_steps s WHERE s.id = NEW.attention_step_id;
        PERFORM pgbus_notice('run_needs_attention', NEW, NEW.current_step, NEW.attention_reason,
                             NEW.attention_error_class, failure.error_message, failure.attempt);
    END IF;
    IF NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('finished', 'cancelled') THEN
        PERFORM pgbus_notice(CASE NEW.status WHEN 'finished' THEN 'run_finished' ELSE 'run_cancelled' END, NEW,
                             NEW.current_step, NULL, NULL, NULL, NULL);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER pgbus_workflows_notice
    AFTER UPDATE ON pgbus_workflows FOR EACH ROW
    WHEN ((OLD.status IS DISTINCT FROM NEW.status AND NEW.status IN ('finished', 'cancelled'))
          OR ((OLD.status = 'paused' OR NEW.status = 'paused' OR OLD.attention_notified OR NEW.attention_notified)
              AND (OLD.status, OLD.current_step, OLD.attention_reason, OLD.attention_error_class,
                   OLD.attention_notified)
                  IS DISTINCT FROM (NEW.status, NEW.current_step, NEW.attention_reason, NEW.attention_error_class,
                                    NEW.attention_notified)))
    EXECUTE FUNCTION pgbus_workflows_notice();

-- A run the sweep announced stops being announced once its attention columns change: a new wait, a
-- new step, a pause, an end. (A BEFORE trigger only on announced rows: the hot path never calls it.)
CREATE FUNCTION pgbus_workflows_announced() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (OLD.attention_reason, OLD.attention_since, OLD.current_step, OLD.attention_error_class)
       IS DISTINCT FROM (NEW.attention_reason, NEW.attention_since, NEW.current_step, NEW.attention_error_class)
       OR NEW.status NOT IN ('ready', 'waiting') THEN
        NEW.attention_notified := false;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER pgbus_workflows_announced
    BEFORE UPDATE ON pgbus_workflows FOR EACH ROW WHEN (OLD.attention_notified AND NEW.attention_notified)
    EXECUTE FUNCTION pgbus_workflows_announced();

-- A step attempt that failed (its error policy decides what follows: a retry, a pause, a cancel).
CREATE FUNCTION pgbus_workflow_steps_notice() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    run pgbus_workflows;
BEGIN
    SELECT * INTO run FROM pgbus_workflows w WHERE w.workflow_id = NEW.workflow_id;
    IF FOUND THEN
        PERFORM pgbus_notice('step_failed', run, NEW.step_name, NULL, NEW.error_class, NEW.error_message,
                             NEW.attempt);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER pgbus_workflow_steps_notice
    AFTER UPDATE ON pgbus_workflow_steps FOR EACH ROW
    WHEN (NEW.status = 'failed' AND OLD.status IS DISTINCT FROM 'failed')
    EXECUTE FUNCTION pgbus_workflow_steps_notice();
