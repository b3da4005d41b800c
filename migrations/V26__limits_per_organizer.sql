-- Limits that protect the person they count, and cannot be spent against
-- them (notify/recipient_limit.rs; docs/security.md, "Limits"). V16 kept
-- one daily budget per mailbox, shared by every organizer: anyone could
-- spend it at 00:00 and have every other organizer's invitations, updates
-- and cancellations to that person dropped for the day. Now:
--
-- - Only an invitation is counted (the first mail of a booking that can
--   reach a person). An update or cancellation of an invitation they may
--   have received is never counted and never capped.
-- - Each organizer has their own budget per mailbox and UTC day
--   (LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY): what one organizer spends
--   never reduces what another may send.
-- - Across organizers, only first contacts are bounded: organizers who
--   never mailed the mailbox before may start at most
--   LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY contacts with it a day. An
--   organizer the person already has a booking with is never counted
--   there, so throwaway accounts can fill it only at the expense of other
--   newcomers.
--
-- Organizers and recipients are both keyed by the mailbox their address
-- reaches (`v+1@` is `v@`; Gmail's dots do not count): one person's
-- many spellings are one organizer, and one recipient.
CREATE TABLE mailbox_organizers (
    mailbox    text    NOT NULL,
    organizer  text    NOT NULL,
    -- The UTC day of the organizer's first counted invitation to the mailbox.
    since      date    NOT NULL,
    -- Invitations counted on `day` (the last day any was).
    day        date    NOT NULL,
    mails      integer NOT NULL CHECK (mails >= 0),
    PRIMARY KEY (mailbox, organizer)
);
-- Retention forgets contacts unused for a long time.
CREATE INDEX mailbox_organizers_day ON mailbox_organizers (day);

-- Counts `p_mailboxes[i]` invited by `p_organizers[i]` today (UTC), for each
-- i, and says what may be sent: 'sent' (within the organizer's budget),
-- 'organizer' (over it) or 'newcomers' (a first contact over the day's
-- limit of new organizers: nothing is recorded for it). Pairs are counted
-- in one statement each way; first contacts are serialised per mailbox by
-- an advisory lock, so concurrent pollers never admit more than the limit.
CREATE FUNCTION invitation_budget_take(p_mailboxes text[], p_organizers text[], p_per_organizer integer,
                                       p_new_organizers integer)
    RETURNS TABLE (ord bigint, verdict text)
    LANGUAGE plpgsql AS $$
DECLARE
    v_today date := (now() AT TIME ZONE 'UTC')::date;
    v_counted text[];
BEGIN
    -- Pairs that met before: their budget, counted.
    WITH per AS (SELECT m.mailbox, m.organizer, count(*)::int AS n
                   FROM unnest(p_mailboxes, p_organizers) AS m(mailbox, organizer) GROUP BY 1, 2),
         bumped AS (
             UPDATE mailbox_organizers o
                SET mails = CASE WHEN o.day = v_today THEN o.mails ELSE 0 END + per.n, day = v_today
               FROM per
              WHERE o.mailbox = per.mailbox AND o.organizer = per.organizer
             RETURNING o.mailbox || E'\n' || o.organizer AS pair)
    SELECT coalesce(array_agg(pair), '{}') INTO v_counted FROM bumped;

    -- First contacts: one mailbox at a time, in a fixed order.
    PERFORM pg_advisory_xact_lock(hashtext('mailbox_organizers'), hashtext(m.mailbox))
       FROM (SELECT DISTINCT u.mailbox FROM unnest(p_mailboxes, p_organizers) AS u(mailbox, organizer)
              WHERE NOT (u.mailbox || E'\n' || u.organizer = ANY (v_counted))
              ORDER BY 1) m;
    WITH per AS (SELECT m.mailbox, m.organizer, count(*)::int AS n, min(m.ord) AS first
                   FROM unnest(p_mailboxes, p_organizers) WITH ORDINALITY AS m(mailbox, organizer, ord)
                  WHERE NOT (m.mailbox || E'\n' || m.organizer = ANY (v_counted))
                  GROUP BY 1, 2),
         ranked AS (SELECT per.*, row_number() OVER (PARTITION BY per.mailbox ORDER BY per.first) AS rank,
                           (SELECT count(*) FROM mailbox_organizers o
                             WHERE o.mailbox = per.mailbox AND o.since = v_today) AS newcomers
                      FROM per)
    INSERT INTO mailbox_organizers AS o (mailbox, organizer, since, day, mails)
    SELECT r.mailbox, r.organizer, v_today, v_today, r.n FROM ranked r
     WHERE r.newcomers + r.rank <= p_new_organizers
        -- met since the first statement (another poller): counted all the same
        OR EXISTS (SELECT 1 FROM mailbox_organizers e WHERE e.mailbox = r.mailbox AND e.organizer = r.organizer)
    ON CONFLICT (mailbox, organizer) DO UPDATE
        SET mails = CASE WHEN o.day = v_today THEN o.mails ELSE 0 END + EXCLUDED.mails, day = v_today;

    -- Every pair now counted holds its lock until this statement commits:
    -- its count is this call's to read.
    RETURN QUERY
    WITH want AS (SELECT m.mailbox, m.organizer, m.ord
                    FROM unnest(p_mailboxes, p_organizers) WITH ORDINALITY AS m(mailbox, organizer, ord)),
         per AS (SELECT w.mailbox, w.organizer, count(*)::int AS n FROM want w GROUP BY 1, 2)
    SELECT w.ord,
           CASE WHEN o.mailbox IS NULL OR o.day <> v_today THEN 'newcomers'
                WHEN o.mails - per.n + row_number() OVER (PARTITION BY w.mailbox, w.organizer ORDER BY w.ord)
                     <= p_per_organizer THEN 'sent'
                ELSE 'organizer' END
      FROM want w JOIN per USING (mailbox, organizer)
      LEFT JOIN mailbox_organizers o ON o.mailbox = w.mailbox AND o.organizer = w.organizer
     ORDER BY w.ord;
END
$$;
REVOKE ALL ON FUNCTION invitation_budget_take(text[], text[], integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION invitation_budget_take(text[], text[], integer, integer) TO booking_app, outbox_poller;

GRANT SELECT, INSERT, UPDATE ON mailbox_organizers TO outbox_poller;
GRANT SELECT, DELETE ON mailbox_organizers TO outbox_sweeper;
GRANT SELECT, INSERT, UPDATE, DELETE ON mailbox_organizers TO booking_app;

-- The shared budget is gone; a day's counts are worth nothing once the
-- rule that read them changed.
DROP TABLE recipient_daily_mails;
