-- GET /bookings (booking/store.rs, list): a caller's bookings in start
-- order, as organizer or as attendee, a page at a time.
--
-- As organizer: by the organizer's key (the token subject, as V17's
-- overlap rule spells it), then start and id, so a page is one index range
-- read in order, however many bookings the table holds.
CREATE INDEX bookings_by_organizer
    ON bookings ((coalesce('sub:' || organizer_sub, 'email:' || organizer_email)), starts_at, id);
-- As attendee: the bookings whose attendee list holds the caller's address.
CREATE INDEX bookings_by_attendee ON bookings USING gin (attendees jsonb_path_ops);

-- The key that signs listing cursors (api/list.rs): a cursor the API did
-- not issue, or issued for another query, is refused. 32 bytes from two
-- random UUIDs (244 random bits); one row, made once per database.
CREATE TABLE api_cursor_key (
    id   boolean PRIMARY KEY DEFAULT true CHECK (id),
    key  bytea NOT NULL CHECK (length(key) = 32)
);
INSERT INTO api_cursor_key (key)
    VALUES (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));
GRANT SELECT ON api_cursor_key TO booking_app;
