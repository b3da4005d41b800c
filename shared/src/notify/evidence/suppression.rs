//! `suppressed_addresses`, every statement: the addresses never mailed
//! again. A permanent bounce suppresses the address that bounced, exactly
//! as it was spelled; a complaint, which only the person can make,
//! suppresses every spelling of their mailbox. Operators list and lift them.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use serde::Serialize;
use uuid::Uuid;

use crate::booking::domain::EmailAddress;
use crate::db::DbResult;
use crate::telemetry::mask_email;

/// Suppresses `recipient` for `reason` (the send `claim`'s bounce or
/// complaint): the address alone, or its whole mailbox. A complaint widens
/// a bounce's suppression of the same address; nothing narrows one.
pub async fn suppress(
    tx: &impl GenericClient,
    recipient: &str,
    covers: Covers,
    reason: &str,
    claim: Uuid,
) -> DbResult<u64> {
    let mailbox = mailbox_of(recipient);
    Ok(tx
        .execute(
            "INSERT INTO suppressed_addresses AS s (email, mailbox, covers, reason, send_id) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (email) DO UPDATE \
             SET covers = excluded.covers, mailbox = excluded.mailbox, reason = excluded.reason, \
                 send_id = excluded.send_id \
             WHERE s.covers = 'address' AND excluded.covers = 'mailbox'",
            &[&recipient, &mailbox, &covers.as_str(), &reason, &claim],
        )
        .await?)
}

/// The mailbox an address reaches ([`EmailAddress::mailbox`]); an address
/// that does not parse is its own (lower-cased) mailbox.
fn mailbox_of(email: &str) -> String {
    EmailAddress::parse(email).map(|e| e.mailbox()).unwrap_or_else(|_| email.to_lowercase())
}

/// What a suppression stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Covers {
    /// The address that bounced, spelled as it was.
    Address,
    /// Every spelling of the mailbox of the person who complained.
    Mailbox,
}

impl Covers {
    pub fn as_str(self) -> &'static str {
        match self {
            Covers::Address => "address",
            Covers::Mailbox => "mailbox",
        }
    }
}

/// Why an address is suppressed, if it is: it bounced, spelled exactly so,
/// or a complaint came from any spelling of its mailbox.
pub async fn suppression(client: &impl GenericClient, email: &str) -> DbResult<Option<String>> {
    Ok(suppressions_of(client, &[email]).await?.remove(email))
}

/// [`suppression`] for many addresses, in one statement: the suppressed
/// ones, with why (the earliest reason).
pub async fn suppressions_of(
    client: &impl GenericClient,
    emails: &[&str],
) -> DbResult<std::collections::HashMap<String, String>> {
    if emails.is_empty() {
        return Ok(Default::default());
    }
    let lowered: Vec<String> = emails.iter().map(|e| e.to_lowercase()).collect();
    let mailboxes: Vec<String> = emails.iter().map(|e| mailbox_of(e)).collect();
    let sql = "SELECT email, mailbox, covers, reason FROM suppressed_addresses \
               WHERE email = ANY($1) OR (covers = 'mailbox' AND mailbox = ANY($2)) ORDER BY created_at";
    let rows = client.query(&client.prepare_cached(sql).await?, &[&lowered, &mailboxes]).await?;
    let mut why = std::collections::HashMap::new();
    for (email, (lowered, mailbox)) in emails.iter().zip(lowered.iter().zip(&mailboxes)) {
        let first = rows.iter().find(|r| {
            r.get::<_, &str>(0) == lowered || (r.get::<_, &str>(2) == "mailbox" && r.get::<_, &str>(1) == mailbox)
        });
        if let Some(r) = first {
            why.insert(email.to_string(), r.get::<_, String>(3));
        }
    }
    Ok(why)
}

/// A suppressed address, for operators.
#[derive(Debug, Clone, Serialize)]
pub struct Suppression {
    pub email: String,
    pub reason: String,
    /// The send whose bounce or complaint suppressed it.
    pub send_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

/// How many addresses are suppressed.
pub async fn count(client: &impl GenericClient) -> DbResult<i64> {
    Ok(client.query_one("SELECT count(*) FROM suppressed_addresses", &[]).await?.get(0))
}

/// Suppressed addresses, newest first.
pub async fn suppressions(client: &impl GenericClient, limit: i64) -> DbResult<Vec<Suppression>> {
    let rows = client
        .query(
            "SELECT email, reason, send_id, created_at FROM suppressed_addresses ORDER BY created_at DESC LIMIT $1",
            &[&limit],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Suppression { email: r.get(0), reason: r.get(1), send_id: r.get(2), created_at: r.get(3) })
        .collect())
}

/// Lifts what stops mail to an address (it was fixed, or the complaint was
/// a mistake): its own bounce, and a complaint from any spelling of its
/// mailbox; returns the earliest that was removed, if any was.
pub async fn unsuppress(client: &impl GenericClient, email: &str, by: &str) -> DbResult<Option<Suppression>> {
    let rows = client
        .query(
            "DELETE FROM suppressed_addresses WHERE email = $1 OR (covers = 'mailbox' AND mailbox = $2) \
             RETURNING email, reason, send_id, created_at",
            &[&email.to_lowercase(), &mailbox_of(email)],
        )
        .await?;
    let removed = rows
        .iter()
        .map(|r| Suppression { email: r.get(0), reason: r.get(1), send_id: r.get(2), created_at: r.get(3) })
        .min_by_key(|s| s.created_at);
    if let Some(s) = &removed {
        tracing::warn!(recipient = %mask_email(&s.email), reason = %s.reason, %by, "suppression removed");
    }
    Ok(removed)
}
