-- One person cannot be flooded (notify/recipient_limit.rs): how often each
-- mailbox was mailed per UTC day across every organizer, counted where the
-- poller is about to send, by the mailbox an address reaches (`v+1@` and
-- `v.i@gmail.com` are `v@` and `vi@gmail.com`). A send over
-- LIMIT_MAILS_PER_RECIPIENT_PER_DAY is recorded CAPPED: not sent, never
-- retried, and counted in `outboxctl status`.
CREATE TABLE recipient_daily_mails (
    mailbox  text    NOT NULL,
    day      date    NOT NULL,
    mails    integer NOT NULL CHECK (mails >= 0),
    PRIMARY KEY (mailbox, day)
);
-- Retention deletes past days.
CREATE INDEX recipient_daily_mails_day ON recipient_daily_mails (day);
GRANT SELECT, INSERT, UPDATE, DELETE ON recipient_daily_mails TO booking_app;

-- The wider check holds for every existing row by construction: NOT VALID
-- spares a scan of the whole table under its exclusive lock (new rows are
-- checked all the same).
ALTER TABLE booking_notification_sends DROP CONSTRAINT booking_notification_sends_status_check;
ALTER TABLE booking_notification_sends ADD CONSTRAINT booking_notification_sends_status_check
    CHECK (status IN ('CLAIMED', 'SENT', 'FAILED', 'UNKNOWN', 'SUPERSEDED', 'CAPPED')) NOT VALID;
