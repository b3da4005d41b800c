-- The operator console (issue 56) reads as `outbox_operator`, the role
-- whose grants are what `outboxctl` runs: its actions are outboxctl's. What
-- it reads beyond them: the bookings an operator searches for (by id,
-- organizer or attendee address), and when each send's event was committed
-- (the commit → send latency it charts).

-- booking::store (bookings, booking_attendees): find a booking and show
-- what it is (its people and the rest are in each event's payload, which
-- the role reads already).
GRANT SELECT (id, organizer_email, organizer_name, title, timezone, starts_at, ends_at, status, version, created_at,
              updated_at)
    ON bookings TO outbox_operator;
GRANT SELECT (attendee_email, booking_starts_at, booking_id) ON booking_attendees TO outbox_operator;
-- Searching by organizer address: bookings_by_organizer leads with the
-- organizer's sub when the token had one, so it cannot answer by address.
CREATE INDEX bookings_by_organizer_email ON bookings (organizer_email, created_at DESC);

-- outbox::events (outbox_events): when the event was committed, or for one
-- written to fall due later (a reminder) when it fell due: where a send's
-- latency is counted from.
CREATE FUNCTION outbox_event_committed(event_id uuid) RETURNS SETOF timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT greatest(e.created_at, e.due_at) FROM outbox_events e WHERE e.id = event_id $$;
REVOKE ALL ON FUNCTION outbox_event_committed(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_event_committed(uuid) TO outbox_operator, booking_app;

-- pacing::send_rate (send_rate): the account's rate and the fleet's factor.
GRANT SELECT (provider, account_rate, cap, rate, factor, refreshed_at) ON send_rate TO outbox_operator;

-- notify::sends (booking_notification_sends): the sends SES's own events
-- confirmed, counted without reading the history (outboxctl status and the
-- console's overview). Written only when a confirmation sets it: the
-- outcome updates, which leave confirmed_by alone, stay HOT.
CREATE INDEX booking_notification_sends_confirmed ON booking_notification_sends (id) WHERE confirmed_by IS NOT NULL;
