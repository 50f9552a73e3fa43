-- 0012: a run page reads its signals, child runs and fan-out batches a page at a time (keyset, by id).
--
-- Each page is one range of an index ending in id: signals have pgbus_workflow_signals_run already;
-- child runs get one of their own (only child rows carry a parent, so the index holds only them), and
-- the batches' index on the run gains the id.
CREATE INDEX pgbus_workflows_children
    ON pgbus_workflows (parent_workflow_id, id) WHERE parent_workflow_id IS NOT NULL;
DROP INDEX pgbus_batches_run;
CREATE INDEX pgbus_batches_run ON pgbus_batches (workflow_id, id);
