-- One send rate for the whole poller fleet (notify/send_rate.rs): a token
-- bucket per provider, shared by every live poller through this row, so the
-- fleet's total stays at the account's rate however many containers run.
--
--   account_rate   the provider's own figure (SES GetAccount's MaxSendRate)
--   cap            the operator's lower cap (SES_MAX_SEND_RATE), if any
--   rate           what the fleet may send: the lower of the two
--   tokens         sends the fleet may start now (refilled at `rate` from
--                  filled_at, up to a fifth of a second of sends)
--   slow_until     after a throttling answer the fleet sends at half its
--                  rate until then
CREATE TABLE send_rate (
    provider      text PRIMARY KEY,
    account_rate  double precision NOT NULL CHECK (account_rate > 0),
    cap           double precision CHECK (cap > 0),
    rate          double precision NOT NULL CHECK (rate > 0),
    tokens        double precision NOT NULL,
    filled_at     timestamptz NOT NULL DEFAULT now(),
    slow_until    timestamptz,
    granted       integer NOT NULL DEFAULT 0,
    refreshed_at  timestamptz NOT NULL DEFAULT now()
);

-- The poller takes tokens and records throttling; it writes the account's
-- rate at cold start and on each refresh.
GRANT SELECT, INSERT, UPDATE ON send_rate TO booking_app;
