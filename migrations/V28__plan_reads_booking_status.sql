-- A replay or a resend runs an event again, perhaps after retention deleted
-- its booking's later events: the plan (notify/plan.rs) then reads whether
-- the booking is cancelled now, so no invitation to a cancelled meeting is
-- ever mailed. The poller reads these two columns of a booking, no other.
GRANT SELECT (id, status) ON bookings TO outbox_poller;
