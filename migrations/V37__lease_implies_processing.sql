-- An event names a lease only while PROCESSING (every transition out of
-- PROCESSING clears lease_id; the claim sets it with PROCESSING). Said by
-- the database, so the fence of the holder's own transitions can be
-- `lease_id = $lease` alone (outbox/events/transitions.rs): a predicate
-- that does not imply `status = 'PROCESSING'` cannot use the partial index
-- over PROCESSING rows (`outbox_events_processing`, V36), and the planner
-- finds the events by their primary key. With the status in it, the
-- planner took that index to complete a batch and read every event the
-- run held (1,024 rows for 256: 4 batches in flight), 0.4-1.0 ms more per
-- DONE in `make bench`. Validating reads the table once (retention keeps
-- it to days of events).
ALTER TABLE outbox_events ADD CONSTRAINT outbox_events_lease_only_processing
    CHECK (lease_id IS NULL OR status = 'PROCESSING') NOT VALID;
ALTER TABLE outbox_events VALIDATE CONSTRAINT outbox_events_lease_only_processing;
