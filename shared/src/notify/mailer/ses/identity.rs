//! Whether SES will send from the stack's From address, asked of SES itself
//! (`GetEmailIdentity`) at cold start, before any booking's send: SES sends
//! from an address when the address, or its domain, is an identity of the
//! account in the region whose `VerifiedForSendingStatus` is true
//! (<https://docs.aws.amazon.com/ses/latest/APIReference-V2/API_GetEmailIdentity.html>).
//!
//! An identity that cannot send stops sending stack-wide with the reason
//! (every send answers `Misconfigured` without calling SES: the events wait,
//! nothing is FAILED or dead-lettered, `SendingStopped` alarms), and the
//! question is asked again at most every [`RECHECK`], so a verification
//! that completes later resumes sending by itself. A question SES could not
//! answer (no right, no network) stops nothing: the sends' own answers
//! still classify a refusal.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use aws_sdk_sesv2::operation::get_email_identity::GetEmailIdentityError;

/// How often a stopped poller asks again.
pub const RECHECK: Duration = Duration::from_secs(60);

/// How long the question may take, both identities together: it runs in
/// the cold start, which Lambda cuts at 10 s. No answer stops nothing.
pub const BUDGET: Duration = Duration::from_secs(3);

/// What SES says of the From address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// An identity of the address or its domain is verified for sending.
    Sends { identity: String, dkim: Option<String> },
    /// Neither can send: why, in SES's terms.
    Refuses(String),
    /// SES did not answer the question (an error other than NotFound).
    Unknown(String),
}

/// The identities SES would check for `from`: the address, then its domain.
pub fn candidates(from: &str) -> Vec<String> {
    let address = from.trim().to_ascii_lowercase();
    let mut out = vec![address.clone()];
    if let Some((_, domain)) = address.rsplit_once('@') {
        out.push(domain.to_string());
    }
    out
}

/// Asks SES about each candidate identity of `from` in the client's region,
/// within [`BUDGET`].
pub async fn check(client: &aws_sdk_sesv2::Client, from: &str, region: &str) -> Verdict {
    tokio::time::timeout(BUDGET, ask(client, from, region))
        .await
        .unwrap_or_else(|_| Verdict::Unknown(format!("SES GetEmailIdentity did not answer within {BUDGET:?}")))
}

async fn ask(client: &aws_sdk_sesv2::Client, from: &str, region: &str) -> Verdict {
    let mut seen = Vec::new();
    for identity in candidates(from) {
        match client.get_email_identity().email_identity(&identity).send().await {
            Ok(out) => {
                let dkim = out.dkim_attributes().and_then(|d| d.status()).map(|s| s.as_str().to_string());
                if out.verified_for_sending_status() {
                    return Verdict::Sends { identity, dkim };
                }
                let status = out.verification_status().map(|s| s.as_str().to_string());
                seen.push(format!(
                    "{identity} is not verified for sending (verification {}, DKIM {})",
                    status.as_deref().unwrap_or("unknown"),
                    dkim.as_deref().unwrap_or("not set up")
                ));
            }
            Err(e) if matches!(e.as_service_error(), Some(GetEmailIdentityError::NotFoundException(_))) => {
                seen.push(format!("{identity} is no identity of this account in {region}"));
            }
            Err(e) => {
                return Verdict::Unknown(format!(
                    "SES GetEmailIdentity {identity} failed: {}",
                    aws_sdk_sesv2::error::DisplayErrorContext(&e)
                ))
            }
        }
    }
    Verdict::Refuses(format!(
        "SES will not send from {from}: {}; verify the address or its domain in SES in {region} (docs/deploy.md)",
        seen.join("; ")
    ))
}

/// The last verdict that stopped sending, and when it was reached.
#[derive(Debug, Default)]
pub struct Stop {
    refused: Mutex<Option<(String, Instant)>>,
}

impl Stop {
    /// Records `verdict`: a refusal stops sending, anything else lifts it.
    pub fn record(&self, verdict: &Verdict) {
        let mut refused = self.refused.lock().unwrap();
        *refused = match verdict {
            Verdict::Refuses(reason) => Some((reason.clone(), Instant::now())),
            Verdict::Sends { .. } | Verdict::Unknown(_) => None,
        };
    }

    /// The reason sending is stopped, and whether it is due to be asked again.
    pub fn refused(&self) -> Option<(String, bool)> {
        let refused = self.refused.lock().unwrap();
        refused.as_ref().map(|(reason, at)| (reason.clone(), at.elapsed() >= RECHECK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_then_its_domain() {
        assert_eq!(candidates("Bookings@Example.com"), ["bookings@example.com", "example.com"]);
    }

    #[test]
    fn a_refusal_stops_until_a_verdict_lifts_it() {
        let stop = Stop::default();
        assert_eq!(stop.refused(), None);
        stop.record(&Verdict::Refuses("not verified".into()));
        assert_eq!(stop.refused(), Some(("not verified".into(), false)));
        stop.record(&Verdict::Unknown("no answer".into()));
        assert_eq!(stop.refused(), None, "a question SES did not answer stops nothing");
    }
}
