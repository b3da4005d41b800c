-- Fair turns between organizers in the claim (issue 52, Medium 4;
-- outbox/events/claim.rs). Claims went oldest-due first: one organizer's
-- 20,000 reminders due at one instant made every other organizer's
-- invitations and cancellations wait behind them, at the account's SES
-- rate, for the whole burst.
--
-- Each event names whose turn it takes (`turn`: the booking's organizer,
-- NULL for an event that takes none). `outbox_turns` holds one row per
-- turn, `next_turn` never later than its earliest PENDING event's time
-- (kept by the trigger below, on every write that makes an event PENDING),
-- so the turns with due work are a range of its index, however many
-- organizers hold events due next month. A claim takes a share of each
-- due turn, least recently served first, then fills the rest oldest-due
-- first (which alone guarantees every due event is claimed, whatever this
-- table says); a turn it served moves to now, or to its next event's time.
ALTER TABLE outbox_events ADD COLUMN turn text;
CREATE INDEX outbox_events_turns ON outbox_events (turn, next_attempt_at, id) WHERE status = 'PENDING';

-- `from_at, from_id`: no PENDING event of the turn is before this place in
-- `outbox_events_turns` (the claim reads the turn from there, not through
-- the entries its earlier claims left behind, which vacuum has not
-- removed yet: under a burst of one turn, thousands).
CREATE TABLE outbox_turns (
    turn      text        PRIMARY KEY,
    next_turn timestamptz NOT NULL,
    from_at   timestamptz NOT NULL,
    from_id   uuid        NOT NULL
);
CREATE INDEX outbox_turns_next ON outbox_turns (next_turn);

-- Lowers a turn's time and place to an event that became PENDING before
-- them (an insert, a retry, a reset, a replay): never locks a turn it
-- leaves alone but to insert it.
CREATE FUNCTION outbox_turns_keep() RETURNS trigger
LANGUAGE plpgsql
SET search_path = public, pg_temp
AS $$
BEGIN
    INSERT INTO outbox_turns (turn, next_turn, from_at, from_id)
    VALUES (NEW.turn, NEW.next_attempt_at, NEW.next_attempt_at, NEW.id)
    ON CONFLICT (turn) DO NOTHING;
    IF NOT FOUND THEN
        UPDATE outbox_turns
           SET next_turn = least(next_turn, NEW.next_attempt_at),
               from_at = CASE WHEN (from_at, from_id) > (NEW.next_attempt_at, NEW.id) THEN NEW.next_attempt_at
                              ELSE from_at END,
               from_id = CASE WHEN (from_at, from_id) > (NEW.next_attempt_at, NEW.id) THEN NEW.id ELSE from_id END
         WHERE turn = NEW.turn
           AND (next_turn > NEW.next_attempt_at OR (from_at, from_id) > (NEW.next_attempt_at, NEW.id));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_turns_keep AFTER INSERT OR UPDATE OF status, next_attempt_at ON outbox_events
    FOR EACH ROW WHEN (NEW.status = 'PENDING' AND NEW.turn IS NOT NULL) EXECUTE FUNCTION outbox_turns_keep();

-- Whoever makes an event PENDING keeps its turn; the claim moves it on.
GRANT SELECT, INSERT, UPDATE (next_turn, from_at, from_id) ON outbox_turns
    TO booking_api, outbox_poller, outbox_sweeper, outbox_operator, booking_app;
