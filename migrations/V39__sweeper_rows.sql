-- The sweeper's writes, held to the rows its steps need (issue 52, Low
-- 12). Its grants let it update an event's status and delete any claim,
-- event or lease: a compromised sweeper could reopen a DONE event and
-- delete its claims, and the poller would mail everyone again. Grants
-- cannot say which rows; row-level security can. Each policy below is one
-- step of the sweeper (relay/sweeper.rs), and nothing else passes:
--
-- - reset a stuck event: PROCESSING, under no live lease, back to PENDING
--   (or DEAD);
-- - resend an ambiguous send on SES's evidence: record the decision for a
--   claim that is UNKNOWN (or CLAIMED), then delete that claim, and reopen
--   its DONE event only while such a decision waits to be carried out;
-- - leave an UNKNOWN send for an operator;
-- - retention: delete a DONE event finished over a day ago, a finished
--   claim whose event is gone, a lease that ended.
--
-- The statements stay where they are (each table's module); these are
-- constraints on what the sweeper's role may change, as a CHECK is on what
-- anyone may write. A policy passes a row silently or not at all: an
-- UPDATE or DELETE outside them changes nothing, an INSERT is refused.
-- Every other role keeps what its grants give it (a policy of `true`);
-- the tables' owner (migrations) is not subject to them.

ALTER TABLE outbox_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE booking_notification_sends ENABLE ROW LEVEL SECURITY;
ALTER TABLE notification_resends ENABLE ROW LEVEL SECURITY;
ALTER TABLE outbox_leases ENABLE ROW LEVEL SECURITY;

CREATE POLICY by_grants ON outbox_events
    TO booking_api, outbox_poller, ses_events, outbox_operator, booking_app USING (true) WITH CHECK (true);
CREATE POLICY by_grants ON booking_notification_sends
    TO booking_api, outbox_poller, ses_events, outbox_operator, booking_app USING (true) WITH CHECK (true);
CREATE POLICY by_grants ON notification_resends
    TO booking_api, outbox_poller, ses_events, outbox_operator, booking_app USING (true) WITH CHECK (true);
CREATE POLICY by_grants ON outbox_leases
    TO booking_api, outbox_poller, ses_events, outbox_operator, booking_app USING (true) WITH CHECK (true);

-- The sweeper reads all it is granted.
CREATE POLICY sweeper_reads ON outbox_events FOR SELECT TO outbox_sweeper USING (true);
CREATE POLICY sweeper_reads ON booking_notification_sends FOR SELECT TO outbox_sweeper USING (true);
CREATE POLICY sweeper_reads ON notification_resends FOR SELECT TO outbox_sweeper USING (true);
CREATE POLICY sweeper_reads ON outbox_leases FOR SELECT TO outbox_sweeper USING (true);

-- Reset: a PROCESSING event no live lease holds goes back to PENDING, or
-- to DEAD when out of attempts, unlocked.
CREATE POLICY sweeper_resets_stuck ON outbox_events FOR UPDATE TO outbox_sweeper
    USING (status = 'PROCESSING'
           AND NOT EXISTS (SELECT 1 FROM outbox_leases l WHERE l.id = outbox_events.lease_id AND l.expires_at >= now()))
    WITH CHECK (status IN ('PENDING', 'DEAD') AND lease_id IS NULL);

-- Resend on evidence: the decision is recorded first, for a claim that is
-- UNKNOWN or CLAIMED, of that event and recipient, on SES's evidence.
CREATE POLICY sweeper_decides_a_resend ON notification_resends FOR INSERT TO outbox_sweeper
    WITH CHECK (evidence_mail_second IS NOT NULL AND resent_at IS NULL
                AND EXISTS (SELECT 1 FROM booking_notification_sends s
                             WHERE s.id = notification_resends.send_id AND s.outbox_event_id = notification_resends.outbox_event_id
                               AND s.recipient_email = notification_resends.recipient_email
                               AND s.status IN ('UNKNOWN', 'CLAIMED')));
-- Then the claim it replaces goes, and its event (DONE) runs again while
-- the decision waits.
CREATE POLICY sweeper_deletes_a_decided_claim ON booking_notification_sends FOR DELETE TO outbox_sweeper
    USING (status IN ('UNKNOWN', 'CLAIMED')
           AND EXISTS (SELECT 1 FROM notification_resends r WHERE r.send_id = booking_notification_sends.id AND r.resent_at IS NULL));
CREATE POLICY sweeper_reopens_for_a_decided_resend ON outbox_events FOR UPDATE TO outbox_sweeper
    USING (status = 'DONE'
           AND EXISTS (SELECT 1 FROM notification_resends r WHERE r.outbox_event_id = outbox_events.id AND r.resent_at IS NULL))
    WITH CHECK (status = 'PENDING' AND lease_id IS NULL);

-- Left for an operator: a note on an UNKNOWN send.
CREATE POLICY sweeper_leaves_for_an_operator ON booking_notification_sends FOR UPDATE TO outbox_sweeper
    USING (status = 'UNKNOWN') WITH CHECK (status = 'UNKNOWN');

-- Retention. A DONE event finished over a day ago (RETENTION_DAYS is at
-- least 1); a finished claim over a day old whose event is gone (while its
-- event exists, the claim is what stops a second send); a lease that ended.
CREATE POLICY sweeper_retains_events ON outbox_events FOR DELETE TO outbox_sweeper
    USING (status = 'DONE' AND completed_at < now() - interval '1 day');
CREATE POLICY sweeper_retains_claims ON booking_notification_sends FOR DELETE TO outbox_sweeper
    USING (status IN ('SENT', 'FAILED', 'SUPERSEDED', 'CAPPED') AND completed_at < now() - interval '1 day'
           AND NOT EXISTS (SELECT 1 FROM outbox_events e WHERE e.id = booking_notification_sends.outbox_event_id));
CREATE POLICY sweeper_retains_leases ON outbox_leases FOR DELETE TO outbox_sweeper
    USING (expires_at < now());
