//! How the outbox stands, for operators and metrics: statuses, counts, the
//! oldest due event, events waiting because their consumer stopped, stuck rows.

use std::collections::BTreeMap;
use std::time::Duration;

use const_format::formatcp;
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::status::sql::{DEAD, PENDING, PROCESSING};
use super::status::EventStatus;
use super::transitions;
use crate::db::DbResult;

/// The status of each id (None when it does not exist).
pub async fn statuses(client: &impl GenericClient, ids: &[Uuid]) -> DbResult<Vec<(Uuid, Option<EventStatus>)>> {
    let rows = client.query("SELECT id, status FROM outbox_events WHERE id = ANY($1)", &[&ids]).await?;
    ids.iter()
        .map(|id| {
            let row = rows.iter().find(|r| r.get::<_, Uuid>("id") == *id);
            Ok((*id, row.map(|r| EventStatus::from_row(r, "status")).transpose()?))
        })
        .collect()
}

/// Events by status, zeros included.
pub async fn counts(client: &impl GenericClient) -> DbResult<BTreeMap<EventStatus, i64>> {
    let mut counts: BTreeMap<EventStatus, i64> = EventStatus::ALL.iter().map(|s| (*s, 0)).collect();
    for row in client.query("SELECT status, count(*) AS n FROM outbox_events GROUP BY status", &[]).await? {
        counts.insert(EventStatus::from_row(&row, "status")?, row.get("n"));
    }
    Ok(counts)
}

/// Age in seconds of the oldest PENDING event that is due now (None when
/// nothing is due): since it was written, or for an event written to fall
/// due later (`due_at`) since it fell due.
pub async fn oldest_due_age(client: &impl GenericClient) -> DbResult<Option<f64>> {
    let sql = formatcp!(
        "SELECT extract(epoch FROM now() - min(greatest(created_at, due_at)))::float8 \
           FROM outbox_events WHERE status = {PENDING} AND next_attempt_at <= now()"
    );
    Ok(client.query_one(sql, &[]).await?.get(0))
}

/// Events waiting because their consumer stopped (requeued as
/// [`Requeue::Stopped`](super::transitions::Requeue::Stopped)).
#[derive(Debug, Clone, serde::Serialize, PartialEq)]
pub struct Stopped {
    pub events: i64,
    /// The latest reason, as the relay stored it.
    pub reason: String,
    /// When the latest was handed back.
    pub at: chrono::DateTime<chrono::Utc>,
}

/// The PENDING events handed back because their consumer stopped, if any.
pub async fn stopped(client: &impl GenericClient) -> DbResult<Option<Stopped>> {
    let sql = formatcp!(
        "SELECT count(*), max(updated_at), (array_agg(last_error ORDER BY updated_at DESC))[1] \
           FROM outbox_events WHERE status = {PENDING} AND stopped"
    );
    let row = client.query_one(sql, &[]).await?;
    let events: i64 = row.get(0);
    Ok((events > 0).then(|| Stopped { events, at: row.get(1), reason: row.get(2) }))
}

/// PROCESSING rows the sweep would reset ([`transitions::reset_stuck`]):
/// claimed longer than `stuck_after` ago, under no live lease.
pub async fn count_stuck(client: &impl GenericClient, stuck_after: Duration) -> DbResult<i64> {
    let sql = formatcp!("SELECT count(*) FROM outbox_events WHERE {}", transitions::STUCK);
    Ok(client.query_one(sql, &[&stuck_after.as_secs_f64()]).await?.get(0))
}

/// The backlog as the operator console shows it: what is due now, what is
/// written to fall due later, what is in flight, and the due
/// events by how long they have waited. Read from the partial indexes of
/// PENDING, PROCESSING and DEAD rows alone, so it costs what is unfinished,
/// never the history.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq)]
pub struct Backlog {
    pub due_now: i64,
    pub scheduled: i64,
    /// The earliest an event written to fall due later falls due.
    pub next_scheduled: Option<chrono::DateTime<chrono::Utc>>,
    pub in_flight: i64,
    pub dead: i64,
    /// Due events by how long they have waited: under 10 s, under a
    /// minute, under 10 minutes, longer.
    pub due_by_age: [i64; 4],
    /// Age of the oldest due event, in seconds.
    pub oldest_due_secs: Option<f64>,
    /// Its id.
    pub oldest_due: Option<Uuid>,
}

