-- What each table's owner exports to the modules that need to know
-- something of its table (issue 54): a function per question, so their
-- statements ask it by name instead of pasting the owner's SQL or reading
-- its table. Every one is a plain SQL function, STABLE and not STRICT,
-- returning a set: the planner inlines it where it is called (as a
-- subquery, an anti-join under NOT EXISTS), so the plans are those of the
-- pasted SQL before. They run with the caller's rights.

-- notify::evidence::watermark (ses_event_watermarks) ------------------------

-- The watermark second that proves SES's stream moved past a send that
-- could last have reached SES at `reaches_by`, at least `grace_secs` ago,
-- and kept delivering for the whole grace since (an event arrived at least
-- a grace after it: a stream that stopped in between proves nothing about
-- the send). SES's clock may be ahead of the database's by up to 2 seconds
-- (the skew): an event about a message SES accepted 2 s or more after a
-- send could last have reached it is evidence about that send.
CREATE FUNCTION ses_stream_passed(reaches_by timestamptz, grace_secs double precision)
    RETURNS TABLE (mail_second timestamptz, received_at timestamptz)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT w.mail_second, w.received_at FROM ses_event_watermarks w
           WHERE w.mail_second >= reaches_by + interval '2 seconds'
             AND w.received_at <= now() - make_interval(secs => grace_secs)
             AND EXISTS (SELECT 1 FROM ses_event_watermarks l
                          WHERE l.received_at >= w.received_at + make_interval(secs => grace_secs))
           ORDER BY w.mail_second LIMIT 1 $$;

-- The first watermark second past such a send at all, however recently.
CREATE FUNCTION ses_stream_reached(reaches_by timestamptz)
    RETURNS SETOF timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT w.mail_second FROM ses_event_watermarks w
           WHERE w.mail_second >= reaches_by + interval '2 seconds' ORDER BY w.mail_second LIMIT 1 $$;

-- outbox::events (outbox_events) --------------------------------------------

-- The event `event_id`, if it exists: a table whose rows stop a second send
-- keeps them until the event itself is gone (a DONE event can be reopened).
CREATE FUNCTION outbox_event(event_id uuid) RETURNS SETOF uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT e.id FROM outbox_events e WHERE e.id = event_id $$;

-- The event, if it is not DONE.
CREATE FUNCTION outbox_event_unfinished(event_id uuid) RETURNS SETOF uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT e.id FROM outbox_events e WHERE e.id = event_id AND e.status <> 'DONE' $$;

-- The event, if a worker holds it (PROCESSING): a claim of it may still be
-- being sent, so it is no orphan.
CREATE FUNCTION outbox_event_in_flight(event_id uuid) RETURNS SETOF uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT e.id FROM outbox_events e WHERE e.id = event_id AND e.status = 'PROCESSING' $$;

-- The events of the aggregates in `aggregates` (outbox_events_one_per_version).
CREATE FUNCTION outbox_events_of_aggregates(aggregates uuid[])
    RETURNS TABLE (id uuid, aggregate_id uuid)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT e.id, e.aggregate_id FROM outbox_events e WHERE e.aggregate_id = ANY(aggregates) $$;

-- The events of `aggregate` and of its lanes (outbox_events_one_per_version,
-- outbox_events_lanes): what each is and where it stands, its payload
-- while it is not DONE (who it is still to reach).
CREATE FUNCTION outbox_events_of_aggregate(aggregate uuid)
    RETURNS TABLE (id uuid, aggregate_version integer, event_type text, status text, created_at timestamptz,
                   updated_at timestamptz, payload jsonb, open_payload jsonb)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT e.id, e.aggregate_version, e.event_type, e.status, e.created_at, e.updated_at, e.payload,
                 CASE WHEN e.status <> 'DONE' THEN e.payload END
            FROM outbox_events e WHERE e.aggregate_id = aggregate OR e.lane_of = aggregate $$;

-- notify::sends (booking_notification_sends) --------------------------------

-- The send `send_id`, if it exists: a table whose rows belong to a send
-- keeps them while it does.
CREATE FUNCTION booking_notification_send(send_id uuid) RETURNS SETOF uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT s.id FROM booking_notification_sends s WHERE s.id = send_id $$;

-- Every send of the event `event_id`, as where it stands.
CREATE FUNCTION booking_notification_sends_of_event(event_id uuid)
    RETURNS TABLE (id uuid, recipient_email text, status text, claimed_at timestamptz, completed_at timestamptz,
                   confirmed_by text, left_for_operator text, last_error text, not_sent_because text, provider text)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT s.id, s.recipient_email, s.status, s.claimed_at, s.completed_at, s.confirmed_by,
                 s.left_for_operator, s.last_error, s.not_sent_because, s.provider
            FROM booking_notification_sends s WHERE s.outbox_event_id = event_id $$;

