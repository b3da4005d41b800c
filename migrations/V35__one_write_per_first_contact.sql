-- One write per first contact (notify/recipient_limit.rs). V26 counted an
-- organizer's first invitation to a mailbox twice: the pair's row in
-- mailbox_organizers and the mailbox's newcomer count of the day in
-- mailbox_newcomers, whose row lock kept the cross-organizer limit exact
-- under concurrent pollers. The second write was only ever a lock: the
-- day's newcomers of a mailbox are its pairs met that day (`since`).
--
-- Now a transaction-scoped advisory lock per mailbox orders the pollers
-- instead (no row, no WAL), and one function counts a call's invitations
-- under it: the pairs that met before in place, then the day's newcomers
-- of each mailbox read from its pairs after the lock (a statement of its
-- own, so its snapshot holds every contact committed before the lock was
-- granted), then the admitted first contacts written. One statement for
-- the poller, one round trip, atomic: a crash leaves nothing half counted.
--
-- mailbox_newcomers stays, with its grants, for the release before, whose
-- pollers and sweeper still run while this one deploys and again after a
-- rollback (expand, then contract: docs/deploy.md); nothing of this
-- release reads or writes it, and a later migration drops it. While pollers
-- of both releases run at once (a deploy's minutes), each orders first
-- contacts its own way, so a mailbox may admit, beyond its day's
-- newcomers, the first contacts an old poller counted at the same moment.

-- `since` rides along in the primary key's entries, so the count of a
-- mailbox's newcomers reads its entries, not its rows, once their pages are
-- all-visible (`since` is written once, so updates of a pair stay HOT).
-- The count still reads every organizer the mailbox knows (400 days of
-- them at most): with 1,000 known, once vacuumed, a call took no
-- measurably longer than for a new mailbox (0.55-0.71 ms, pgbench).
ALTER TABLE mailbox_organizers DROP CONSTRAINT mailbox_organizers_pkey,
    ADD CONSTRAINT mailbox_organizers_pkey PRIMARY KEY (mailbox, organizer) INCLUDE (since);

-- Counts the invitations of one call for today (UTC): p_counts[i]
-- invitations from p_organizers[i] to p_mailboxes[i], each pair once, in
-- the order their first contacts are admitted in. Returns each counted pair
-- with its invitations today after this call; a pair not returned is a
-- first contact refused because p_new_organizers organizers first mailed
-- its mailbox today already (it leaves no row: the organizer stays a
-- newcomer). Every mailbox of the call is locked first, in key order, so
-- two calls never wait on each other in turn; the locks last until the
-- caller's transaction ends (the statement's own, for the poller), so one
-- call per transaction, and READ COMMITTED only (refused otherwise): a
-- transaction's older snapshot would miss contacts committed before the
-- lock was granted. A call holds one lock per mailbox it names, at most a
-- claim group's (256 at the template's defaults): two pollers of 4 calls
-- in flight hold at most 2,048 of the shared lock table's 6,400 entries at
-- Postgres's defaults (max_locks_per_transaction 64 x max_connections
-- 100). No JIT: the count's estimate over a fast-growing table can pass
-- jit_above_cost, and compiling the statement (300 ms, measured) costs a
-- thousand times what running it does.
CREATE FUNCTION recipient_limit_take(p_mailboxes text[], p_organizers text[], p_counts integer[],
                                     p_new_organizers integer)
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
    -- A new statement, so a new snapshot: every contact committed by a
    -- call that held one of these locks before is in it.
    RETURN QUERY
    WITH p AS (SELECT * FROM unnest(p_mailboxes, p_organizers, p_counts) WITH ORDINALITY AS p(mailbox, organizer, n, ord)),
         known AS (
             UPDATE mailbox_organizers o
                SET mails = CASE WHEN o.day = v_today THEN o.mails ELSE 0 END + p.n, day = v_today
               FROM p WHERE o.mailbox = p.mailbox AND o.organizer = p.organizer
             RETURNING o.mailbox, o.organizer, o.mails),
         fresh AS (
             SELECT p.*, row_number() OVER (PARTITION BY p.mailbox ORDER BY p.ord) AS rank
               FROM p LEFT JOIN known k ON k.mailbox = p.mailbox AND k.organizer = p.organizer
              WHERE k.mailbox IS NULL),
         -- Each first contact reads its mailbox's newcomers of the day
         -- itself (a probe of the primary key), whatever the planner
         -- thinks `fresh` holds.
         met AS (
             INSERT INTO mailbox_organizers AS o (mailbox, organizer, since, day, mails)
             SELECT f.mailbox, f.organizer, v_today, v_today, f.n
               FROM fresh f
              WHERE (SELECT count(*) FROM mailbox_organizers t WHERE t.mailbox = f.mailbox AND t.since = v_today)
                    + f.rank <= p_new_organizers
             RETURNING o.mailbox, o.organizer, o.mails)
    SELECT * FROM known UNION ALL SELECT * FROM met;
END
$$;

REVOKE ALL ON FUNCTION recipient_limit_take(text[], text[], integer[], integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION recipient_limit_take(text[], text[], integer[], integer) TO booking_app, outbox_poller;
