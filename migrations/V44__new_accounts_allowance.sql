-- A stack-wide daily allowance for new accounts' mail (issue 52, Medium 5;
-- booking/limits.rs). Every limit before is per account: accounts made
-- by the dozen, each at its own daily allowance, mail as much as their
-- number. An account is new for its first 7 days (from its first booking,
-- `organizer_accounts`); together, new accounts may cause so many
-- recipients a day (`new_account_daily_usage`, one row a day, counted in
-- the booking's own transaction as the per-account counters are). An
-- established account never counts there.
CREATE TABLE organizer_accounts (
    organizer_key text PRIMARY KEY,
    first_seen    date NOT NULL
);
-- The accounts that booked before: from their first booking.
INSERT INTO organizer_accounts (organizer_key, first_seen)
SELECT coalesce('sub:' || organizer_sub, 'email:' || organizer_email), min((created_at AT TIME ZONE 'UTC')::date)
  FROM bookings GROUP BY 1;

CREATE TABLE new_account_daily_usage (
    day        date    PRIMARY KEY,
    recipients integer NOT NULL
);

GRANT SELECT, INSERT ON organizer_accounts TO booking_api, booking_app;
GRANT SELECT, INSERT, UPDATE (recipients) ON new_account_daily_usage TO booking_api, booking_app;
GRANT SELECT, DELETE ON new_account_daily_usage TO outbox_sweeper, booking_app;
