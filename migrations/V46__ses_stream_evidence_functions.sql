-- SES's evidence, as the evidence module (notify::evidence::watermark)
-- exports it to the send ledger (notify::sends): two functions over
-- ses_event_watermarks, so the ledger's statements ask the question by name
-- instead of pasting the evidence module's SQL (or reading its table).
-- Both are plain SQL functions, STABLE and not STRICT: the planner inlines
-- them where they are called, so the plans are those of the pasted SQL.
-- They run with the caller's rights (SELECT on ses_event_watermarks).

-- The watermark second that proves SES's stream moved past a send that
-- could last have reached SES at `reaches_by`, at least `grace_secs` ago, and kept delivering for the
-- whole grace since (an event arrived at least a grace after it: a stream
-- that stopped in between proves nothing about the send). Called as
-- `LEFT JOIN LATERAL ses_stream_passed(r.reaches_by, $grace) w`.
--
-- SES's clock may be ahead of the database's by up to 2 seconds (the skew):
-- an event about a message SES accepted 2 s or more after a send could last
-- have reached it is evidence about that send.
CREATE FUNCTION ses_stream_passed(reaches_by timestamptz, grace_secs double precision)
    RETURNS TABLE (mail_second timestamptz, received_at timestamptz)
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT w.mail_second, w.received_at FROM ses_event_watermarks w
           WHERE w.mail_second >= reaches_by + interval '2 seconds'
             AND w.received_at <= now() - make_interval(secs => grace_secs)
             AND EXISTS (SELECT 1 FROM ses_event_watermarks l
                          WHERE l.received_at >= w.received_at + make_interval(secs => grace_secs))
           ORDER BY w.mail_second LIMIT 1 $$;

-- Whether SES's stream has moved past such a send at all, however
-- recently.
CREATE FUNCTION ses_stream_reached(reaches_by timestamptz)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT EXISTS (SELECT 1 FROM ses_event_watermarks w
                          WHERE w.mail_second >= reaches_by + interval '2 seconds') $$;

REVOKE ALL ON FUNCTION ses_stream_passed(timestamptz, double precision),
                       ses_stream_reached(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ses_stream_passed(timestamptz, double precision),
                          ses_stream_reached(timestamptz)
    TO booking_app, outbox_sweeper, outbox_operator;
