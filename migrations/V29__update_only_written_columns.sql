-- Every function role may UPDATE exactly the columns its statements write,
-- no other (docs/security.md, "Database roles"; the test
-- least_privilege::each_roles_grants_are_the_documented_ones reads them
-- back). Before, V19 granted UPDATE on whole tables: a compromised sweeper,
-- which has no SES right, could rewrite a DONE event's payload (recipients
-- and text), reopen it, and have the poller mail it from the verified
-- domain; SES's events could rewrite a send's recipient.
REVOKE UPDATE ON outbox_events, booking_notification_sends, bookings, idempotency_keys, organizer_daily_usage,
    booking_daily_changes, send_rate, mailbox_organizers
    FROM booking_api, outbox_poller, outbox_sweeper, ses_events;

-- Moving an event: claim, complete, retry, requeue, dead-letter (poller);
-- reset a stuck one, reopen one to resend on SES's evidence (sweeper).
-- Never its payload, booking, version, type or trace.
GRANT UPDATE (status, attempts, next_attempt_at, locked_at, locked_by, last_error, completed_at, updated_at)
    ON outbox_events TO outbox_poller, outbox_sweeper;

-- A send's outcome (poller: record, orphans; SES's events: confirm,
-- refuse); an operator's note on an ambiguous one (sweeper). Never its
-- recipient, event, booking or claim time.
GRANT UPDATE (status, provider_message_id, last_error, completed_at, updated_at)
    ON booking_notification_sends TO outbox_poller;
GRANT UPDATE (status, provider_message_id, confirmed_by, last_error, completed_at, updated_at)
    ON booking_notification_sends TO ses_events;
GRANT UPDATE (left_for_operator, updated_at) ON booking_notification_sends TO outbox_sweeper;

-- The API: a booking's changeable fields (never its organizer), an
-- idempotency key's stored answer, the daily counters.
GRANT UPDATE (title, description, location, timezone, starts_at, ends_at, attendees, status, version, updated_at)
    ON bookings TO booking_api;
GRANT UPDATE (request_hash, response_status, response_body, booking_id, created_at)
    ON idempotency_keys TO booking_api;
GRANT UPDATE (bookings, recipients) ON organizer_daily_usage TO booking_api;
GRANT UPDATE (changes) ON booking_daily_changes TO booking_api;

-- The poller: the account's rate and the fleet's slow-down factor; each
-- organizer's daily invitations to a mailbox.
GRANT UPDATE (account_rate, cap, rate, refreshed_at, factor, factor_at) ON send_rate TO outbox_poller;
GRANT UPDATE (mails, day) ON mailbox_organizers TO outbox_poller;

-- V15's token bucket is no longer called (V24 replaced it).
REVOKE EXECUTE ON FUNCTION send_rate_take(text, integer), send_rate_slow_down(text, double precision)
    FROM outbox_poller;
