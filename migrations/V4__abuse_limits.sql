-- Abuse limits, counted in the database so that they hold across every
-- Lambda container: per organizer (token subject, else address) and UTC day,
-- bookings created and recipients mailed; per booking and day, changes
-- (reschedules and cancels). A request increments its counters in its own
-- transaction; one over the limit rolls back, counters included.
CREATE TABLE organizer_daily_usage (
    organizer_key  text    NOT NULL,
    day            date    NOT NULL,
    bookings       integer NOT NULL DEFAULT 0,
    recipients     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (organizer_key, day)
);

CREATE TABLE booking_daily_changes (
    booking_id  uuid    NOT NULL,
    day         date    NOT NULL,
    changes     integer NOT NULL DEFAULT 0,
    PRIMARY KEY (booking_id, day)
);
CREATE INDEX organizer_daily_usage_day ON organizer_daily_usage (day);
CREATE INDEX booking_daily_changes_day ON booking_daily_changes (day);
