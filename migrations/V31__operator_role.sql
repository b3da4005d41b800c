-- The operators' own role (docs/security.md, "Database roles"): what
-- outboxctl's commands run, and nothing else. The stack makes one login in
-- it (OperatorFunction's, from its generated secret, like each function's:
-- db/logins.rs). Before, operators ran as `booking_app` (V5), the
-- application's first role, which may also write bookings, idempotency keys
-- and counters; it stays for logins made in it by hand, and for logins of
-- stacks deployed before V19 (each is moved into its function's role).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_operator') THEN
        CREATE ROLE outbox_operator NOLOGIN;
    END IF;
EXCEPTION
    -- Another database of the same server created it at the same moment.
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM outbox_operator;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM outbox_operator;
GRANT USAGE ON SCHEMA public TO outbox_operator;

-- status, dead list/show, unknown list: counts and rows of events, sends,
-- SES's verdicts and evidence, replays and resends; what holds vacuum back.
GRANT SELECT ON outbox_events, booking_notification_sends, send_feedback, ses_event_watermarks, ses_canaries,
    outbox_replays, notification_resends, suppressed_addresses TO outbox_operator;
GRANT EXECUTE ON FUNCTION outbox_vacuum_holders() TO outbox_operator;

-- dead replay, unknown resend, sweep: move an event (reopen, replay, reset,
-- dead-letter), never what it says; record each decision.
GRANT UPDATE (status, attempts, next_attempt_at, locked_at, locked_by, last_error, completed_at, updated_at)
    ON outbox_events TO outbox_operator;
GRANT INSERT ON outbox_replays, notification_resends TO outbox_operator;
-- unknown resend: lock the send (FOR UPDATE needs an UPDATE grant), record
-- the decision, delete the claim and the event's processed row so that the
-- poller sends that recipient again.
GRANT UPDATE (updated_at) ON booking_notification_sends TO outbox_operator;
GRANT DELETE ON booking_notification_sends TO outbox_operator;
GRANT SELECT, DELETE ON processed_events TO outbox_operator;

-- suppression remove: mail an address again.
GRANT DELETE ON suppressed_addresses TO outbox_operator;
