-- Until now every change of a booking wrote a fresh set of reminders, and
-- the poller superseded the older set by the later event. From this
-- version one event answers for each start and offset (booking/reminders.rs):
-- a later change that keeps both no longer supersedes it, and it reminds
-- the booking as it then stands. So a newer reminder still PENDING that
-- repeats an unfinished older one of the same booking, start and offset,
-- with no change between them that cancelled the meeting, moved it or
-- dropped the offset, would be a second reminder: it is deleted here, if
-- none of its sends was claimed yet (a requeued one may have some) and the
-- older one is still PENDING (one an older poller holds is settled by the
-- older rule, which the newer one then follows). The statement finds
-- nothing the new writes make, so running it again changes nothing.
WITH r AS (
    SELECT id, status, (payload -> 'booking' ->> 'id')::uuid AS booking,
           (payload -> 'booking' ->> 'version')::int AS version,
           payload -> 'booking' ->> 'start' AS start, payload ->> 'reminder' AS reminder
      FROM outbox_events
     WHERE event_type = 'BOOKING_REMINDER' AND status IN ('PENDING', 'PROCESSING')
)
DELETE FROM outbox_events d
 USING r n
 WHERE d.id = n.id AND n.status = 'PENDING'
   AND NOT EXISTS (SELECT 1 FROM booking_notification_sends s WHERE s.outbox_event_id = n.id)
   AND EXISTS (
       SELECT 1 FROM r o
        WHERE o.status = 'PENDING' AND o.booking = n.booking AND o.start = n.start AND o.reminder = n.reminder AND o.version < n.version
          AND NOT EXISTS (
              SELECT 1 FROM outbox_events e
               WHERE e.aggregate_id = n.booking
                 AND e.aggregate_version > o.version AND e.aggregate_version <= n.version
                 AND (e.event_type = 'BOOKING_CANCELLED'
                      OR e.payload -> 'booking' ->> 'start' IS DISTINCT FROM n.start
                      OR NOT coalesce((e.payload -> 'booking' -> 'reminders') ? n.reminder, false))));
