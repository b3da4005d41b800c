-- Sending paused for an organizer whose mail draws complaints (issue 52,
-- Medium 5; notify/pauses.rs). Each complaint SES reports about a send is
-- counted against the booking's organizer, as it is recorded; at the third
-- the organizer is paused: their invitations, updates and reminders are
-- not sent (CAPPED, saying why), and the API refuses their new bookings
-- and changes (403 organizer-paused). Cancellations still go: the people
-- they invited must hear that a meeting is off. An operator sees why and
-- lifts it (outboxctl organizers), which counts from zero again.
-- Keyed by the organizer's address, as every event's payload carries it.
CREATE TABLE organizer_pauses (
    organizer_email text        PRIMARY KEY,
    complaints    integer     NOT NULL DEFAULT 0,
    paused_at     timestamptz,
    reason        text,
    lifted_at     timestamptz,
    lifted_by     text
);

-- Counts one complaint per send (SES may report one twice, at two
-- times), as the ses-events function records it. It runs as its owner:
-- that role reads no booking and writes no pause of its own.
CREATE FUNCTION organizer_pauses_count() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
DECLARE
    v_key text;
BEGIN
    IF (SELECT count(*) FROM send_feedback f WHERE f.send_id = NEW.send_id AND f.kind = 'Complaint') > 1 THEN
        RETURN NULL;
    END IF;
    SELECT b.organizer_email INTO v_key
      FROM booking_notification_sends s JOIN bookings b ON b.id = s.booking_id
     WHERE s.id = NEW.send_id;
    IF v_key IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO organizer_pauses AS p (organizer_email, complaints) VALUES (v_key, 1)
    ON CONFLICT (organizer_email) DO UPDATE SET complaints = p.complaints + 1;
    UPDATE organizer_pauses
       SET paused_at = now(), lifted_at = NULL, lifted_by = NULL,
           reason = format('%s complaints about this organizer''s mail since %s', complaints,
                           coalesce(to_char(lifted_at, 'YYYY-MM-DD'), 'the first'))
     WHERE organizer_email = v_key AND complaints >= 3 AND (paused_at IS NULL OR lifted_at IS NOT NULL);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION organizer_pauses_count() FROM PUBLIC;
CREATE TRIGGER organizer_pauses_count AFTER INSERT ON send_feedback
    FOR EACH ROW WHEN (NEW.kind = 'Complaint') EXECUTE FUNCTION organizer_pauses_count();

GRANT SELECT ON organizer_pauses TO booking_api, outbox_poller, outbox_operator, booking_app;
GRANT UPDATE (complaints, lifted_at, lifted_by) ON organizer_pauses TO outbox_operator, booking_app;
