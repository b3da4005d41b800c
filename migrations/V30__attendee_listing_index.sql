-- GET /bookings?role=attendee (booking/store.rs, list) a page at a time,
-- whoever invites the caller to however many bookings. V18's GIN index
-- found every booking listing an address, which the page then read and
-- sorted whole: several accounts listing a victim in thousands of bookings
-- made each of the victim's pages read them all. This index holds one row
-- per (attendee, booking) in (address, start, id) order, so a page is one
-- range read in order that stops after the page, as the organizer's is.
--
-- It is kept by a trigger in the booking's own transaction, from the
-- booking's attendees and start: nothing else writes it.
CREATE TABLE booking_attendees (
    attendee_email     text        NOT NULL,
    booking_starts_at  timestamptz NOT NULL,
    booking_id         uuid        NOT NULL REFERENCES bookings (id) ON DELETE CASCADE,
    PRIMARY KEY (attendee_email, booking_starts_at, booking_id)
);
-- The trigger's delete, by booking.
CREATE INDEX booking_attendees_booking ON booking_attendees (booking_id);

CREATE FUNCTION booking_attendees_sync() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.attendees IS NOT DISTINCT FROM OLD.attendees AND NEW.starts_at = OLD.starts_at THEN
            RETURN NEW;
        END IF;
        DELETE FROM booking_attendees WHERE booking_id = OLD.id;
    END IF;
    INSERT INTO booking_attendees (attendee_email, booking_starts_at, booking_id)
    SELECT DISTINCT a ->> 'email', NEW.starts_at, NEW.id FROM jsonb_array_elements(NEW.attendees) a
     WHERE a ->> 'email' IS NOT NULL;
    RETURN NEW;
END
$$;
CREATE TRIGGER booking_attendees_sync AFTER INSERT OR UPDATE OF attendees, starts_at ON bookings
    FOR EACH ROW EXECUTE FUNCTION booking_attendees_sync();

INSERT INTO booking_attendees (attendee_email, booking_starts_at, booking_id)
SELECT DISTINCT a ->> 'email', b.starts_at, b.id FROM bookings b, jsonb_array_elements(b.attendees) a
 WHERE a ->> 'email' IS NOT NULL;

-- The GIN index has no reader left, and cost every booking write.
DROP INDEX bookings_by_attendee;

-- The trigger runs as the role that writes the booking.
GRANT SELECT, INSERT, DELETE ON booking_attendees TO booking_api, booking_app;
REVOKE ALL ON FUNCTION booking_attendees_sync() FROM PUBLIC;