/// The backlog now ([`Backlog`]): one statement.
pub async fn backlog(client: &impl GenericClient) -> DbResult<Backlog> {
    const SQL: &str = formatcp!(
        "WITH p AS (SELECT id, next_attempt_at, greatest(created_at, due_at) AS since, \
                           next_attempt_at <= now() AS due \
                      FROM outbox_events WHERE status = {PENDING}), \
              d AS (SELECT extract(epoch FROM now() - since)::float8 AS age, id FROM p WHERE due) \
         SELECT (SELECT count(*) FROM d) AS due_now, \
                (SELECT count(*) FROM p WHERE NOT due) AS scheduled, \
                (SELECT min(next_attempt_at) FROM p WHERE NOT due) AS next_scheduled, \
                (SELECT count(*) FROM outbox_events WHERE status = {PROCESSING}) AS in_flight, \
                (SELECT count(*) FROM outbox_events WHERE status = {DEAD}) AS dead, \
                (SELECT count(*) FROM d WHERE age < 10) AS a10, \
                (SELECT count(*) FROM d WHERE age >= 10 AND age < 60) AS a60, \
                (SELECT count(*) FROM d WHERE age >= 60 AND age < 600) AS a600, \
                (SELECT count(*) FROM d WHERE age >= 600) AS older, \
                (SELECT max(age) FROM d) AS oldest_secs, \
                (SELECT id FROM d ORDER BY age DESC LIMIT 1) AS oldest"
    );
    let r = client.query_one(&client.prepare_cached(SQL).await?, &[]).await?;
    Ok(Backlog {
        due_now: r.get("due_now"),
        scheduled: r.get("scheduled"),
        next_scheduled: r.get("next_scheduled"),
        in_flight: r.get("in_flight"),
        dead: r.get("dead"),
        due_by_age: [r.get("a10"), r.get("a60"), r.get("a600"), r.get("older")],
        oldest_due_secs: r.get("oldest_secs"),
        oldest_due: r.get("oldest"),
    })
}

/// Why events died, the commonest first: `(reason, events, latest)`. The
/// reason is the stored error up to its first digit-free 120 characters
/// (ids and counts differ from one event to the next).
pub async fn dead_reasons(
    client: &impl GenericClient,
    limit: i64,
) -> DbResult<Vec<(String, i64, chrono::DateTime<chrono::Utc>)>> {
    const SQL: &str = formatcp!(
        "SELECT left(regexp_replace(coalesce(last_error, '(no reason stored)'), \
                     '[0-9a-f]{{8}}-[0-9a-f-]{{27}}|[0-9]+', '…', 'g'), 120) AS reason, \
                count(*) AS n, max(updated_at) AS latest \
           FROM outbox_events WHERE status = {DEAD} GROUP BY 1 ORDER BY 2 DESC, 3 DESC LIMIT $1"
    );
    let rows = client.query(&client.prepare_cached(SQL).await?, &[&limit]).await?;
    Ok(rows.iter().map(|r| (r.get("reason"), r.get("n"), r.get("latest"))).collect())
}

/// Why each of `asked` was not replayed by the replay that made `report`,
/// in words (the ones it replayed are absent).
pub async fn not_replayed(
    client: &impl GenericClient,
    asked: &[Uuid],
    report: &transitions::ReplayReport,
) -> DbResult<Vec<String>> {
    Ok(statuses(client, asked)
        .await?
        .into_iter()
        .filter(|(id, _)| !report.replayed.contains(id))
        .map(|(id, s)| match s {
            None => format!("{id} does not exist"),
            Some(_) if report.superseded.contains(&id) => {
                format!("{id} is superseded by a later delivered event of its aggregate")
            }
            Some(s) => format!("{id} is {s}, not DEAD"),
        })
        .collect())
}
