-- What holds back vacuum in this database, for the sweeper's
-- OldestXminAge* metrics and `outboxctl status` (db/horizon.rs): the
-- sessions whose snapshot is older than everyone else's, the prepared
-- transactions, and the replication slots. While one of them holds an old
-- snapshot, vacuum cannot remove the row versions every claim, outcome and
-- completion leaves behind, and the outbox slows down.
--
-- pg_stat_activity shows another role's backend_xmin only to members of
-- pg_read_all_stats. This function runs as its owner (the migration role:
-- a superuser, a member of pg_monitor, or on RDS the master user, whose
-- rds_superuser sees every session) and returns no query text, only who
-- holds the horizon and for how long, so the functions' role needs no
-- monitoring privilege.
CREATE FUNCTION outbox_vacuum_holders()
RETURNS TABLE (kind text, pid integer, name text, state text, age_secs double precision, xmin_age bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'session', a.pid, a.application_name, a.state,
           extract(epoch FROM now() - coalesce(a.xact_start, a.query_start))::double precision,
           age(a.backend_xmin)::bigint
      FROM pg_stat_activity a
     WHERE a.backend_xmin IS NOT NULL AND a.datname = current_database() AND a.pid <> pg_backend_pid()
    UNION ALL
    SELECT 'prepared_transaction', NULL, p.gid, 'prepared',
           extract(epoch FROM now() - p.prepared)::double precision, age(p.transaction)::bigint
      FROM pg_prepared_xacts p
     WHERE p.database = current_database()
    UNION ALL
    SELECT 'replication_slot', s.active_pid, s.slot_name, CASE WHEN s.active THEN 'active' ELSE 'inactive' END,
           NULL, greatest(age(s.xmin), age(s.catalog_xmin))::bigint
      FROM pg_replication_slots s
     WHERE s.xmin IS NOT NULL OR s.catalog_xmin IS NOT NULL
$$;
REVOKE ALL ON FUNCTION outbox_vacuum_holders() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION outbox_vacuum_holders() TO booking_app;
