-- Reminders (docs/reminders.md): each booking's offsets before its start,
-- in seconds, at most 5, each from 5 minutes to 30 days (the API's rules,
-- booking/domain/reminders.rs). Bookings made before have none.
ALTER TABLE bookings ADD COLUMN reminders integer[] NOT NULL DEFAULT '{}'
    CONSTRAINT bookings_reminders_bounded
        CHECK (cardinality(reminders) <= 5 AND 300 <= ALL (reminders) AND 2592000 >= ALL (reminders));
GRANT UPDATE (reminders) ON bookings TO booking_api;
-- The plan of a reminder reads its booking's version: one of an older
-- version never goes, even if the later event is gone.
GRANT SELECT (version) ON bookings TO outbox_poller;

-- A reminder is an outbox event due at start - offset, in a lane of its
-- own (its aggregate_id is derived from the booking's: booking/reminders.rs),
-- so it neither waits for the booking's events nor holds them back.
-- NOT VALID: every stored row already passes the narrower check it
-- replaces, and validating would scan the whole outbox under a lock.
ALTER TABLE outbox_events DROP CONSTRAINT outbox_events_event_type_check;
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_event_type_check
    CHECK (event_type IN ('BOOKING_CONFIRMED', 'BOOKING_RESCHEDULED', 'BOOKING_UPDATED', 'BOOKING_CANCELLED',
                          'BOOKING_REMINDER')) NOT VALID;
