//! `mailbox_organizers` and `mailbox_newcomers`, every statement: how many
//! invitations each organizer sent each mailbox today, which organizers a
//! mailbox already knows, and how many first mailed it today (migration
//! V26; the threat model is docs/security.md, "Limits").
//!
//! The per-organizer limits of `booking::limits` bound what one account
//! can cause; these bound what one person receives, and no organizer can
//! spend them for another:
//!
//! - only an invitation counts (a mail that introduces a booking to its
//!   recipient, [`Notification::introduces`](super::Notification)): an
//!   update or cancellation of one they may have received is never
//!   counted, never capped;
//! - each organizer has their own daily budget per mailbox
//!   ([`Verdict::OverOrganizerBudget`]);
//! - across organizers, only first contacts are bounded: at most so many
//!   organizers the mailbox never heard from may start mailing it a day
//!   ([`Verdict::TooManyNewcomers`]). An organizer it heard from before
//!   never counts there.
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

use super::Notification;
use crate::db::DbResult;

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
            Verdict::TooManyNewcomers => Some(format!(
                "capped: {} organizers who never mailed this recipient before already did today \
                 (LIMIT_NEW_ORGANIZERS_PER_RECIPIENT_PER_DAY)",
                limits.new_organizers
            )),
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
/// however many pollers run: a pair that met before is counted by an
/// UPDATE of its row (which waits for the row and reads its latest
/// version); a first contact is first counted on its mailbox's newcomers
/// by an upsert of that row, whose answer, the day's count after this
/// call's, admits the call's first contacts in order while within the
/// limit; only the admitted are then written as contacts. The refused
/// still count, so an organizer over their budget stays over it for the
/// day, and a refused first contact leaves no contact behind (the
/// organizer stays a newcomer). Two statements, not one: a crash between
/// them leaves newcomers counted without their contacts, which errs
/// towards mailing less. A first contact two pollers count at once (each
/// read the pair as unknown) is met by both; the second finds the first's
/// row and gives its newcomer count back, so one organizer is one
/// newcomer however its invitations were batched (only a third
/// statement, and only then). (Joined in one statement, the admission was
/// a nested loop over every pair of the call, the poller's slowest
/// statement.)
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
    // A pair that met before is counted in place (`known`); the others
    // are counted on their mailbox's newcomers, mailboxes in key order so
    // two pollers never wait on each other in turn.
    const COUNT: &str = "\
        WITH per AS (SELECT * FROM unnest($1::text[], $2::text[], $3::int[]) AS p(mailbox, organizer, n)), \
             known AS ( \
                 UPDATE mailbox_organizers o \
                    SET mails = CASE WHEN o.day = (now() AT TIME ZONE 'UTC')::date THEN o.mails ELSE 0 END + p.n, \
                        day = (now() AT TIME ZONE 'UTC')::date \
                   FROM per p WHERE o.mailbox = p.mailbox AND o.organizer = p.organizer \
                 RETURNING o.mailbox, o.organizer, o.mails), \
             fresh AS (SELECT p.mailbox, count(*)::int AS k \
                         FROM per p LEFT JOIN known USING (mailbox, organizer) WHERE known.mails IS NULL GROUP BY 1), \
             newcomers AS ( \
                 INSERT INTO mailbox_newcomers AS c (day, mailbox, organizers) \
                 SELECT (now() AT TIME ZONE 'UTC')::date, mailbox, k FROM fresh ORDER BY 2 \
                 ON CONFLICT (day, mailbox) DO UPDATE SET organizers = c.organizers + EXCLUDED.organizers \
                 RETURNING mailbox, organizers) \
        SELECT mailbox, organizer, mails FROM known \
         UNION ALL SELECT mailbox, NULL, organizers FROM newcomers";
    // The admitted first contacts, in key order.
    const MEET: &str = "\
        INSERT INTO mailbox_organizers AS o (mailbox, organizer, since, day, mails) \
        SELECT mailbox, organizer, (now() AT TIME ZONE 'UTC')::date, (now() AT TIME ZONE 'UTC')::date, n \
          FROM unnest($1::text[], $2::text[], $3::int[]) AS p(mailbox, organizer, n) ORDER BY 1, 2 \
        ON CONFLICT (mailbox, organizer) DO UPDATE \
           SET mails = CASE WHEN o.day = EXCLUDED.day THEN o.mails ELSE 0 END + EXCLUDED.mails, day = EXCLUDED.day \
        RETURNING mailbox, organizer, mails, xmax <> 0";
    // First contacts another poller made between the count's snapshot and
    // the meeting (the meeting found their row): not newcomers after all.
    const UNCOUNT: &str = "\
        UPDATE mailbox_newcomers c SET organizers = greatest(0, c.organizers - g.k) \
          FROM (SELECT mailbox, count(*)::int AS k FROM unnest($1::text[]) AS m(mailbox) GROUP BY 1) g \
         WHERE c.day = (now() AT TIME ZONE 'UTC')::date AND c.mailbox = g.mailbox";
    let columns = |pairs: &[(&str, &str, i32)]| -> (Vec<String>, Vec<String>, Vec<i32>) {
        let mut c = (Vec::new(), Vec::new(), Vec::new());
        for (m, o, n) in pairs {
            c.0.push(m.to_string());
            c.1.push(o.to_string());
            c.2.push(*n);
        }
        c
    };
    let (mailboxes, organizers, ns) = columns(&pairs);
    let rows = client.query(&client.prepare_cached(COUNT).await?, &[&mailboxes, &organizers, &ns]).await?;
    // Each pair's count after this call (the known ones, then the admitted).
    let mut counted: HashMap<(String, String), i32> = HashMap::new();
    let mut newcomers: HashMap<String, i32> = HashMap::new();
    for r in &rows {
        match r.get::<_, Option<String>>(1) {
            Some(organizer) => counted.insert((r.get(0), organizer), r.get(2)),
            None => newcomers.insert(r.get(0), r.get(2)),
        };
    }
    let is_known = |m: &str, o: &str| counted.contains_key(&(m.to_string(), o.to_string()));
    let fresh: Vec<(&str, &str, i32)> = pairs.iter().copied().filter(|(m, o, _)| !is_known(m, o)).collect();
    let mut in_mailbox: HashMap<&str, i32> = HashMap::new();
    for (m, _, _) in &fresh {
        *in_mailbox.entry(m).or_default() += 1;
    }
    // The call's first contacts of a mailbox, in order: admitted while the
    // day's newcomers before each (this call's earlier ones included) are
    // within the limit.
    let mut rank: HashMap<&str, i32> = HashMap::new();
    let admitted: Vec<(&str, &str, i32)> = fresh
        .into_iter()
        .filter(|(m, _, _)| {
            let r = rank.entry(m).or_default();
            *r += 1;
            newcomers.get(*m).copied().unwrap_or(i32::MAX) - in_mailbox[m] + *r <= limits.new_organizers
        })
        .collect();
    if !admitted.is_empty() {
        let (mailboxes, organizers, ns) = columns(&admitted);
        let mut met_meanwhile: Vec<String> = Vec::new();
        for r in client.query(&client.prepare_cached(MEET).await?, &[&mailboxes, &organizers, &ns]).await? {
            if r.get::<_, bool>(3) {
                met_meanwhile.push(r.get(0));
            }
            counted.insert((r.get(0), r.get(1)), r.get(2));
        }
        if !met_meanwhile.is_empty() {
            client.execute(&client.prepare_cached(UNCOUNT).await?, &[&met_meanwhile]).await?;
        }
    }
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
/// [`FORGET_AFTER_DAYS`] (such an organizer is a newcomer again), then up
/// to `limit` newcomer counts of days before yesterday (UTC).
pub async fn purge_old(client: &impl GenericClient, limit: i64) -> DbResult<u64> {
    const CONTACTS: &str = "DELETE FROM mailbox_organizers WHERE (mailbox, organizer) IN ( \
             SELECT mailbox, organizer FROM mailbox_organizers \
              WHERE day < (now() AT TIME ZONE 'UTC')::date - $2::int LIMIT $1)";
    const NEWCOMERS: &str = "DELETE FROM mailbox_newcomers WHERE (day, mailbox) IN ( \
             SELECT day, mailbox FROM mailbox_newcomers WHERE day < (now() AT TIME ZONE 'UTC')::date - 1 LIMIT $1)";
    let contacts = client.execute(CONTACTS, &[&limit, &FORGET_AFTER_DAYS]).await?;
    Ok(contacts + client.execute(NEWCOMERS, &[&limit]).await?)
}
