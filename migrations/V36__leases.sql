-- Leases, not stuck timeouts (issue 51). A poller's run holds a lease: a
-- row here with an end a few seconds ahead (POLLER_LEASE_SECS), renewed
-- while the run works and never past its invocation's deadline. Every
-- event the run claims names the lease in outbox_events.lease_id. Once a
-- lease has ended unrenewed, the claim statement itself takes its events
-- over (FOR UPDATE SKIP LOCKED, as it takes PENDING ones) and gives each a
-- new lease: the previous holder's later writes about them name its own
-- lease and change nothing (fencing). The sweeper stays a backstop for
-- what no poller reaches.
--
-- One row per run, renewed in place (expires_at is in no index: a HOT
-- update, one WAL record a renewal per poller, whatever it holds).
CREATE TABLE outbox_leases (
    id          uuid        PRIMARY KEY,
    -- The worker (locked_by of what it claims), for operators.
    holder      text        NOT NULL,
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The lease an event is held under while PROCESSING (NULL otherwise, and
-- on rows an older build claimed: the sweeper resets those by locked_at,
-- as before).
ALTER TABLE outbox_events ADD COLUMN lease_id uuid;

-- The take-over finds an ended lease's events by their lease; the sweep and
-- its metric read the same few PROCESSING rows. Same number of index
-- entries per claim as the index it replaces (one per PROCESSING version).
DROP INDEX outbox_events_processing;
CREATE INDEX outbox_events_processing ON outbox_events (lease_id) WHERE status = 'PROCESSING';

-- The typed contract of the fence, owned by the outbox (shared/src/outbox/
-- events/lease.rs): of `events`, those PROCESSING under `lease`. A send's
-- claim, its outcome and an orphan's UNKNOWN are written only for these,
-- in the same statement, so a holder that lost an event changes nothing
-- of it. A plain SQL function: the planner inlines it. The events are found
-- by their primary key alone (`OFFSET 0` keeps the status and the lease out
-- of the scan), then checked on the row: with statistics from before a
-- drain's claims, the planner took `outbox_events_processing` for nearly
-- empty and read every event a run held (about a thousand) at each call,
-- by the lease or by the status (285 µs a notification, then 23).
CREATE FUNCTION outbox_events_held(events uuid[], lease uuid) RETURNS SETOF uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT e.id FROM (SELECT id, status, lease_id FROM outbox_events WHERE id = ANY(events) OFFSET 0) e
           WHERE e.status = 'PROCESSING' AND e.lease_id = lease $$;
REVOKE ALL ON FUNCTION outbox_events_held(uuid[], uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_events_held(uuid[], uuid) TO booking_app, outbox_poller;

-- The fence of the hot writes (a send's claim, its outcome), once per
-- statement: `lease` if it has not ended. An event leaves a lease that has
-- not ended only by its holder's own transition (DONE, a retry...): the
-- take-over and the sweep take only events of an ended lease, and a
-- renewal never revives one. So while the lease lives, every event its
-- holder still works on is its own; once it has ended, the holder's writes
-- change nothing, whether or not another claim took the events yet. Used
-- as `EXISTS (SELECT 1 FROM outbox_lease_live($n))`: one probe a statement
-- (a check per event cost a key lookup per event, 25 µs a notification).
CREATE FUNCTION outbox_lease_live(lease uuid) RETURNS SETOF uuid
    LANGUAGE sql STABLE PARALLEL SAFE
    AS $$ SELECT id FROM outbox_leases WHERE id = lease AND expires_at >= now() $$;
REVOKE ALL ON FUNCTION outbox_lease_live(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_lease_live(uuid) TO booking_app, outbox_poller;

-- The poller takes, renews and ends its leases, and writes an event's lease
-- with its claim; the sweeper clears it with a reset and deletes ended
-- leases nothing is held under; the operator's reopen and replay clear it.
GRANT SELECT, INSERT, DELETE, UPDATE (expires_at) ON outbox_leases TO outbox_poller;
GRANT SELECT, DELETE ON outbox_leases TO outbox_sweeper;
GRANT SELECT ON outbox_leases TO outbox_operator;
GRANT SELECT, INSERT, UPDATE, DELETE ON outbox_leases TO booking_app;
GRANT UPDATE (lease_id) ON outbox_events TO outbox_poller, outbox_sweeper, outbox_operator;
