-- Every state a program reads back is a typed value in a column of its
-- own, never a prefix of an error text (issue 54).

-- Why a send was settled without a send, where a reader tells it apart
-- from the rest of its status: a FAILED send refused before any call for a
-- suppressed address, a SUPERSEDED reminder whose meeting had started.
-- The text in last_error stays, for people; programs read this.
ALTER TABLE booking_notification_sends ADD COLUMN not_sent_because text
    CONSTRAINT booking_notification_sends_not_sent_because_check
        CHECK (not_sent_because IN ('SUPPRESSED', 'TOO_LATE'));
UPDATE booking_notification_sends SET not_sent_because = 'SUPPRESSED'
 WHERE status = 'FAILED' AND starts_with(last_error, 'suppressed:');
UPDATE booking_notification_sends SET not_sent_because = 'TOO_LATE'
 WHERE status = 'SUPERSEDED' AND starts_with(last_error, 'too late:');

-- An event handed back because its consumer stopped (the mail provider
-- paused sending, or refused the stack's configuration): it waits for the
-- stop to end, not for a retry. Set by the requeue that hands it back,
-- cleared by every other transition to PENDING.
ALTER TABLE outbox_events ADD COLUMN stopped boolean NOT NULL DEFAULT false;
UPDATE outbox_events SET stopped = true
 WHERE status = 'PENDING'
   AND (starts_with(last_error, 'mailer misconfigured: ') OR starts_with(last_error, 'sending paused: '));

GRANT UPDATE (stopped) ON outbox_events TO outbox_poller, outbox_sweeper, outbox_operator;
