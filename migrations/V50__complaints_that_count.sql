-- A complaint SES publishes carries its feedback type (`abuse`, `not-spam`,
-- ...) and, when SES sent nothing because the address was on the account's
-- suppression list, the subtype `OnAccountSuppressionList`
-- (docs.aws.amazon.com/ses/latest/dg/event-publishing-retrieving-firehose-contents.html).
-- ses-events records that in send_feedback.subtype (NULL before this
-- release). Neither a `not-spam` report nor a complaint about a message SES
-- never sent is a person complaining of the organizer's mail: V43's trigger
-- no longer counts them toward the organizer's pause. Rows of the release
-- before (subtype NULL) count as before.
-- One count per send, of the complaints that count.
CREATE OR REPLACE FUNCTION organizer_pauses_count() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = public, pg_temp
AS $$
DECLARE
    v_key text;
BEGIN
    IF (SELECT count(*) FROM send_feedback f WHERE f.send_id = NEW.send_id AND f.kind = 'Complaint'
          AND f.subtype IS DISTINCT FROM 'not-spam' AND f.subtype IS DISTINCT FROM 'OnAccountSuppressionList') > 1 THEN
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
DROP TRIGGER organizer_pauses_count ON send_feedback;
CREATE TRIGGER organizer_pauses_count AFTER INSERT ON send_feedback
    FOR EACH ROW
    WHEN (NEW.kind = 'Complaint' AND NEW.subtype IS DISTINCT FROM 'not-spam'
          AND NEW.subtype IS DISTINCT FROM 'OnAccountSuppressionList')
    EXECUTE FUNCTION organizer_pauses_count();
