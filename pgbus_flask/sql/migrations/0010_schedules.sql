-- 0010: recurring starts (pgbus_flask/schedules.py). One row per workflow class that declares a
-- schedule, written by the sweep from the classes it registers; the sweep starts one run per due
-- tick (idempotency key schedule:<class>:<tick>) and moves last_tick and next_tick in the same
-- transaction. A class the sweeper no longer declares keeps its row, marked undeclared_at.

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
