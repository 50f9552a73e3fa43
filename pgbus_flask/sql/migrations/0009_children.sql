-- 0009: child workflows (a step that returns self.start_child(...)) and the step that waits on them.
--
-- A child run names its parent run and the parent's step; the parent's waiting attempt lists its
-- children's ids and what a cancelled child does to it. Both columns are NULL for every other row,
-- so adding them rewrites nothing and the partial index holds only children.

ALTER TABLE pgbus_workflows
    ADD COLUMN parent_workflow_id uuid,
    ADD COLUMN parent_step_name   text;
-- The ongoing children of a run (a cancelled parent cancels them; the sweep looks for orphans).
CREATE INDEX pgbus_workflows_parent
    ON pgbus_workflows (parent_workflow_id)
    WHERE parent_workflow_id IS NOT NULL AND status IN ('ready', 'running', 'waiting', 'paused');

ALTER TABLE pgbus_workflow_steps
    ADD COLUMN child_ids        uuid[],
    ADD COLUMN on_child_failure text CHECK (on_child_failure IN ('fail', 'continue'));
-- The steps waiting on children (the sweep settles those whose children all ended).
CREATE INDEX pgbus_workflow_steps_waiting_children
    ON pgbus_workflow_steps (waiting_since) WHERE status = 'waiting' AND child_ids IS NOT NULL;
