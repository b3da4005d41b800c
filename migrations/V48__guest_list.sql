-- Whether a booking's attendees see each other (issue 55): in each one's
-- message (the other guests by name, the calendar part's ATTENDEEs) and in
-- an attendee's reading of the booking. 'visible' (the default, as Google
-- Calendar's and Outlook's) or 'hidden' (each sees only the organizer and
-- themselves). Rows written before: visible, as they were.
ALTER TABLE bookings ADD COLUMN guest_list text NOT NULL DEFAULT 'visible'
    CONSTRAINT bookings_guest_list CHECK (guest_list IN ('visible', 'hidden'));

GRANT UPDATE (guest_list) ON bookings TO booking_api;
