-- Least privilege. Migrations run as the schema owner (the migration role:
-- `outboxctl migrate` or the deploy-time migration function). The functions
-- connect as a login role that is a member of `booking_app`, which gets only
-- the DML each table needs, table by table: no CREATE, ALTER, DROP or
-- TRUNCATE, and nothing on the migration history. A compromised function
-- cannot change the schema.
--
-- Create the login role once per database server (see README, "Security
-- model"): CREATE ROLE booking_app_login LOGIN PASSWORD '...' IN ROLE booking_app;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'booking_app') THEN
        CREATE ROLE booking_app NOLOGIN;
    END IF;
EXCEPTION
    -- Another database of the same server created it at the same moment.
    WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

REVOKE ALL ON ALL TABLES IN SCHEMA public FROM booking_app;
GRANT USAGE ON SCHEMA public TO booking_app;

-- The API writes bookings (and reads them); nothing deletes one.
GRANT SELECT, INSERT, UPDATE ON bookings TO booking_app;
-- The API takes and completes keys; retention deletes expired ones.
GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO booking_app;
-- The API inserts events, the poller and sweeper move them, retention deletes.
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_events TO booking_app;
-- Layer 2: inserted with DONE, forgotten by an operator's resend, retention.
GRANT SELECT, INSERT, DELETE ON processed_events TO booking_app;
-- Layer 3: claims, outcomes, released claims, retention.
GRANT SELECT, INSERT, UPDATE, DELETE ON booking_notification_sends TO booking_app;
-- Operator records are append-only.
GRANT SELECT, INSERT ON outbox_replays TO booking_app;
GRANT SELECT, INSERT ON notification_resends TO booking_app;
-- Abuse-limit counters.
GRANT SELECT, INSERT, UPDATE, DELETE ON organizer_daily_usage TO booking_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON booking_daily_changes TO booking_app;
