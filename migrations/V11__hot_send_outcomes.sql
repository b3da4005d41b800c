-- A send's outcome is a HOT update (heap-only: no new index entry, and
-- its old version is pruned from the page without vacuum): no index of
-- booking_notification_sends holds a column the outcome changes (status,
-- completed_at, provider_message_id), and each page keeps room for its
-- rows' outcomes. Before, every outcome wrote a new entry into each of the
-- five indexes, and every claim into all five.
--
-- booking_notification_sends_unsettled (claimed_at WHERE status IN
-- (CLAIMED, UNKNOWN)) becomes an index over the sends that say why they
-- are not SENT (every UNKNOWN does, by the new check), which the sweeper's
-- scan of unconfirmed UNKNOWN sends reads; retention reads claimed_at,
-- which never changes, instead of completed_at (a send is claimed before
-- it completes).
ALTER TABLE booking_notification_sends ADD CONSTRAINT booking_notification_sends_unknown_says_why
    CHECK (status <> 'UNKNOWN' OR last_error IS NOT NULL);
CREATE INDEX booking_notification_sends_claimed_at ON booking_notification_sends (claimed_at);
CREATE INDEX booking_notification_sends_with_error
    ON booking_notification_sends (claimed_at) WHERE last_error IS NOT NULL;
DROP INDEX booking_notification_sends_unsettled;
DROP INDEX booking_notification_sends_completed_at;
-- Half of each new page is left for its rows' outcomes (a claim is about
-- 180 bytes, its SENT version about 250).
ALTER TABLE booking_notification_sends SET (fillfactor = 50);
