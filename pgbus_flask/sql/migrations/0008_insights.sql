-- 0008: insights per workflow class (pgbus_flask/insights.py), from roll-ups, never from a scan of
-- every step: at a million runs a page reads a few thousand rows at most.
--
-- 1. pgbus_run_counts counts ongoing runs (ready, running, waiting, paused) by their current step
--    too: the pipeline ("how many runs sit at each step now, by status"). Finished and cancelled
--    runs keep step ''; paused runs keep their attention group as before.

CREATE OR REPLACE FUNCTION pgbus_workflows_count_update() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE FUNCTION pgbus_workflows_count_rows() RETURNS trigger LANGUAGE plpgsql AS $$
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

CREATE OR REPLACE TRIGGER pgbus_workflows_count_update
    AFTER UPDATE ON pgbus_workflows FOR EACH ROW
    WHEN (OLD.workflow_class IS DISTINCT FROM NEW.workflow_class OR OLD.status IS DISTINCT FROM NEW.status
          OR (NEW.status IN ('ready', 'running', 'waiting', 'paused')
              AND OLD.current_step IS DISTINCT FROM NEW.current_step)
          OR (NEW.status = 'paused'
              AND (OLD.attention_reason, OLD.attention_error_class)
                  IS DISTINCT FROM (NEW.attention_reason, NEW.attention_error_class)))
    EXECUTE FUNCTION pgbus_workflows_count_update();

-- Count again with the new key; no run moves meanwhile.
LOCK TABLE pgbus_workflows IN SHARE MODE;
DELETE FROM pgbus_run_counts;
INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
SELECT workflow_class, status,
       CASE WHEN status IN ('ready', 'running', 'waiting', 'paused') THEN current_step ELSE '' END,
       CASE WHEN status = 'paused' THEN COALESCE(attention_reason, '') ELSE '' END,
       CASE WHEN status = 'paused' THEN COALESCE(attention_error_class, '') ELSE '' END,
       count(*)
FROM pgbus_workflows GROUP BY 1, 2, 3, 4, 5;

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

CREATE FUNCTION pgbus_insights_from_events() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pgbus_insight_deltas (workflow_class, bucket, step, kind, label, bin, n, max_ms)
    SELECT w.workflow_class, date_bin(interval '5 minutes', e.created_at, timestamptz '2000-01-01 00:00+00'), '',
           e.event, '', 0::smallint, 1, NULL::double precision
    FROM added e JOIN pgbus_workflows w ON w.workflow_id = e.workflow_id
    WHERE e.event IN ('started', 'finished', 'cancelled')
    UNION ALL
    SELECT w.workflow_class, date_bin(interval '1 hour', w.created_at, timestamptz '2000-01-01 00:00+00'),
           CASE WHEN e.event = 'step_scheduled' THEN e.step_name ELSE '' END,
           CASE WHEN e.event = 'step_scheduled' THEN 'reached' ELSE 'run_' || e.event END, '', 0::smallint, 1, NULL
    FROM added e JOIN pgbus_workflows w ON w.workflow_id = e.workflow_id
    WHERE e.event IN ('finished', 'cancelled') OR (e.event = 'step_scheduled' AND e.attempt = 1)
    UNION ALL
    SELECT w.workflow_class,
           date_bin(CASE WHEN v.kind = 'attempt' THEN interval '5 minutes' ELSE interval '1 hour' END, s.finished_at,
                    timestamptz '2000-01-01 00:00+00'),
           s.step_name, v.kind, v.label, v.bin, 1, v.ms
    FROM added e
    JOIN pgbus_workflow_steps s ON s.id = e.step_id
    JOIN pgbus_workflows w ON w.workflow_id = e.workflow_id
    CROSS JOIN LATERAL (SELECT 1000 * extract(epoch FROM s.finished_at - s.started_at)::double precision AS run_ms,
                               1000 * extract(epoch FROM greatest(s.started_at - s.scheduled_at, interval '0'))
                                   ::double precision AS wait_ms) m
    CROSS JOIN LATERAL (VALUES
        (true, 'attempt', CASE WHEN e.event = 'step_completed' THEN 'completed' ELSE 'failed' END, 0::smallint,
         NULL::double precision),
        (e.event = 'step_failed', 'error', COALESCE(s.error_class, ''), 0::smallint, NULL),
        (s.started_at IS NOT NULL, 'duration', '', pgbus_insight_bin(m.run_ms), m.run_ms),
        (s.started_at IS NOT NULL, 'wait', '', pgbus_insight_bin(m.wait_ms), m.wait_ms)
    ) AS v(keep, kind, label, bin, ms)
    WHERE e.event IN ('step_completed', 'step_failed') AND s.finished_at IS NOT NULL AND v.keep;
    RETURN NULL;
END
$$;

CREATE TRIGGER pgbus_insights_from_events
    AFTER INSERT ON pgbus_workflow_events REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION pgbus_insights_from_events();
