-- 0005: every send of a step has a job id of its own, and the sweep backs off a step whose job Redis keeps losing.

-- sends: jobs sent for this attempt so far; the job id is pgbus-step-<id> for the first and
-- pgbus-step-<id>-send<sends> after that, so a new send never meets a job id RQ already holds.
-- resends: how many of them the sweep sent because Redis had lost the one before; the next
-- resend waits PGBUS_STALL_THRESHOLD x 2^resends (at most 16x) after the last send.
ALTER TABLE pgbus_workflow_steps
    ADD COLUMN sends integer NOT NULL DEFAULT 1,
    ADD COLUMN resends integer NOT NULL DEFAULT 0;
