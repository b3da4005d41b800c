-- Ambiguous SES sends settled on SES's own evidence (notify/evidence.rs,
-- notify/unknown.rs).
--
-- A send whose outcome was lost (a timeout, a dropped connection, a poller
-- that died after its claim) is UNKNOWN. SES's events confirm the ones it
-- accepted. The rest are resent automatically, but only once SES's event
-- stream has demonstrably moved past them: events have arrived for
-- messages SES accepted after the send could last have reached it, at
-- least the feedback grace ago, and still no event names the send.

-- The watermark: for each second of SES's clock (mail.timestamp, when SES
-- accepted a message of this stack's configuration set), when the first
-- event of such a message arrived. Insert-only (ON CONFLICT DO NOTHING per
-- event): an event writes no row version.
CREATE TABLE ses_event_watermarks (
    mail_second timestamptz PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now()
);
-- Liveness: whether any event arrived after a given time.
CREATE INDEX ses_event_watermarks_received ON ses_event_watermarks (received_at);

-- When a send could last have reached the provider: its claim's time, plus
-- the longest its start may wait, plus the mailer's worst case. SES's
-- events about messages accepted after it are evidence about this send.
-- NULL for a claim settled without a send (superseded, suppressed).
ALTER TABLE booking_notification_sends ADD COLUMN reaches_provider_by timestamptz;
-- Why an ambiguous send is left for an operator (NULL: it is not).
ALTER TABLE booking_notification_sends ADD COLUMN left_for_operator text;

-- The evidence a resend was decided on: the second of SES's clock its
-- stream had reached, when that was seen, and the grace waited since.
ALTER TABLE notification_resends
    ADD COLUMN evidence_mail_second timestamptz,
    ADD COLUMN evidence_received_at timestamptz,
    ADD COLUMN evidence_grace_secs double precision;
CREATE INDEX notification_resends_send ON notification_resends (send_id);
CREATE INDEX notification_resends_recipient ON notification_resends (outbox_event_id, recipient_email, event_type);

-- Canaries: a message to SES's mailbox simulator, sent when ambiguous sends
-- wait for a watermark that traffic alone does not move. Its events move it.
CREATE TABLE ses_canaries (
    id          uuid PRIMARY KEY,
    sent_at     timestamptz NOT NULL DEFAULT now(),
    outcome     text NOT NULL,
    message_id  text,
    -- When its first event arrived.
    seen_at     timestamptz
);

-- The poller sends canaries and reads what waits for evidence; the SES
-- events function moves the watermark and marks a canary seen; the sweeper
-- resends on evidence, leaves a send for an operator, and deletes old
-- watermark seconds and canaries; the API shows a resend.
GRANT SELECT ON ses_event_watermarks TO outbox_poller, outbox_sweeper;
GRANT SELECT, INSERT ON ses_canaries TO outbox_poller;
GRANT SELECT ON ses_canaries TO outbox_sweeper;
GRANT SELECT, INSERT ON ses_event_watermarks TO ses_events;
GRANT SELECT, UPDATE (seen_at) ON ses_canaries TO ses_events;
GRANT SELECT (send_id, decided_by) ON notification_resends TO ses_events;
GRANT DELETE ON ses_event_watermarks, ses_canaries TO outbox_sweeper;
GRANT SELECT ON notification_resends TO booking_api;
-- The operators' role (outboxctl) runs the sweeper's steps and reads all.
GRANT SELECT, INSERT, DELETE ON ses_event_watermarks, ses_canaries TO booking_app;
GRANT UPDATE (seen_at) ON ses_canaries TO booking_app;

-- SMTP through SES's own SMTP interface: SES publishes the same events
-- (the message names the configuration set and carries the claim's tags),
-- so its ambiguous sends are settled the same way.
ALTER TABLE booking_notification_sends DROP CONSTRAINT booking_notification_sends_provider,
    ADD CONSTRAINT booking_notification_sends_provider CHECK (provider IN ('ses', 'smtp', 'ses-smtp'));
