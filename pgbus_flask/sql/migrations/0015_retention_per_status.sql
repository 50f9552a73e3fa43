-- 0015: finished and cancelled runs are kept for times of their own (PGBUS_RETENTION_FINISHED,
-- PGBUS_RETENTION_CANCELLED), so the retention sweep looks for each status apart.
--
-- One partial index per status, on updated_at: each DELETE batch reads the oldest rows of its status
-- only (with one index for both, cancelled runs kept for a year would be walked past by every
-- search for finished runs past 30 days), and a sweep with nothing to delete costs two index probes.
-- They replace pgbus_workflows_terminal_updated, which held the same rows.
CREATE INDEX pgbus_workflows_finished_updated ON pgbus_workflows (updated_at) WHERE status = 'finished';
CREATE INDEX pgbus_workflows_cancelled_updated ON pgbus_workflows (updated_at) WHERE status = 'cancelled';
DROP INDEX pgbus_workflows_terminal_updated;
