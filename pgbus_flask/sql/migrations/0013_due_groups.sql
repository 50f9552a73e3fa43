-- 0013: the overdue and waiting_overdue runs are counted without reading them all.
--
-- pgbus_workflows_attention_due (reason, since) made every read of the due runs one range, as long as
-- the runs it held: 740 ms for the attention groups at 4.5 M runs when 40% of them wait too long. This
-- index leads with the attention group (reason, class, step, error class), then attention_since and id:
-- the groups are found by a skip scan (one probe a group), and each group's overdue runs are one range
-- in the order the page wants them (oldest first), so a read counts at most PGBUS's cap of them
-- (queries.COUNT_CAP) and reads its first and newest as the two ends of that range. The error class itself
-- is included so that those counts are index-only scans (PostgreSQL's planner wants every column a query
-- names in the index, the one inside COALESCE too). It replaces the old index (no read needs it any
-- more), so a transition still updates one due index.
CREATE INDEX pgbus_workflows_attention_due_groups
    ON pgbus_workflows (attention_reason, workflow_class, current_step, (COALESCE(attention_error_class, '')),
                        attention_since, id) INCLUDE (attention_error_class)
    WHERE attention_reason IN ('overdue', 'waiting_overdue');
DROP INDEX pgbus_workflows_attention_due;
