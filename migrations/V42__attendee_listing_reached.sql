-- The attendee listing (booking/store.rs, list) reads only bookings whose
-- invitation may reach the person, and filters status and end in its index
-- (issue 52, Low 11). Its range read (V30) filtered a booking's status and
-- end on the booking's row, after the range: many short cancelled
-- bookings listing a person made every page of theirs read each of them.
-- And a booking whose invitation the person's limits refused (CAPPED) was
-- listed to them all the same: an attacker's bookings filled the listing
-- the limits kept out of their inbox.
--
-- Each row now carries its booking's status and end, beside the range's
-- key (the filter reads the index, not the booking), and the row of a
-- person whose invitation was capped goes, until a change of the booking
-- invites them again: the booking's next change puts it back (its sync
-- below), and a capped invitation of that change takes it away again.
ALTER TABLE booking_attendees
    ADD COLUMN booking_status text NOT NULL DEFAULT 'CONFIRMED',
    ADD COLUMN booking_ends_at timestamptz;
UPDATE booking_attendees a SET booking_status = b.status, booking_ends_at = b.ends_at
  FROM bookings b WHERE b.id = a.booking_id;
ALTER TABLE booking_attendees ALTER COLUMN booking_ends_at SET NOT NULL,
    DROP CONSTRAINT booking_attendees_pkey,
    ADD CONSTRAINT booking_attendees_pkey PRIMARY KEY (attendee_email, booking_starts_at, booking_id)
        INCLUDE (booking_status, booking_ends_at);

-- Kept from the booking at every change of it (V30 synced only a change
-- of attendees or start): rows of people no longer listed, or at the old
-- start, go; the others follow the status and end; everyone listed has a
-- row, the capped included (the change invites them again).
CREATE OR REPLACE FUNCTION booking_attendees_sync() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM booking_attendees a
         WHERE a.booking_id = OLD.id
           AND (a.booking_starts_at <> NEW.starts_at
                OR NOT EXISTS (SELECT 1 FROM jsonb_array_elements(NEW.attendees) x
                                WHERE x ->> 'email' = a.attendee_email));
        UPDATE booking_attendees SET booking_status = NEW.status, booking_ends_at = NEW.ends_at
         WHERE booking_id = NEW.id AND (booking_status, booking_ends_at) IS DISTINCT FROM (NEW.status, NEW.ends_at);
    END IF;
    INSERT INTO booking_attendees (attendee_email, booking_starts_at, booking_id, booking_status, booking_ends_at)
    SELECT DISTINCT a ->> 'email', NEW.starts_at, NEW.id, NEW.status, NEW.ends_at
      FROM jsonb_array_elements(NEW.attendees) a
     WHERE a ->> 'email' IS NOT NULL
    ON CONFLICT DO NOTHING;
    RETURN NEW;
END
$$;
DROP TRIGGER booking_attendees_sync ON bookings;
CREATE TRIGGER booking_attendees_sync AFTER INSERT OR UPDATE ON bookings
    FOR EACH ROW EXECUTE FUNCTION booking_attendees_sync();
GRANT UPDATE (booking_status, booking_ends_at) ON booking_attendees TO booking_api;

-- A capped invitation takes the person's row away, unless something of
-- the booking may have reached them (a send SENT, UNKNOWN or still
-- CLAIMED). It runs as its owner: the poller has no grant on the listing.
CREATE FUNCTION booking_attendees_capped() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
BEGIN
    -- The booking's events by its id, their sends to the person by each
    -- event's: two index probes (sends have no index by booking).
    DELETE FROM booking_attendees a
     WHERE a.booking_id = NEW.booking_id AND a.attendee_email = NEW.recipient_email
       AND NOT EXISTS (SELECT 1 FROM outbox_events e
                         JOIN booking_notification_sends s
                           ON s.outbox_event_id = e.id AND s.recipient_email = NEW.recipient_email
                        WHERE e.aggregate_id = NEW.booking_id AND s.status IN ('SENT', 'UNKNOWN', 'CLAIMED'));
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION booking_attendees_capped() FROM PUBLIC;
CREATE TRIGGER booking_attendees_capped AFTER INSERT OR UPDATE OF status ON booking_notification_sends
    FOR EACH ROW WHEN (NEW.status = 'CAPPED') EXECUTE FUNCTION booking_attendees_capped();
-- The bookings listed before whose invitation to a person was capped, and
-- nothing reached them since.
DELETE FROM booking_attendees a
 USING booking_notification_sends c
 WHERE c.status = 'CAPPED' AND c.booking_id = a.booking_id AND c.recipient_email = a.attendee_email
   AND NOT EXISTS (SELECT 1 FROM outbox_events e
                     JOIN booking_notification_sends s
                       ON s.outbox_event_id = e.id AND s.recipient_email = a.attendee_email
                    WHERE e.aggregate_id = a.booking_id AND s.status IN ('SENT', 'UNKNOWN', 'CLAIMED'));
