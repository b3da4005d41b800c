-- The booking lifecycle: full updates through PATCH write BOOKING_UPDATED
-- (BOOKING_RESCHEDULED rows already in an outbox stay valid and are still
-- dispatched), and superseded notifications are recorded.
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_event_type_check;
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_event_type_check
    CHECK (event_type IN ('BOOKING_CONFIRMED', 'BOOKING_RESCHEDULED', 'BOOKING_UPDATED', 'BOOKING_CANCELLED'));

-- Superseded notifications (notify/plan.rs): a send a later event of the
-- same booking made moot is recorded, not silently skipped, as a claim with
-- status SUPERSEDED and the event that superseded it. Like any claim, it is
-- the source of truth on every later attempt: never sent.
ALTER TABLE booking_notification_sends DROP CONSTRAINT booking_notification_sends_status_check;
ALTER TABLE booking_notification_sends ADD CONSTRAINT booking_notification_sends_status_check
    CHECK (status IN ('CLAIMED', 'SENT', 'FAILED', 'UNKNOWN', 'SUPERSEDED'));
ALTER TABLE booking_notification_sends ADD COLUMN superseded_by uuid;
-- "Has this recipient possibly been told anything about this booking?"
CREATE INDEX booking_notification_sends_booking ON booking_notification_sends (booking_id, recipient_email);
