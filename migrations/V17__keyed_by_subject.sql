-- What belongs to an organizer is keyed by the token subject, not the
-- address (booking/domain Caller::key: 'sub:<sub>', or 'email:<address>'
-- where a caller has no subject, in local development only). An address
-- can pass to someone else at the identity provider; its new holder must
-- neither replay the old holder's Idempotency-Keys nor learn of their
-- bookings through an overlap 409.
--
-- Idempotency keys: the column now holds the caller's key. Keys stored
-- before this migration were the caller's address; they stay until their
-- 24-hour TTL, matching nobody, so a retry that straddles the deploy runs
-- again (and the overlap rule refuses a second copy of the same meeting).
ALTER TABLE idempotency_keys RENAME COLUMN caller_email TO caller_key;

-- The overlap rule: one organizer (by the same key) cannot hold two
-- confirmed bookings that overlap. A booking made before V3 has no subject
-- and keys by its address.
ALTER TABLE bookings DROP CONSTRAINT bookings_no_overlapping_active;
ALTER TABLE bookings ADD CONSTRAINT bookings_no_overlapping_active
    EXCLUDE USING gist ((coalesce('sub:' || organizer_sub, 'email:' || organizer_email)) WITH =,
                        tstzrange(starts_at, ends_at, '[)') WITH &&)
    WHERE (status = 'CONFIRMED');
