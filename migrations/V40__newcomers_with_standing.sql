-- First contacts in two pools (issue 52, Medium 3; notify/recipient_limit.rs).
-- V35 let p_new_organizers organizers a day first mail a mailbox, whoever
-- they were. Ten throwaway accounts that mail a person at 00:00 UTC took
-- every slot, every day, and each genuine newcomer's invitation ended
-- CAPPED. Now an organizer with standing, one whose invitation first
-- reached someone at least p_standing_days days ago, has a pool of its
-- own: accounts made today, however many, fill only the pool of accounts
-- without standing. Each pool admits p_new_organizers a day.
--
-- A pair records which pool it was admitted from (`standing`), so each
-- pool's count of the day is read from the mailbox's pairs, as before.
-- Pairs stored before this migration count in the pool without standing.
ALTER TABLE mailbox_organizers ADD COLUMN standing boolean NOT NULL DEFAULT false;
-- An organizer's earliest contact, for its standing (`since` and
-- `organizer` are written once: a pair's updates stay HOT).
CREATE INDEX mailbox_organizers_organizer ON mailbox_organizers (organizer, since);

-- recipient_limit_take of V35, with each first contact admitted from its
-- organizer's pool (a NULL p_standing_days: one pool, as in V35). The rest
-- is V35's, said there: every mailbox of the call locked first, in key
-- order; READ COMMITTED only; one statement, one write per pair.
CREATE FUNCTION recipient_limit_take(p_mailboxes text[], p_organizers text[], p_counts integer[],
                                     p_new_organizers integer, p_standing_days integer)
RETURNS TABLE (mailbox text, organizer text, mails integer)
LANGUAGE plpgsql
SET search_path = public, pg_temp
SET jit = off
AS $$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_space integer := hashtext('mailbox_organizers');
    v_key   integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'recipient_limit_take counts under READ COMMITTED only, not %',
            current_setting('transaction_isolation');
    END IF;
    FOREACH v_key IN ARRAY ARRAY(SELECT DISTINCT hashtext(m) FROM unnest(p_mailboxes) AS m ORDER BY 1) LOOP
        PERFORM pg_advisory_xact_lock(v_space, v_key);
    END LOOP;
    RETURN QUERY
    WITH p AS (SELECT * FROM unnest(p_mailboxes, p_organizers, p_counts) WITH ORDINALITY AS p(mailbox, organizer, n, ord)),
         known AS (
             UPDATE mailbox_organizers o
                SET mails = CASE WHEN o.day = v_today THEN o.mails ELSE 0 END + p.n, day = v_today
               FROM p WHERE o.mailbox = p.mailbox AND o.organizer = p.organizer
             RETURNING o.mailbox, o.organizer, o.mails),
         unmet AS (
             SELECT p.*, p_standing_days IS NOT NULL AND EXISTS (
                        SELECT 1 FROM mailbox_organizers s
                         WHERE s.organizer = p.organizer AND s.since <= v_today - p_standing_days) AS standing
               FROM p LEFT JOIN known k ON k.mailbox = p.mailbox AND k.organizer = p.organizer
              WHERE k.mailbox IS NULL),
         fresh AS (
             SELECT u.*, row_number() OVER (PARTITION BY u.mailbox, u.standing ORDER BY u.ord) AS rank FROM unmet u),
         met AS (
             INSERT INTO mailbox_organizers AS o (mailbox, organizer, since, day, mails, standing)
             SELECT f.mailbox, f.organizer, v_today, v_today, f.n, f.standing
               FROM fresh f
              WHERE (SELECT count(*) FROM mailbox_organizers t
                      WHERE t.mailbox = f.mailbox AND t.since = v_today AND t.standing = f.standing)
                    + f.rank <= p_new_organizers
             RETURNING o.mailbox, o.organizer, o.mails)
    SELECT * FROM known UNION ALL SELECT * FROM met;
END
$$;

REVOKE ALL ON FUNCTION recipient_limit_take(text[], text[], integer[], integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION recipient_limit_take(text[], text[], integer[], integer, integer)
    TO booking_app, outbox_poller;

-- The release before's pollers call V35's signature while this one
-- deploys, and after a rollback: one pool for them, as before.
CREATE OR REPLACE FUNCTION recipient_limit_take(p_mailboxes text[], p_organizers text[], p_counts integer[],
                                                p_new_organizers integer)
RETURNS TABLE (mailbox text, organizer text, mails integer)
LANGUAGE sql
SET search_path = public, pg_temp
AS $$ SELECT * FROM recipient_limit_take(p_mailboxes, p_organizers, p_counts, p_new_organizers, NULL) $$;
