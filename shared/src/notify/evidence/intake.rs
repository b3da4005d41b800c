//! What the SES-events function does with one delivered event: read and
//! check it ([`ses_event`](super::ses_event)), record it
//! ([`feedback`](super::feedback)), count it as metrics.

use serde::Serialize;
use serde_json::Value;

use super::feedback::{record, Recorded};
use super::ses_event::{parse, Kind, Origin, Refusal};
use crate::db::DbResult;
use crate::telemetry::emf::{self, Unit};

/// What the feedback function did with one event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Handled {
    Recorded(Recorded),
    /// Not an event this service reads, or not from this account's SES:
    /// logged and acknowledged, so it never poisons a batch or loops
    /// through retries, and changes nothing.
    Refused(Refusal),
}

/// Reads and records one delivered event, accepted only from `origin`'s
/// SES. Only a database error is an error (the invocation fails and
/// EventBridge retries it).
pub async fn handle(pool: &deadpool_postgres::Pool, origin: &Origin, value: &Value) -> DbResult<Handled> {
    let event = match parse(value, origin) {
        Ok(event) => event,
        Err(refusal) => {
            let metric = match refusal {
                Refusal::Foreign(_) => "ForeignSesEvents",
                Refusal::Malformed(_) => "MalformedSesEvents",
            };
            tracing::error!(reason = %refusal, "SES event refused: acknowledged and dropped");
            emf::emit("ses-events", &[(metric, 1.0, Unit::Count)]);
            return Ok(Handled::Refused(refusal));
        }
    };
    use tracing::Instrument;
    let span = tracing::info_span!(
        "ses_event",
        kind = event.kind.name(),
        claim = %event.claim.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
        link_trace_id = event.trace_id.as_deref().unwrap_or("-"),
    );
    async {
        let mut client = pool.get().await?;
        let recorded = record(&mut client, &event).await?;
        tracing::info!(?recorded, "SES event handled");
        emf::emit("ses-events", &metrics(&event.kind, &recorded));
        Ok(Handled::Recorded(recorded))
    }
    .instrument(span)
    .await
}

/// One event as EMF metrics (namespace `BookingOutbox`, function
/// `ses-events`): what SES reported, counted once (a repeat counts
/// nothing), for the template's bounce-rate and complaint-rate alarms.
pub fn metrics(kind: &Kind, recorded: &Recorded) -> Vec<(&'static str, f64, Unit)> {
    let (confirmed, suppressed) = match *recorded {
        Recorded::Recorded { confirmed, suppressed } => (confirmed, suppressed),
        Recorded::Duplicate => return vec![("RepeatedSesEvents", 1.0, Unit::Count)],
        Recorded::Canary => return vec![("CanaryEvents", 1.0, Unit::Count)],
        Recorded::AfterResend => return vec![("EventsAfterResend", 1.0, Unit::Count)],
        Recorded::Unmatched => return vec![("UnmatchedSesEvents", 1.0, Unit::Count)],
        Recorded::Mismatched => return vec![("MismatchedSesEvents", 1.0, Unit::Count)],
    };
    let one = |yes: bool| if yes { 1.0 } else { 0.0 };
    vec![
        ("SesSendEvents", one(*kind == Kind::Send), Unit::Count),
        ("Delivered", one(*kind == Kind::Delivery), Unit::Count),
        ("Bounced", one(matches!(kind, Kind::Bounce { permanent: true, .. })), Unit::Count),
        ("TransientBounced", one(matches!(kind, Kind::Bounce { permanent: false, .. })), Unit::Count),
        ("Complained", one(kind.complained()), Unit::Count),
        ("Rejected", one(*kind == Kind::Reject), Unit::Count),
        ("ConfirmedBySesEvent", one(confirmed), Unit::Count),
        ("Suppressed", suppressed as f64, Unit::Count),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_is_counted_once_under_its_metric() {
        let value = |m: &[(&str, f64, Unit)], name: &str| m.iter().find(|(n, ..)| *n == name).map(|(_, v, _)| *v);
        let new = Recorded::Recorded { confirmed: true, suppressed: 1 };
        let hard = Kind::Bounce { permanent: true, subtype: "General".into() };
        let m = metrics(&hard, &new);
        assert_eq!((value(&m, "Bounced"), value(&m, "TransientBounced")), (Some(1.0), Some(0.0)));
        assert_eq!((value(&m, "ConfirmedBySesEvent"), value(&m, "Suppressed")), (Some(1.0), Some(1.0)));
        assert_eq!(value(&metrics(&Kind::Delivery, &new), "Delivered"), Some(1.0));
        let complaint = Kind::Complaint { feedback: Some("abuse".into()), subtype: None };
        assert_eq!(value(&metrics(&complaint, &new), "Complained"), Some(1.0));
        let not_spam = Kind::Complaint { feedback: Some("not-spam".into()), subtype: None };
        assert_eq!(value(&metrics(&not_spam, &new), "Complained"), Some(0.0));
        let repeat = metrics(&Kind::Delivery, &Recorded::Duplicate);
        assert_eq!((value(&repeat, "Delivered"), value(&repeat, "RepeatedSesEvents")), (None, Some(1.0)));
    }
}
