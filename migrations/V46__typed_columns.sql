-- Every state a program reads back, and everything the outbox needs to
-- order and retain an event, is a typed value in a column of its own:
-- never a prefix of an error text, nor bits of an id (issue 54).

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

-- The outbox knows an event's lane and due time as columns of their own,
-- given when the event is written, never read from its id's bits or its
-- payload. `lane_of`: the aggregate whose side lane the event is in (its
-- own aggregate id names the lane, ordered apart from the aggregate's
-- events; a booking's reminders), NULL for an aggregate's own events.
-- Retention keeps an aggregate's events while an event of its lanes is
-- unfinished, and a reader finds an aggregate's lanes, by this column.
-- `due_at`: when an event written to fall due later was due (NULL: at
-- once); the oldest due event's age counts from it.
ALTER TABLE outbox_events ADD COLUMN lane_of uuid, ADD COLUMN due_at timestamptz;
-- Events written before: a side lane's id had its version nibble set to 8
-- (never an aggregate id); its payload names the booking it belongs to.
UPDATE outbox_events SET lane_of = (payload -> 'booking' ->> 'id')::uuid, due_at = next_attempt_at
 WHERE get_byte(uuid_send(aggregate_id), 6) >> 4 = 8;
CREATE INDEX outbox_events_lanes ON outbox_events (lane_of) WHERE lane_of IS NOT NULL;
