-- `outboxctl unknown resend` sends exactly the one recipient named: the
-- decision stays pending (resent_at NULL) until the poller has run the
-- reopened event for that recipient alone, and is then marked done in the
-- same transaction as the event.
ALTER TABLE notification_resends ADD COLUMN resent_at timestamptz;
CREATE INDEX notification_resends_pending ON notification_resends (outbox_event_id) WHERE resent_at IS NULL;
GRANT UPDATE (resent_at) ON notification_resends TO booking_app;
