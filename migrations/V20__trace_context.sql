-- One trace per booking, across the outbox (telemetry/trace.rs): the W3C
-- trace context of the request that wrote the event, in the same
-- transaction. Every later step names it: the poller's send spans (as a
-- link), SES's events about the message (its `trace` tag), the logs.
-- Nullable, no default: adding it rewrites nothing. NOT VALID: the check
-- holds for every new row without a scan of the old ones (all NULL).
ALTER TABLE outbox_events ADD COLUMN traceparent text;
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_traceparent_is_w3c
    CHECK (traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$') NOT VALID;
