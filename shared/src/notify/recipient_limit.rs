//! `recipient_daily_mails`, every statement: how often each mailbox was
//! mailed per UTC day, across every organizer (migration V16).
//!
//! The per-organizer limits of `booking::limits` bound what one account
//! can cause; this bounds what one person receives, however many accounts
//! invite them, and however they respell the address (it counts by
//! [`EmailAddress::mailbox`](crate::booking::domain::EmailAddress::mailbox):
//! `v+1@` and `v.i@gmail.com` are one mailbox). A send over the limit is
//! recorded CAPPED: not sent, not retried, counted for operators.
//!
//! A send counts when it is about to be made; one that turns out certainly
//! not sent (a known failure, throttling, the deadline) gives its count
//! back. A crash in between leaves it counted: the limit errs towards
//! mailing less.

use deadpool_postgres::GenericClient;

use crate::db::DbResult;

/// Counts one mail to each of `mailboxes` (in order; a mailbox may appear
/// more than once) for today, UTC, and says which may be sent: those that
/// keep their mailbox's count at or under `limit`. One statement: the row
/// lock of the upsert orders concurrent pollers, so a mailbox is never
/// mailed more than `limit` times a day. The refused still count, so a
/// mailbox over its limit stays over it for the day.
pub async fn take(client: &impl GenericClient, mailboxes: &[String], limit: i32) -> DbResult<Vec<bool>> {
    if mailboxes.is_empty() {
        return Ok(Vec::new());
    }
    const SQL: &str =
        "WITH want AS (SELECT m.mailbox, m.ord FROM unnest($1::text[]) WITH ORDINALITY AS m(mailbox, ord)), \
              per AS (SELECT mailbox, count(*)::int AS n FROM want GROUP BY mailbox), \
              counted AS ( \
                  INSERT INTO recipient_daily_mails (mailbox, day, mails) \
                  SELECT mailbox, (now() AT TIME ZONE 'UTC')::date, n FROM per \
                  ON CONFLICT (mailbox, day) DO UPDATE SET mails = recipient_daily_mails.mails + EXCLUDED.mails \
                  RETURNING mailbox, mails) \
         SELECT w.ord, counted.mails - per.n \
                       + row_number() OVER (PARTITION BY w.mailbox ORDER BY w.ord) <= $2::int AS allowed \
           FROM want w JOIN per USING (mailbox) JOIN counted USING (mailbox) \
          ORDER BY w.ord";
    let rows = client.query(&client.prepare_cached(SQL).await?, &[&mailboxes, &limit]).await?;
    Ok(rows.iter().map(|r| r.get("allowed")).collect())
}

/// Gives back today's counts of sends that were certainly not made (their
/// claims were released), one per item of `mailboxes`.
pub async fn give_back(client: &impl GenericClient, mailboxes: &[String]) -> DbResult<()> {
    if mailboxes.is_empty() {
        return Ok(());
    }
    const SQL: &str = "UPDATE recipient_daily_mails r SET mails = greatest(0, r.mails - g.n) \
           FROM (SELECT mailbox, count(*)::int AS n FROM unnest($1::text[]) AS m(mailbox) GROUP BY mailbox) g \
          WHERE r.mailbox = g.mailbox AND r.day = (now() AT TIME ZONE 'UTC')::date";
    client.execute(&client.prepare_cached(SQL).await?, &[&mailboxes]).await?;
    Ok(())
}

/// Today's count for `mailbox` (operators, tests).
pub async fn today(client: &impl GenericClient, mailbox: &str) -> DbResult<i32> {
    let row = client
        .query_opt(
            "SELECT mails FROM recipient_daily_mails WHERE mailbox = $1 AND day = (now() AT TIME ZONE 'UTC')::date",
            &[&mailbox],
        )
        .await?;
    Ok(row.map(|r| r.get(0)).unwrap_or(0))
}

/// Retention: deletes up to `limit` counts of days before yesterday
/// (UTC), as the organizers' counters go.
pub async fn purge_old(client: &impl GenericClient, limit: i64) -> DbResult<u64> {
    const SQL: &str = "DELETE FROM recipient_daily_mails WHERE (mailbox, day) IN ( \
             SELECT mailbox, day FROM recipient_daily_mails \
              WHERE day < (now() AT TIME ZONE 'UTC')::date - 1 LIMIT $1)";
    Ok(client.execute(SQL, &[&limit]).await?)
}
