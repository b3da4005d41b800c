//! `mailbox_organizers`, every statement: how many invitations each
//! organizer sent each mailbox today, which organizers a mailbox already
//! knows and since when, so how many first mailed it today (migrations V26
//! and V35, whose function `recipient_limit_take` counts under a lock per
//! mailbox; the threat model is docs/security.md, "Limits").
//!
//! The per-organizer limits of `booking::limits` bound what one account
//! can cause; these bound what one person receives, and no organizer can
//! spend them for another:
//!
//! - only an invitation counts (a mail that introduces a booking to its
//!   recipient, [`Notification::introduces`](crate::notify::notification::Notification)): an
//!   update or cancellation of one they may have received is never
//!   counted, never capped;
//! - each organizer has their own daily budget per mailbox
//!   ([`Verdict::OverOrganizerBudget`]);
//! - across organizers, only first contacts are bounded: at most so many
//!   organizers the mailbox never heard from may start mailing it a day
//!   ([`Verdict::TooManyNewcomers`]), in two pools of that many each:
//!   organizers with standing (whose invitation first reached someone
//!   [`STANDING_AFTER_DAYS`] ago or more) and the rest, so throwaway
//!   accounts made today never fill an established organizer's pool. An
//!   organizer it heard from before never counts there.
//!
//! Both sides are keyed by the mailbox an address reaches
//! ([`EmailAddress::mailbox`](crate::booking::domain::EmailAddress::mailbox):
//! `v+1@` and `v.i@gmail.com` are `v@` and `vi@gmail.com`), so throwaway
//! accounts on one mailbox's aliases are one organizer. A send over a limit
//! is recorded CAPPED: not sent, not retried (the person's next update of
//! the booking reads as its invitation), shown to the organizer and
//! counted for operators.
//!
//! A send counts when it is about to be made; one that turns out certainly
//! not sent gives its count back (not its first contact: a retry is the
//! same contact). A crash in between leaves it counted: the limit errs
//! towards mailing less.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;

use crate::db::DbResult;
use crate::notify::notification::Notification;

/// An organizer whose invitation first reached someone at least this many
/// days ago has standing: its first contacts are admitted from a pool of
/// their own, which accounts made since cannot fill (V40).
pub const STANDING_AFTER_DAYS: i32 = crate::booking::limits::NEW_ACCOUNT_DAYS;

/// How many invitations a mailbox may receive (`LIMIT_*` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecipientLimits {
    /// Invitations one organizer may send one mailbox per UTC day
    /// (`LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY`).
    pub invitations_per_organizer: i32,
    /// Organizers that never mailed a mailbox before who may start to,
    /// per UTC day (`LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY`).
    pub new_organizers: i32,
}

impl RecipientLimits {
    /// No limits (tests that mail one attendee many times).
    pub const UNLIMITED: RecipientLimits =
        RecipientLimits { invitations_per_organizer: i32::MAX, new_organizers: i32::MAX };
}

/// What may happen to one invitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// Its organizer already sent this mailbox their day's invitations.
    OverOrganizerBudget,
    /// A first contact, after the day's new organizers of this mailbox.
    TooManyNewcomers,
}

impl Verdict {
    /// Why a capped send was not made (stored, shown to its organizer; no
    /// address in it).
    pub fn reason(self, limits: RecipientLimits) -> Option<String> {
        match self {
            Verdict::Send => None,
            Verdict::OverOrganizerBudget => Some(format!(
                "capped: this organizer already sent this recipient {} invitations today \
                 (LIMIT_INVITATIONS_PER_RECIPIENT_PER_DAY)",
                limits.invitations_per_organizer
            )),
            // Neutral: nothing of who else mailed the person, nor how many.
            Verdict::TooManyNewcomers => Some(
                "capped: this recipient takes first invitations from only so many organizers a day \
                 (LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY); the booking's next change invites them again"
                    .to_string(),
            ),
        }
    }
}

/// One invitation: the mailbox it reaches and its organizer's mailbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invitation {
    pub mailbox: String,
    pub organizer: String,
}

