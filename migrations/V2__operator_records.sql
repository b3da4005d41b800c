-- Records of operator decisions (outboxctl), kept for audit.

-- `outboxctl dead replay`: a DEAD event put back to PENDING with fresh attempts.
CREATE TABLE outbox_replays (
    id                 uuid        PRIMARY KEY,
    outbox_event_id    uuid        NOT NULL,
    previous_attempts  integer     NOT NULL,
    previous_error     text,
    replayed_by        text        NOT NULL,
    replayed_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_replays_event ON outbox_replays (outbox_event_id);

-- `outboxctl unknown resend`: a human accepted a possible duplicate for a
-- send whose outcome was unknown. The send row is archived here and removed,
-- so the poller may claim and send it again.
CREATE TABLE notification_resends (
    id                   uuid        PRIMARY KEY,
    send_id              uuid        NOT NULL,
    outbox_event_id      uuid        NOT NULL,
    recipient_email      text        NOT NULL,
    event_type           text        NOT NULL,
    previous_status      text        NOT NULL,
    previous_error       text,
    claimed_at           timestamptz NOT NULL,
    decided_by           text        NOT NULL,
    decided_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX notification_resends_event ON notification_resends (outbox_event_id);
