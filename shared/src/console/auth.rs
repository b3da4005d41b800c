//! Who is asking, and whether they may: an operator is a member of the
//! user pool's operators group (`CONSOLE_OPERATORS_GROUP`), nobody else.
//!
//! Deployed, every route of the console's data sits behind API Gateway's
//! JWT authorizer, which has verified the ID token's signature, issuer,
//! audience (the console's app client) and expiry, and put its claims in
//! the request context. The token travels in the `Authorization` header,
//! set by the console's own script: a browser never attaches it on its
//! own, so another site cannot make an operator's browser act (no cookie,
//! nothing ambient: the CSRF a cookie session invites has no way in).
//! State-changing requests must also be JSON and, when the browser says
//! where they come from, come from the console's own origin.
//!
//! What proves membership is the token's `cognito:groups` claim, which API
//! Gateway passes as a string: `[operators other]` (its rendering of a JSON
//! array), or the bare name when there is one.

use lambda_http::http::header;
use lambda_http::Request;

use super::config::{AuthMode, ConsoleConfig};
use crate::api::identity::claims_of;

/// Local development only (`AUTH_MODE=insecure-dev-headers`, `dev` builds).
#[cfg(feature = "dev")]
pub const DEV_EMAIL_HEADER: &str = "x-dev-user-email";
#[cfg(feature = "dev")]
pub const DEV_GROUPS_HEADER: &str = "x-dev-user-groups";

/// A member of the operators group: who every action is recorded as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// Their verified address, else the token's subject.
    pub name: String,
}

impl Operator {
    /// How an action records who decided it.
    pub fn recorded_as(&self) -> String {
        format!("console: {}", self.name)
    }
}

/// Why a request is refused: no identity at all (401), or one outside the
/// operators group (403). Neither says more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    NotSignedIn(&'static str),
    NotAnOperator,
}

/// The groups of a `cognito:groups` claim as API Gateway passes it.
pub fn groups_of(claim: &str) -> Vec<&str> {
    claim
        .trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(|c: char| c.is_whitespace() || c == ',')
        .map(|g| g.trim_matches('"'))
        .filter(|g| !g.is_empty())
        .collect()
}

/// The operator asking, or why they may not.
pub fn operator(req: &Request, config: &ConsoleConfig) -> Result<Operator, Refused> {
    let (name, groups) = match config.auth_mode {
        AuthMode::Jwt => from_claims(req)?,
        #[cfg(feature = "dev")]
        AuthMode::InsecureDevHeaders if claims_of(req).is_some_and(|c| !c.is_empty()) => from_claims(req)?,
        #[cfg(feature = "dev")]
        AuthMode::InsecureDevHeaders => {
            let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
            let name = header(DEV_EMAIL_HEADER).ok_or(Refused::NotSignedIn("no X-Dev-User-Email header"))?;
            (name, header(DEV_GROUPS_HEADER).unwrap_or_default())
        }
    };
    if !groups_of(&groups).contains(&config.operators_group.as_str()) {
        return Err(Refused::NotAnOperator);
    }
    Ok(Operator { name })
}

fn from_claims(req: &Request) -> Result<(String, String), Refused> {
    let claims = claims_of(req).ok_or(Refused::NotSignedIn("no verified token"))?;
    // An ID token: an access token names no audience (`aud`) and no address.
    if claims.get("token_use").is_some_and(|u| u != "id") {
        return Err(Refused::NotSignedIn("not an ID token"));
    }
    let subject = claims.get("sub").filter(|s| !s.trim().is_empty()).ok_or(Refused::NotSignedIn("no subject"))?;
    let verified = claims.get("email_verified").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let name = match claims.get("email") {
        Some(email) if verified => email.clone(),
        _ => subject.clone(),
    };
    Ok((name, claims.get("cognito:groups").cloned().unwrap_or_default()))
}

/// Whether a state-changing request may change state: JSON (a form on
/// another site can post only form encodings and plain text), and not
/// from another site when the browser says where it comes from.
pub fn same_origin_json(req: &Request) -> bool {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let json = header(header::CONTENT_TYPE.as_str())
        .is_some_and(|t| t.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json")));
    let site = header("sec-fetch-site").is_none_or(|s| s == "same-origin");
    let origin = match (header(header::ORIGIN.as_str()), header(header::HOST.as_str())) {
        (Some(origin), Some(host)) => origin.split_once("://").is_some_and(|(_, o)| o == host),
        _ => true,
    };
    json && site && origin
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_claim_is_read_as_api_gateway_passes_it() {
        assert_eq!(groups_of("[operators admins]"), vec!["operators", "admins"]);
        assert_eq!(groups_of("operators"), vec!["operators"]);
        assert_eq!(groups_of("[\"operators\",\"x\"]"), vec!["operators", "x"]);
        assert!(groups_of("[]").is_empty());
        assert!(!groups_of("[operators-not]").contains(&"operators"));
    }
}
