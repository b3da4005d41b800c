-- One database role per function, each granted only the statements its
-- function runs (docs/security.md, "Database roles"): a compromised API
-- cannot mark an event DONE or read a suppression, a compromised SES-events
-- function cannot read a booking, and none can change the schema. Each
-- function logs in as a member of its own role, a login the migration
-- function creates from the function's generated secret (db/logins.rs).
-- `booking_app` stays the operators' role (outboxctl), and a login made in
-- it before keeps working.
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['booking_api', 'outbox_poller', 'outbox_sweeper', 'ses_events'] LOOP
        BEGIN
            IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            END IF;
        EXCEPTION
            -- Another database of the same server created it at the same moment.
            WHEN duplicate_object OR unique_violation THEN NULL;
        END;
    END LOOP;
END
$$;

-- Roles are shared by the server; grants are this database's. Start clean.
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM booking_api, outbox_poller, outbox_sweeper, ses_events;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM booking_api, outbox_poller, outbox_sweeper, ses_events;
GRANT USAGE ON SCHEMA public TO booking_api, outbox_poller, outbox_sweeper, ses_events;

-- The API: bookings, their idempotency keys and daily counters, the event of
-- each change (INSERT only: it never moves one), and what GET shows of the
-- notifications (notify/tracking.rs reads the sends and SES's verdicts).
GRANT SELECT, INSERT, UPDATE ON bookings, idempotency_keys, organizer_daily_usage, booking_daily_changes
    TO booking_api;
GRANT SELECT, INSERT ON outbox_events TO booking_api;
GRANT SELECT ON booking_notification_sends, send_feedback, api_cursor_key TO booking_api;

-- The poller: claims and settles events, records them processed, claims and
-- settles sends, reads suppressions and pending resends, counts mails per
-- mailbox, takes tokens from the fleet's bucket. It never reads a booking:
-- an event carries what it needs.
GRANT SELECT, UPDATE ON outbox_events TO outbox_poller;
GRANT SELECT, INSERT, DELETE ON processed_events TO outbox_poller;
GRANT SELECT, INSERT, UPDATE, DELETE ON booking_notification_sends TO outbox_poller;
GRANT SELECT ON notification_resends, suppressed_addresses TO outbox_poller;
GRANT UPDATE (resent_at) ON notification_resends TO outbox_poller;
GRANT SELECT, INSERT, UPDATE ON recipient_daily_mails, send_rate TO outbox_poller;
-- send_rate_take() reads the sequence (pg_sequence_last_value is NULL, a full
-- bucket, without SELECT) and sets it.
GRANT SELECT, UPDATE ON SEQUENCE send_rate_ses_next TO outbox_poller;
GRANT EXECUTE ON FUNCTION send_rate_take(text, integer), send_rate_slow_down(text, double precision)
    TO outbox_poller;

-- The sweeper: resets stuck events, stamps and (opted in) resends unconfirmed
-- sends, applies every table's retention, reports what holds vacuum back.
GRANT SELECT, UPDATE, DELETE ON outbox_events, booking_notification_sends TO outbox_sweeper;
GRANT SELECT, DELETE ON processed_events, idempotency_keys, organizer_daily_usage, booking_daily_changes,
    recipient_daily_mails TO outbox_sweeper;
GRANT SELECT, INSERT ON notification_resends TO outbox_sweeper;
GRANT EXECUTE ON FUNCTION outbox_vacuum_holders() TO outbox_sweeper;

-- SES's events: confirm a send, record the event once, suppress an address.
GRANT SELECT, UPDATE ON booking_notification_sends TO ses_events;
GRANT SELECT, INSERT ON send_feedback, suppressed_addresses TO ses_events;

-- Nobody but the owner creates objects here (Postgres 15 already defaults to
-- this for a new database; a database upgraded from an older one does not).
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
