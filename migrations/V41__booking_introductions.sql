-- Who each booking was introduced to, kept past retention (issue 52,
-- Medium 2; notify/introductions.rs). The plan learns who may have been
-- told of a booking from its events' sends; once retention deleted its
-- first events, it presumed everyone had been, so a person added to a
-- week-old booking was never counted as a first contact: aged bookings
-- passed every per-person limit. Now, as retention deletes events, the
-- people their sends may have reached (SENT, UNKNOWN, still CLAIMED) and
-- the recipients resent are kept here, in the same statement, one row per
-- booking and person; the plan reads them once the events are gone.
CREATE TABLE booking_introductions (
    booking_id      uuid        NOT NULL,
    recipient_email text        NOT NULL,
    kept_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (booking_id, recipient_email)
);

-- A statement trigger on the deletion of events (retention's alone: no
-- other role deletes one), over the deleted rows at once. It runs as its
-- owner, so the sweeper needs no grant on this table: its role cannot
-- write an introduction of its own.
CREATE FUNCTION booking_introductions_keep() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
BEGIN
    INSERT INTO booking_introductions (booking_id, recipient_email)
    SELECT s.booking_id, s.recipient_email
      FROM gone JOIN booking_notification_sends s ON s.outbox_event_id = gone.id
     WHERE s.status IN ('SENT', 'UNKNOWN', 'CLAIMED')
    UNION
    SELECT (gone.payload -> 'booking' ->> 'id')::uuid, r.recipient_email
      FROM gone JOIN notification_resends r ON r.outbox_event_id = gone.id
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION booking_introductions_keep() FROM PUBLIC;
CREATE TRIGGER booking_introductions_keep AFTER DELETE ON outbox_events
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION booking_introductions_keep();

-- The bookings before: whose events retention already deleted, with
-- their sends, cannot be known. Everyone listed now, as the plan presumed
-- until now, and everyone a send that still exists may have reached.
INSERT INTO booking_introductions (booking_id, recipient_email)
SELECT booking_id, attendee_email FROM booking_attendees
UNION
SELECT booking_id, recipient_email FROM booking_notification_sends WHERE status IN ('SENT', 'UNKNOWN', 'CLAIMED')
ON CONFLICT DO NOTHING;

GRANT SELECT ON booking_introductions TO outbox_poller, booking_app;
