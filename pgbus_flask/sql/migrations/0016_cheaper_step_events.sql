-- 0016: the insights trigger looks up by key, once per event that counts.
--
-- 0008's trigger ran once per INSERT statement on the audit trail and joined its transition table
-- to pgbus_workflows and pgbus_workflow_steps. Its plan is made once per connection, when the
-- tables may be small: a seq scan and hash join, kept while the tables grew, so a step's events
-- scanned every run and step row (a quarter of PostgreSQL's CPU per step in bench.step_costs).
-- Now a row trigger fires only for the events that count (its WHEN, checked without calling any
-- function: step_started, step_scheduled of a later attempt and the rest fire nothing), and reads one
-- row by key: the step (its class is on it) or the run. enable_seqscan off in the function keeps
-- those reads index probes whatever the tables' size when the plan was made. What it adds to
-- pgbus_insight_deltas is what 0008's added.
DROP TRIGGER pgbus_insights_from_events ON pgbus_workflow_events;
DROP FUNCTION pgbus_insights_from_events();

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
