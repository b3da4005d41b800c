//! What holds back vacuum in this database: the oldest snapshot a session,
//! a prepared transaction or a replication slot keeps. While one is held,
//! vacuum cannot remove the row versions every claim, outcome and
//! completion leaves behind, and the outbox slows down (docs/operations.md).
//! Read through `outbox_vacuum_holders()` (migration V13), which shows who
//! holds it without giving the functions' role a monitoring privilege.

use deadpool_postgres::GenericClient;
use serde::Serialize;

use super::DbResult;

/// The holder of the oldest snapshot in this database.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Holder {
    /// `session`, `prepared_transaction` or `replication_slot`.
    pub kind: String,
    /// The session's backend (a slot's, while it is active).
    pub pid: Option<i32>,
    /// The session's application name, the prepared transaction's gid, or
    /// the slot's name.
    pub name: Option<String>,
    /// The session's state (e.g. `idle in transaction`), or whether the
    /// slot is active.
    pub state: Option<String>,
    /// Seconds since its transaction started (or was prepared); a slot has
    /// no such time.
    pub age_secs: Option<f64>,
    /// Transactions since its snapshot's xmin.
    pub xmin_age: i64,
}

/// How far back vacuum is held in this database, for metrics and status.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Horizon {
    /// The holder whose snapshot is oldest (by transactions).
    pub holder: Option<Holder>,
    /// The oldest age in seconds among the holders that have one (sessions
    /// and prepared transactions); 0 when none.
    pub oldest_age_secs: f64,
    /// The oldest snapshot's age in transactions, slots included; 0 when none.
    pub oldest_xmin_age: i64,
}

/// Reads the holders (every session but this one, prepared transactions,
/// replication slots) in one statement.
pub async fn fetch(client: &impl GenericClient) -> DbResult<Horizon> {
    let row = client
        .query_opt(
            "SELECT kind, pid, name, state, age_secs, xmin_age, \
                    coalesce(max(age_secs) OVER (), 0), max(xmin_age) OVER () \
               FROM outbox_vacuum_holders() ORDER BY xmin_age DESC, age_secs DESC NULLS LAST LIMIT 1",
            &[],
        )
        .await?;
    Ok(match row {
        None => Horizon::default(),
        Some(r) => Horizon {
            holder: Some(Holder {
                kind: r.get(0),
                pid: r.get(1),
                name: r.get(2),
                state: r.get(3),
                age_secs: r.get(4),
                xmin_age: r.get(5),
            }),
            oldest_age_secs: r.get(6),
            oldest_xmin_age: r.get(7),
        },
    })
}