-- The ids of the latest `sample` sends SES accepted by its own answer (SENT,
-- not confirmed later by an event) that were claimed between `window_secs`
-- and `grace_secs` ago, newest first: messages whose events SES owes by now.
-- Read from the primary key (UUIDv7s by claim time).
CREATE FUNCTION booking_notification_sends_answered_by_ses(grace_secs double precision,
                                                           window_secs double precision, sample bigint)
    RETURNS SETOF uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT s.id FROM booking_notification_sends s
           WHERE s.id >= (lpad(to_hex(floor(extract(epoch FROM now() - make_interval(secs => window_secs)) * 1000)::bigint),
                               12, '0') || '00000000000000000000')::uuid
             AND s.id < (lpad(to_hex(floor(extract(epoch FROM now() - make_interval(secs => grace_secs)) * 1000)::bigint),
                              12, '0') || '00000000000000000000')::uuid
             AND s.status = 'SENT' AND s.confirmed_by IS NULL AND s.provider IN ('ses', 'ses-smtp')
           ORDER BY s.id DESC LIMIT sample $$;

-- notify::evidence::feedback (send_feedback) --------------------------------

-- The newest verdict SES gave about the send `send_id`: its latest
-- Delivery, Bounce, Complaint, Reject or RenderingFailure (a Send or a
-- DeliveryDelay says nothing about where the message ended).
CREATE FUNCTION send_verdict(send_id uuid)
    RETURNS TABLE (kind text, subtype text, occurred_at timestamptz)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT f.kind, f.subtype, f.occurred_at FROM send_feedback f
           WHERE f.send_id = send_verdict.send_id
             AND f.kind IN ('Delivery', 'Bounce', 'Complaint', 'Reject', 'RenderingFailure')
           ORDER BY f.occurred_at DESC LIMIT 1 $$;

-- notify::evidence::resend (notification_resends) ---------------------------

-- When `recipient` of the event `event_id` (of type `event_type`) was last
-- resent on SES's evidence.
CREATE FUNCTION resent_on_evidence(event_id uuid, recipient text, event_type text)
    RETURNS SETOF timestamptz
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT r.decided_at FROM notification_resends r
           WHERE r.outbox_event_id = event_id AND r.recipient_email = recipient
             AND r.event_type = resent_on_evidence.event_type AND r.evidence_mail_second IS NOT NULL
           ORDER BY r.decided_at DESC LIMIT 1 $$;

REVOKE ALL ON FUNCTION ses_stream_passed(timestamptz, double precision), ses_stream_reached(timestamptz),
    outbox_event(uuid), outbox_event_unfinished(uuid), outbox_event_in_flight(uuid),
    outbox_events_of_aggregates(uuid[]), outbox_events_of_aggregate(uuid),
    booking_notification_send(uuid), booking_notification_sends_of_event(uuid),
    booking_notification_sends_answered_by_ses(double precision, double precision, bigint),
    send_verdict(uuid), resent_on_evidence(uuid, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ses_stream_passed(timestamptz, double precision), ses_stream_reached(timestamptz),
    outbox_event(uuid), outbox_event_unfinished(uuid), outbox_event_in_flight(uuid),
    outbox_events_of_aggregates(uuid[]), outbox_events_of_aggregate(uuid),
    booking_notification_send(uuid), booking_notification_sends_of_event(uuid),
    booking_notification_sends_answered_by_ses(double precision, double precision, bigint),
    send_verdict(uuid), resent_on_evidence(uuid, text, text) TO booking_app;
-- Each function's callers, by role.
GRANT EXECUTE ON FUNCTION ses_stream_passed(timestamptz, double precision), ses_stream_reached(timestamptz),
    outbox_event_in_flight(uuid) TO outbox_sweeper, outbox_operator;
GRANT EXECUTE ON FUNCTION outbox_event(uuid), outbox_event_unfinished(uuid), booking_notification_send(uuid),
    booking_notification_sends_answered_by_ses(double precision, double precision, bigint) TO outbox_sweeper;
GRANT EXECUTE ON FUNCTION outbox_events_of_aggregates(uuid[]) TO outbox_poller;
GRANT EXECUTE ON FUNCTION outbox_events_of_aggregate(uuid), booking_notification_sends_of_event(uuid),
    send_verdict(uuid), resent_on_evidence(uuid, text, text) TO booking_api;
