-- One index write fewer per event, on its insert and on its claim. An
-- event's claim and completion each write a new row version (status is in
-- the partial indexes' predicates, so neither is a HOT update), and each
-- version gets an entry in every index whose predicate it meets.
--
-- The ordering probe of the claim ("no earlier event of this booking is
-- PENDING or PROCESSING") now reads outbox_events_one_per_version
-- (aggregate_id, aggregate_version), which every event has anyway; a
-- booking has a handful of events, so the probe's filter on status reads
-- a handful of rows. This index cost an entry on every insert and claim,
-- and nothing else read it.
DROP INDEX outbox_events_unfinished_by_aggregate;

-- One index write fewer per send. "Who may have been told about this
-- booking?" is asked only of a booking whose every earlier event still
-- exists (notify/plan.rs), so it finds the sends through those events:
-- outbox_events_one_per_version, then
-- booking_notification_sends_one_per_recipient (outbox_event_id first).
DROP INDEX booking_notification_sends_booking;

-- One more per send: retention finds old sends by their ids, UUIDv7s made
-- at the claim (their first 48 bits are its time in milliseconds), through
-- the primary key, and still checks claimed_at itself.
DROP INDEX booking_notification_sends_claimed_at;
