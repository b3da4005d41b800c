-- Which provider a send was claimed for: only SES reports back (its events
-- confirm an UNKNOWN send, or prove it never arrived). An SMTP send's
-- UNKNOWN is never "not confirmed by SES", so neither the sweeper's opt-in
-- auto-resend nor `outboxctl unknown resend --unconfirmed` ever resends it:
-- the server may well have the mail. Existing rows were all sent by SES.
ALTER TABLE booking_notification_sends
    ADD COLUMN provider text NOT NULL DEFAULT 'ses'
    CONSTRAINT booking_notification_sends_provider CHECK (provider IN ('ses', 'smtp'));
