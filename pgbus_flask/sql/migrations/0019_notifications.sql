-- 0019: telling a person (docs/notifications.md).
--
-- A change that a person may want to hear about (a run entering or leaving an attention group, a run
-- finished or cancelled, a step attempt failed) is noticed by a trigger on the row that moved, in the
-- transaction that moves it, whichever code moves it. The trigger leaves one line of JSON per notice
-- in the transaction's setting pgbus.notices (the process that commits reads it before its COMMIT and
-- sends pgbus_flask.signals after), and, when a declared webhook target wants that kind of notice,
-- writes a row to the outbox pgbus_notices in the same transaction. The pump (pgbus_flask/notify)
-- turns outbox rows into deliveries, at most one message per attention group and target per
-- PGBUS_NOTIFY_INTERVAL, and RQ jobs send them.
--
-- A paused run needs a person at once; an overdue or waiting_overdue run once its attention_since
-- is older than its threshold, which only the clock makes true: the sweep marks such runs
-- attention_notified (the "absence" notice), and that mark is the run's state of needing a person
-- until its attention columns change.

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
