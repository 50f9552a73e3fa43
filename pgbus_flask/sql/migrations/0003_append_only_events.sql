-- 0003: the audit trail is append-only. PostgreSQL refuses to change an event, and to delete
-- one unless its run is being deleted in the same statement (the retention sweep removing a
-- whole run, whose events go with it through ON DELETE CASCADE).

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
