-- Delivery feedback from SES's event stream (notify/feedback.rs).

-- Who settled an ambiguous send: 'ses-event' when SES's own Send (or later)
-- event proved the message was accepted.
ALTER TABLE booking_notification_sends ADD COLUMN confirmed_by text;

-- Every event SES published about a send, once: events arrive at least once
-- and in any order, so the key makes recording idempotent.
CREATE TABLE send_feedback (
    send_id              uuid        NOT NULL,
    kind                 text        NOT NULL
                         CHECK (kind IN ('Send', 'Delivery', 'Bounce', 'Complaint', 'Reject',
                                         'DeliveryDelay', 'RenderingFailure')),
    -- Bounces: Permanent/General, Transient/MailboxFull, ...
    subtype              text,
    occurred_at          timestamptz NOT NULL,
    provider_message_id  text        NOT NULL,
    received_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (send_id, kind, occurred_at)
);
CREATE INDEX send_feedback_received_at ON send_feedback (received_at);

-- Addresses that bounced permanently or complained: never mailed again.
CREATE TABLE suppressed_addresses (
    email       text        PRIMARY KEY,
    reason      text        NOT NULL,
    send_id     uuid,
    created_at  timestamptz NOT NULL DEFAULT now()
);

GRANT SELECT, INSERT, DELETE ON send_feedback TO booking_app;
GRANT SELECT, INSERT, DELETE ON suppressed_addresses TO booking_app;