/// Counts each of `invitations` (in order; one pair may appear more than
/// once) for today, UTC, and says which may be sent. No limit is exceeded
/// however many pollers run: the SQL function `recipient_limit_take` (V35)
/// locks every mailbox of the call (a transaction-scoped advisory lock, in
/// key order), counts a pair that met before by an update of its row, reads
/// each mailbox's newcomers of the day from its pairs after the lock, and
/// writes the first contacts admitted, in order, while the day's newcomers
/// are within the limit: one statement, one write per pair, atomic.
/// The refused still count on a pair that met before, so an organizer over
/// their budget stays over it for the day; a refused first contact leaves
/// no row behind (the organizer stays a newcomer). Run outside a
/// transaction (the function refuses any isolation but READ COMMITTED, and
/// its locks last until the transaction ends).
pub async fn take(
    client: &impl GenericClient,
    invitations: &[Invitation],
    limits: RecipientLimits,
) -> DbResult<Vec<Verdict>> {
    if invitations.is_empty() {
        return Ok(Vec::new());
    }
    // Each pair once, in order of its first invitation, with how many.
    let mut index: HashMap<(&str, &str), usize> = HashMap::new();
    let mut pairs: Vec<(&str, &str, i32)> = Vec::new();
    let at: Vec<usize> = invitations
        .iter()
        .map(|i| {
            let key = (i.mailbox.as_str(), i.organizer.as_str());
            let at = *index.entry(key).or_insert_with(|| {
                pairs.push((key.0, key.1, 0));
                pairs.len() - 1
            });
            pairs[at].2 += 1;
            at
        })
        .collect();
    const SQL: &str = "SELECT mailbox, organizer, mails FROM recipient_limit_take($1, $2, $3, $4, $5)";
    let mailboxes: Vec<&str> = pairs.iter().map(|p| p.0).collect();
    let organizers: Vec<&str> = pairs.iter().map(|p| p.1).collect();
    let ns: Vec<i32> = pairs.iter().map(|p| p.2).collect();
    let rows = client
        .query(
            &client.prepare_cached(SQL).await?,
            &[&mailboxes, &organizers, &ns, &limits.new_organizers, &STANDING_AFTER_DAYS],
        )
        .await?;
    // Each counted pair's invitations today, after this call.
    let counted: HashMap<(String, String), i32> = rows.iter().map(|r| ((r.get(0), r.get(1)), r.get(2))).collect();
    // The j-th invitation of a pair this call is within its organizer's
    // budget when the pair's count before the call plus j is.
    let mut seen = vec![0; pairs.len()];
    Ok(at
        .iter()
        .map(|&p| {
            let (m, o, n) = pairs[p];
            seen[p] += 1;
            match counted.get(&(m.to_string(), o.to_string())) {
                None => Verdict::TooManyNewcomers,
                Some(mails) if mails - n + seen[p] <= limits.invitations_per_organizer => Verdict::Send,
                Some(_) => Verdict::OverOrganizerBudget,
            }
        })
        .collect())
}

/// Gives back today's counts of invitations that were certainly not made
/// (their claims were released), one per item.
pub async fn give_back(client: &impl GenericClient, invitations: &[Invitation]) -> DbResult<()> {
    if invitations.is_empty() {
        return Ok(());
    }
    const SQL: &str = "UPDATE mailbox_organizers o SET mails = greatest(0, o.mails - g.n) \
           FROM (SELECT mailbox, organizer, count(*)::int AS n \
                   FROM unnest($1::text[], $2::text[]) AS m(mailbox, organizer) GROUP BY 1, 2) g \
          WHERE o.mailbox = g.mailbox AND o.organizer = g.organizer \
            AND o.day = (now() AT TIME ZONE 'UTC')::date";
    let (mailboxes, organizers) = split(invitations);
    client.execute(&client.prepare_cached(SQL).await?, &[&mailboxes, &organizers]).await?;
    Ok(())
}

impl Invitation {
    /// What `n` counts as: an invitation when it introduces its booking to
    /// its recipient, else nothing (an update or cancellation of a meeting
    /// they may know of is never counted nor capped).
    pub fn of(n: &Notification) -> Option<Invitation> {
        n.introduces.then(|| Invitation {
            mailbox: n.recipient.email.mailbox(),
            organizer: n.payload.booking.organizer.email.mailbox(),
        })
    }
}

fn split(invitations: &[Invitation]) -> (Vec<&str>, Vec<&str>) {
    invitations.iter().map(|i| (i.mailbox.as_str(), i.organizer.as_str())).unzip()
}

/// Today's invitations from `organizer` to `mailbox` (operators, tests).
pub async fn today(client: &impl GenericClient, mailbox: &str, organizer: &str) -> DbResult<i32> {
    let row = client
        .query_opt(
            "SELECT mails FROM mailbox_organizers WHERE mailbox = $1 AND organizer = $2 \
                AND day = (now() AT TIME ZONE 'UTC')::date",
            &[&mailbox, &organizer],
        )
        .await?;
    Ok(row.map(|r| r.get(0)).unwrap_or(0))
}

/// How many organizers first mailed `mailbox` today and were let through
/// (operators, tests).
pub async fn newcomers_today(client: &impl GenericClient, mailbox: &str) -> DbResult<i64> {
    let row = client
        .query_one(
            "SELECT count(*) FROM mailbox_organizers WHERE mailbox = $1 AND since = (now() AT TIME ZONE 'UTC')::date",
            &[&mailbox],
        )
        .await?;
    Ok(row.get(0))
}

/// How long a mailbox remembers an organizer that stopped mailing it.
pub const FORGET_AFTER_DAYS: i32 = 400;

/// Retention: deletes up to `limit` contacts unused for
/// [`FORGET_AFTER_DAYS`] (such an organizer is a newcomer again).
pub async fn purge_old(client: &impl GenericClient, limit: i64) -> DbResult<u64> {
    // The age again outside: a contact counted since the inner read (a
    // new row version) is rechecked, and kept.
    const CONTACTS: &str = "DELETE FROM mailbox_organizers WHERE (mailbox, organizer) IN ( \
             SELECT mailbox, organizer FROM mailbox_organizers \
              WHERE day < (now() AT TIME ZONE 'UTC')::date - $2::int LIMIT $1) \
           AND day < (now() AT TIME ZONE 'UTC')::date - $2::int";
    Ok(client.execute(CONTACTS, &[&limit, &FORGET_AFTER_DAYS]).await?)
}
