-- The fleet's send rate without a new row version per take
-- (notify/send_rate.rs).
--
-- Until now every take of tokens updated the provider's send_rate row. A
-- row updated under a held snapshot (a report, a session idle in
-- transaction, a lagging replication slot) keeps every version, and each
-- take walked them: 0.37 ms a take fresh, 1.15 ms after 85,000 takes (one
-- pgbench session), about 12 ms after eight hours of a busy fleet.
--
-- Now the bucket is kept as GCRA (the generic cell rate algorithm): the
-- time from which the fleet's next send may start, in microseconds since
-- the epoch, in a sequence per provider. A sequence is not versioned:
-- setval overwrites its one value in place. Takes are serialised by an
-- advisory lock instead of the row lock. The row keeps what changes
-- rarely: the account's rate, the cap, the rate, and slow_until, written
-- when a poller configures a changed rate or SES throttles.
--
-- tokens, filled_at and granted are no longer read; they keep defaults so
-- that a poller still running the previous release during a deploy can
-- go on taking from them until it is replaced.
ALTER TABLE send_rate ALTER COLUMN tokens SET DEFAULT 0;

CREATE SEQUENCE send_rate_ses_next AS bigint MINVALUE 0 START 0;
GRANT SELECT, UPDATE ON SEQUENCE send_rate_ses_next TO booking_app;

-- Takes up to p_want tokens of p_provider's bucket. The bucket refills at
-- the rate (half of it while slow_until is ahead) and holds at most a
-- fifth of a second of sends (at least one). Returns how many were
-- granted, the rate now, and, when none, the seconds until the next one;
-- no row when the provider has none (no poller configured it yet).
CREATE FUNCTION send_rate_take(p_provider text, p_want integer)
RETURNS TABLE (granted integer, rate double precision, wait_secs double precision)
LANGUAGE plpgsql
SET search_path = public, pg_temp
AS $$
DECLARE
    v_rate  double precision;
    v_next  regclass := format('send_rate_%s_next', p_provider)::regclass;
    v_now   double precision;
    v_gap   double precision;
    v_start double precision;
    v_k     integer;
BEGIN
    SELECT CASE WHEN s.slow_until > clock_timestamp() THEN s.rate * 0.5 ELSE s.rate END
      INTO v_rate FROM send_rate s WHERE s.provider = p_provider;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('send_rate'), hashtext(p_provider));
    v_now := extract(epoch FROM clock_timestamp());
    v_gap := 1 / v_rate;
    -- A full bucket is a fifth of a second of sends (one at least) behind now.
    v_start := greatest(coalesce(pg_sequence_last_value(v_next), 0) / 1e6,
                        v_now - greatest(1, v_rate * 0.2) * v_gap);
    v_k := least(p_want, floor((v_now - v_start) / v_gap + 1e-9))::integer;
    IF v_k > 0 THEN
        PERFORM setval(v_next, ceil((v_start + v_k * v_gap) * 1e6)::bigint);
        RETURN QUERY SELECT v_k, v_rate, 0::double precision;
    ELSE
        RETURN QUERY SELECT 0, v_rate, v_start + v_gap - v_now;
    END IF;
END
$$;

-- After a throttling answer: the fleet sends at half its rate for
-- p_slow_for seconds, and its next send waits half a second more (never
-- more than a second from now: repeated answers do not stop it for long).
CREATE FUNCTION send_rate_slow_down(p_provider text, p_slow_for double precision)
RETURNS void
LANGUAGE plpgsql
SET search_path = public, pg_temp
AS $$
DECLARE
    v_next regclass := format('send_rate_%s_next', p_provider)::regclass;
    v_now  double precision;
BEGIN
    UPDATE send_rate SET slow_until = clock_timestamp() + make_interval(secs => p_slow_for)
     WHERE provider = p_provider;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('send_rate'), hashtext(p_provider));
    v_now := extract(epoch FROM clock_timestamp());
    PERFORM setval(v_next, ceil(least(greatest(coalesce(pg_sequence_last_value(v_next), 0) / 1e6, v_now) + 0.5,
                                      v_now + 1.0) * 1e6)::bigint);
END
$$;

REVOKE ALL ON FUNCTION send_rate_take(text, integer), send_rate_slow_down(text, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION send_rate_take(text, integer), send_rate_slow_down(text, double precision) TO booking_app;
