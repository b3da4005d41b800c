-- The token subject (`sub`) of the organizer who created a booking. An email
-- address can change hands or change at the identity provider; the subject
-- cannot. When present, only the same subject may act as the organizer.
ALTER TABLE bookings ADD COLUMN organizer_sub text;
