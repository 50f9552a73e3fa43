-- 0001: the first schema (tables, indexes): docs/architecture.md, "The rows".

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
    finished_at       timestamptz
);
CREATE UNIQUE INDEX pgbus_workflows_idempotency_key
    ON pgbus_workflows (workflow_class, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX pgbus_workflows_one_ongoing_per_subject
    ON pgbus_workflows (workflow_class, subject_type, subject_id)
    WHERE subject_type IS NOT NULL AND status IN ('ready', 'running', 'waiting', 'paused');
CREATE INDEX pgbus_workflows_ongoing
    ON pgbus_workflows (status, workflow_class) WHERE status IN ('ready', 'running', 'waiting', 'paused');
CREATE INDEX pgbus_workflows_class_status ON pgbus_workflows (workflow_class, status, id);
CREATE INDEX pgbus_workflows_subject ON pgbus_workflows (subject_type, subject_id);
CREATE INDEX pgbus_workflows_terminal_updated
    ON pgbus_workflows (updated_at) WHERE status IN ('finished', 'cancelled');

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
    UNIQUE (workflow_id, step_name, attempt)
);
CREATE INDEX pgbus_workflow_steps_latest ON pgbus_workflow_steps (workflow_id, id DESC);
CREATE INDEX pgbus_workflow_steps_in_progress
    ON pgbus_workflow_steps (stall_at) WHERE status = 'in_progress';
CREATE INDEX pgbus_workflow_steps_scheduled
    ON pgbus_workflow_steps (scheduled_at) WHERE status = 'scheduled';
CREATE INDEX pgbus_workflow_steps_wait_deadline
    ON pgbus_workflow_steps (timeout_at) WHERE status = 'waiting' AND timeout_at IS NOT NULL;

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
CREATE INDEX pgbus_batches_run ON pgbus_batches (workflow_id);

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
    PRIMARY KEY (batch_id, position)
);
CREATE INDEX pgbus_batch_children_pending
    ON pgbus_batch_children (batch_id) WHERE status = 'pending';
