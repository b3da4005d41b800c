-- Reconciling what stays unknown (notify/unknown.rs): an UNKNOWN send that
-- SES has not confirmed by a Send (or later) event within the feedback grace
-- period is reported once as "not confirmed by SES" (very likely never
-- accepted); the sweeper stamps when. A later event still confirms it.
ALTER TABLE booking_notification_sends ADD COLUMN unconfirmed_at timestamptz;
