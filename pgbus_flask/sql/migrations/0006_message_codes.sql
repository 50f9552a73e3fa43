-- 0006: messages the engine writes (a stalled attempt, a wait that timed out, failed or lost
-- child jobs, an unknown class or step) keep a code and its parameters beside the English
-- text, so the dashboard can say them in the viewer's language (pgbus_flask/messages.py).
-- Errors raised by the app's own code have neither: their text is shown as it is.
ALTER TABLE pgbus_workflow_steps
    ADD COLUMN error_code text,
    ADD COLUMN error_params jsonb;
ALTER TABLE pgbus_batch_children
    ADD COLUMN error_code text,
    ADD COLUMN error_params jsonb;
