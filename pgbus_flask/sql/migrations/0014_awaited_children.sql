-- 0014: the sweep's lost fan-out children read only the children a step still awaits.
--
-- A batch closed before all its children were recorded (its run cancelled, its step skipped) keeps
-- those children pending for good: their jobs may still run and record, but nothing awaits them.
-- They stayed in pgbus_batch_children_pending_enqueued, sent long before the cutoff, and every sweep
-- read them all before its join to open batches dropped them. Closing a batch now clears
-- `awaited` on its pending children (close_open_batches), and the index holds only awaited ones,
-- so a sweep reads children only when some are due.
ALTER TABLE pgbus_batch_children ADD COLUMN awaited boolean NOT NULL DEFAULT true;
UPDATE pgbus_batch_children c SET awaited = false FROM pgbus_batches b
WHERE b.id = c.batch_id AND b.status <> 'open' AND c.status = 'pending';
DROP INDEX pgbus_batch_children_pending_enqueued;
CREATE INDEX pgbus_batch_children_awaited_enqueued
    ON pgbus_batch_children (enqueued_at) WHERE status = 'pending' AND awaited;
