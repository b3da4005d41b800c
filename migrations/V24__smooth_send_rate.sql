-- The fleet's send rate, smooth by construction (notify/send_rate.rs,
-- notify/pace.rs).
--
-- Until now the bucket held a fifth of a second of sends on top of the
-- rate, and a throttling answer halved the fleet's rate for 10 s. Against a
-- limiter that allows at most the rate in any one-second window (what "per
-- second" may mean; AWS promises no burst), the burst broke the window and
-- each 429 cost half the rate: 0.51 x MaxSendRate delivered.
--
-- Now each send gets a start time of its own from the fleet's schedule: a
-- sequence of times exactly 1/rate apart (GCRA with no burst), shared by
-- every poller through send_rate_<provider>_next as before (a sequence:
-- setval writes no row version). A poller reserves the next times up to a
-- short horizon ahead and starts each send at its time, so no two sends of
-- the fleet start closer than 1/rate, and no second holds more than the
-- rate. The rate the schedule keeps is the row's rate times the poller's
-- headroom (SEND_RATE_HEADROOM, for the network's jitter) times the
-- throttle factor below.
--
-- A throttling answer lowers the factor a little (multiplicative decrease,
-- at most once a second, however many pollers were answered), and the
-- factor grows back by a fixed step a second (additive increase) until it
-- is 1 again: the fleet keeps most of its rate and finds the limit again.
-- The factor and its time are written only on a throttling answer.
ALTER TABLE send_rate
    ADD COLUMN factor double precision NOT NULL DEFAULT 1 CONSTRAINT send_rate_factor CHECK (factor > 0 AND factor <= 1),
    -- Long ago: a new row's first throttling answer lowers the factor.
    ADD COLUMN factor_at timestamptz NOT NULL DEFAULT 'epoch';

-- Reserves up to p_want start times of p_provider's schedule, the first no
-- earlier than p_lead seconds from now and none later than p_lead +
-- p_horizon from now. Returns how many were reserved, when the first is
-- (seconds from now), the gap between two (seconds), the rate they keep,
-- and, when none could be, the seconds until one can; no row when the
-- provider has none (no poller configured it yet).
CREATE FUNCTION send_rate_reserve(p_provider text, p_want integer, p_lead double precision,
                                  p_horizon double precision, p_headroom double precision,
                                  p_recovery double precision)
RETURNS TABLE (granted integer, first_in double precision, gap double precision, rate double precision,
               wait_secs double precision)
LANGUAGE plpgsql
SET search_path = public, pg_temp
AS $$
DECLARE
    v_rate  double precision;
    v_next  regclass := format('send_rate_%s_next', p_provider)::regclass;
    v_now   double precision;
    v_gap   double precision;
    v_start double precision;
    v_last  double precision;
    v_k     integer;
BEGIN
    SELECT s.rate * p_headroom
           * least(1.0, s.factor + p_recovery * extract(epoch FROM clock_timestamp() - s.factor_at))
      INTO v_rate FROM send_rate s WHERE s.provider = p_provider;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('send_rate'), hashtext(p_provider));
    v_now := extract(epoch FROM clock_timestamp());
    v_gap := 1 / v_rate;
    -- The fleet's next free time, or the lead from now if that is later:
    -- an idle fleet starts at once, never with a burst of saved-up sends.
    v_start := greatest(coalesce(pg_sequence_last_value(v_next), 0) / 1e6, v_now + p_lead);
    v_last := v_now + p_lead + p_horizon;
    IF v_start > v_last THEN
        RETURN QUERY SELECT 0, v_start - v_now, v_gap, v_rate, v_start - v_last;
        RETURN;
    END IF;
    v_k := least(p_want, floor((v_last - v_start) / v_gap + 1e-9)::integer + 1);
    PERFORM setval(v_next, ceil((v_start + v_k * v_gap) * 1e6)::bigint);
    RETURN QUERY SELECT v_k, v_start - v_now, v_gap, v_rate, 0::double precision;
END
$$;

-- After a throttling answer: the factor becomes p_decrease times what it is
-- now (never below p_floor), unless it was lowered less than p_once_per
-- seconds ago (one burst answered several times lowers it once). Returns
-- the factor now.
CREATE FUNCTION send_rate_throttled(p_provider text, p_decrease double precision, p_floor double precision,
                                    p_recovery double precision, p_once_per double precision)
RETURNS double precision
LANGUAGE plpgsql
SET search_path = public, pg_temp
AS $$
DECLARE
    v_factor double precision;
BEGIN
    UPDATE send_rate s
       SET factor = greatest(p_floor,
                             p_decrease * least(1.0, s.factor + p_recovery
                                                     * extract(epoch FROM clock_timestamp() - s.factor_at))),
           factor_at = clock_timestamp()
     WHERE s.provider = p_provider AND s.factor_at < clock_timestamp() - make_interval(secs => p_once_per)
    RETURNING s.factor INTO v_factor;
    IF v_factor IS NULL THEN
        SELECT least(1.0, s.factor + p_recovery * extract(epoch FROM clock_timestamp() - s.factor_at))
          INTO v_factor FROM send_rate s WHERE s.provider = p_provider;
    END IF;
    RETURN v_factor;
END
$$;

REVOKE ALL ON FUNCTION send_rate_reserve(text, integer, double precision, double precision, double precision,
                                         double precision),
                       send_rate_throttled(text, double precision, double precision, double precision,
                                           double precision)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION send_rate_reserve(text, integer, double precision, double precision, double precision,
                                            double precision),
                          send_rate_throttled(text, double precision, double precision, double precision,
                                              double precision)
    TO booking_app, outbox_poller;
