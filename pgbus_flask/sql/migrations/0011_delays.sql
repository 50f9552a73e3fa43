-- 0011: durable delays (docs/delays.md).

-- wait_until_pending: this scheduled attempt's moment comes from its step's wait_until, not
-- evaluated yet: its own job evaluates it in a worker, with no lock held, before it claims.
-- next_not_before: the moment this step's code asked the step after it to wait for
-- (self.sleep / self.sleep_until), kept so that a resume or a fan-out finishing still honours it.
ALTER TABLE pgbus_workflow_steps
    ADD COLUMN wait_until_pending boolean NOT NULL DEFAULT false,
    ADD COLUMN next_not_before timestamptz;
