-- The organizer's own language (a BCP 47 tag, canonical; issue 40): the
-- language of each attendee who named none. Each attendee's own tag and the
-- language decided for them live in `attendees`, with their zone. The API
-- may change it (a PATCH's `locale`), never who the organizer is.
ALTER TABLE bookings ADD COLUMN organizer_locale text
    CONSTRAINT bookings_organizer_locale_length CHECK (length(organizer_locale) BETWEEN 2 AND 35);

GRANT UPDATE (organizer_locale) ON bookings TO booking_api;
