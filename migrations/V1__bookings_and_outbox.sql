-- The booking service's schema: the business table, the outbox, and the two
-- idempotency tables of the design story (processed_events and
-- booking_notification_sends). Applied by `outboxctl migrate` / shared::db::migrate,
-- which holds a Postgres advisory lock so two deploys cannot race.

-- The overlap rule is an exclusion constraint over (organizer, time range);
-- btree_gist lets a GiST index compare the plain text column with `=`.
-- btree_gist is a trusted extension, so the database owner may create it.
CREATE EXTENSION IF NOT EXISTS btree_gist;

CREATE TABLE bookings (
    id               uuid        PRIMARY KEY,
    organizer_email  text        NOT NULL,
    organizer_name   text        NOT NULL,
    title            text        NOT NULL,
    description      text,
    location         text,
    timezone         text        NOT NULL,
    starts_at        timestamptz NOT NULL,
    ends_at          timestamptz NOT NULL,
    -- [{"email": "...", "name": "..."}], emails normalised to lower case
    attendees        jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'CONFIRMED'
                     CHECK (status IN ('CONFIRMED', 'CANCELLED')),
    -- Bumped by every change; optimistic concurrency for reschedules and the
    -- iCalendar SEQUENCE of the invitation.
    version          integer     NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT bookings_time_range_valid CHECK (ends_at > starts_at),
    -- The database, not a racy check in code, refuses a second overlapping
    -- active booking for the same organizer. Half-open ranges let
    -- back-to-back meetings touch.
    CONSTRAINT bookings_no_overlapping_active
        EXCLUDE USING gist (organizer_email WITH =, tstzrange(starts_at, ends_at, '[)') WITH &&)
        WHERE (status = 'CONFIRMED')
);

-- Idempotency-Key support for POST /bookings. The key row is inserted first in
-- the booking's own transaction, so a concurrent request with the same key
-- waits on the unique index and then sees the committed response.
CREATE TABLE idempotency_keys (
    caller_email     text        NOT NULL,
    idempotency_key  text        NOT NULL,
    request_hash     bytea       NOT NULL,
    response_status  smallint,
    response_body    jsonb,
    booking_id       uuid,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (caller_email, idempotency_key)
);
CREATE INDEX idempotency_keys_created_at ON idempotency_keys (created_at);

CREATE TABLE outbox_events (
    id                 uuid        PRIMARY KEY,
    -- The booking the event belongs to, and the booking version it records.
    -- Events of one booking are dispatched in aggregate_version order.
    aggregate_id       uuid        NOT NULL,
    aggregate_version  integer     NOT NULL,
    event_type         text        NOT NULL
                       CHECK (event_type IN ('BOOKING_CONFIRMED', 'BOOKING_RESCHEDULED', 'BOOKING_CANCELLED')),
    payload            jsonb       NOT NULL,
    status             text        NOT NULL DEFAULT 'PENDING'
                       CHECK (status IN ('PENDING', 'PROCESSING', 'DONE', 'DEAD')),
    attempts           integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at    timestamptz NOT NULL DEFAULT now(),
    locked_at          timestamptz,
    locked_by          text,
    last_error         text,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    completed_at       timestamptz,
    CONSTRAINT outbox_events_one_per_version UNIQUE (aggregate_id, aggregate_version),
    CONSTRAINT outbox_events_processing_is_locked
        CHECK (status <> 'PROCESSING' OR (locked_at IS NOT NULL AND locked_by IS NOT NULL))
);

-- Partial indexes: they hold only the unfinished rows, so the claim and the
-- sweep stay index scans over a handful of entries even when millions of DONE
-- rows wait for retention.
CREATE INDEX outbox_events_due ON outbox_events (next_attempt_at) WHERE status = 'PENDING';
CREATE INDEX outbox_events_processing ON outbox_events (locked_at) WHERE status = 'PROCESSING';
CREATE INDEX outbox_events_unfinished_by_aggregate
    ON outbox_events (aggregate_id, aggregate_version) WHERE status IN ('PENDING', 'PROCESSING');
CREATE INDEX outbox_events_dead ON outbox_events (updated_at) WHERE status = 'DEAD';
CREATE INDEX outbox_events_done ON outbox_events (completed_at) WHERE status = 'DONE';

-- Layer 2 of the story: "have we already processed this event?"
CREATE TABLE processed_events (
    event_id      uuid        PRIMARY KEY,
    processed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX processed_events_processed_at ON processed_events (processed_at);

-- Layer 3 of the story: "have we already claimed this notification for this
-- recipient?" The claim is committed before the mailer is called.
CREATE TABLE booking_notification_sends (
    id                   uuid        PRIMARY KEY,
    outbox_event_id      uuid        NOT NULL,
    booking_id           uuid        NOT NULL,
    recipient_email      text        NOT NULL,
    event_type           text        NOT NULL,
    -- CLAIMED: committed, mailer not yet answered (or the worker died);
    -- SENT: accepted by the provider; FAILED: permanently rejected for this
    -- recipient; UNKNOWN: the outcome could not be known, never re-sent
    -- automatically.
    status               text        NOT NULL DEFAULT 'CLAIMED'
                         CHECK (status IN ('CLAIMED', 'SENT', 'FAILED', 'UNKNOWN')),
    provider_message_id  text,
    last_error           text,
    claimed_by           text,
    claimed_at           timestamptz NOT NULL DEFAULT now(),
    completed_at         timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT booking_notification_sends_one_per_recipient
        UNIQUE (outbox_event_id, recipient_email, event_type)
);
CREATE INDEX booking_notification_sends_unsettled
    ON booking_notification_sends (claimed_at) WHERE status IN ('CLAIMED', 'UNKNOWN');
CREATE INDEX booking_notification_sends_completed_at ON booking_notification_sends (completed_at);
