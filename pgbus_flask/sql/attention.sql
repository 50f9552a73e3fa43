-- The attention columns of each run and the count rows (pgbus_flask/attention.py). The SQL function
-- pgbus_workflow_attention(uuid) (migrations 0004, 0007) computes a run's columns from its row and
-- latest step and writes them only when they change.

-- name: attention_refresh
-- Refresh the attention columns of the runs whose workflow ids are %s (a list).
SELECT pgbus_workflow_attention(run_id) FROM unnest(%s::uuid[]) AS run_id;

-- name: attention_refresh_all
-- Refresh every run that is ongoing or has attention columns (a terminal run's are empty): the number of runs whose columns changed.
SELECT count(*) AS changed FROM pgbus_workflows
WHERE (status IN ('ready', 'running', 'waiting', 'paused') OR attention_reason IS NOT NULL)
  AND pgbus_workflow_attention(workflow_id);

-- name: counts_clear
-- Delete every count row (before counting every run again).
DELETE FROM pgbus_run_counts;

-- name: counts_recount
-- Count every run again from scratch (after the count triggers were off, or rows were copied in).
INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
SELECT workflow_class, status,
       CASE WHEN status IN ('ready', 'running', 'waiting', 'paused') THEN current_step ELSE '' END,
       CASE WHEN status = 'paused' THEN COALESCE(attention_reason, '') ELSE '' END,
       CASE WHEN status = 'paused' THEN COALESCE(attention_error_class, '') ELSE '' END,
       count(*)
FROM pgbus_workflows GROUP BY 1, 2, 3, 4, 5;

-- name: counts_fold
-- One row per key for every key with several: the sum of their runs (none when it is 0); rows added meanwhile are not in its snapshot, so it neither deletes nor counts them.
WITH many AS (
    SELECT workflow_class, status, step, attention_reason, error_class FROM pgbus_run_counts
    GROUP BY 1, 2, 3, 4, 5 HAVING count(*) > 1
), folded AS (
    DELETE FROM pgbus_run_counts c USING many m
    WHERE (c.workflow_class, c.status, c.step, c.attention_reason, c.error_class)
        = (m.workflow_class, m.status, m.step, m.attention_reason, m.error_class)
    RETURNING c.workflow_class, c.status, c.step, c.attention_reason, c.error_class, c.runs
)
INSERT INTO pgbus_run_counts (workflow_class, status, step, attention_reason, error_class, runs)
SELECT workflow_class, status, step, attention_reason, error_class, sum(runs) FROM folded
GROUP BY 1, 2, 3, 4, 5 HAVING sum(runs) <> 0;

-- name: attention_refresh_one
-- Refresh the attention columns of the run whose workflow id is %s (a transaction's events nearly always name one run).
SELECT pgbus_workflow_attention(%s::uuid);
