-- 0018: the W3C traceparent of the producer span start() opened, when the app traces with
-- OpenTelemetry (pgbus_flask/tracing.py): each step attempt's span links to it. NULL when the run
-- was started untraced.

ALTER TABLE pgbus_workflows ADD COLUMN traceparent text;
