//! Who is calling. In production API Gateway's JWT authorizer has verified
//! the token's signature, issuer, audience and scopes, and put its claims in
//! the request context; this module decides what those claims prove:
//!
//! - `sub` is required: it identifies the caller for good, and a booking
//!   records it, so an address that changes or passes to someone else never
//!   carries the booking with it;
//! - `email` is required and so is `email_verified` = true, always: an
//!   unverified address proves nothing, and would let anyone who can sign
//!   up with someone else's address read that person's bookings and act
//!   as them towards their attendees. There is no switch to turn it off.
//!
//! The organizer of a new booking is always this caller. The token's
//! `locale` claim, when it is a language tag (`fr`, `en-US`, or Cognito's
//! common `en_US`), is the organizer's language unless the body names one;
//! one that is not is ignored: a preference, never a reason to refuse.

use std::collections::HashMap;

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

use super::config::{ApiConfig, AuthMode};
use super::problem::Problem;
use crate::booking::domain::{Caller, DisplayName, EmailAddress, LocaleTag, Person};

/// Local development only (`AUTH_MODE=insecure-dev-headers`, `dev` builds).
#[cfg(feature = "dev")]
pub const DEV_EMAIL_HEADER: &str = "x-dev-user-email";
#[cfg(feature = "dev")]
pub const DEV_NAME_HEADER: &str = "x-dev-user-name";

fn unauthorized(detail: impl Into<String>) -> Problem {
    Problem::new(&super::problem::UNAUTHORIZED, detail)
}

/// What the request says about its caller, before it is parsed.
struct Claimed {
    email: String,
    name: Option<String>,
    subject: Option<String>,
    locale: Option<String>,
}

pub fn caller(req: &Request, config: &ApiConfig) -> Result<Caller, Problem> {
    let claimed = match config.auth_mode {
        AuthMode::Jwt => jwt_claims(req)?,
        // Claims a real authorizer put in the request win over the headers,
        // so a dev build behind API Gateway still acts as the token's owner.
        #[cfg(feature = "dev")]
        AuthMode::InsecureDevHeaders if claims_of(req).is_some_and(|c| !c.is_empty()) => jwt_claims(req)?,
        #[cfg(feature = "dev")]
        AuthMode::InsecureDevHeaders => dev_headers(req)?,
    };
    let email = EmailAddress::parse(&claimed.email)
        .map_err(|e| unauthorized(format!("the caller's email claim {}", e.problem)))?;
    let name = match claimed.name {
        Some(n) if !n.trim().is_empty() => n,
        _ => email.as_str().split('@').next().unwrap_or_default().to_string(),
    };
    let name = DisplayName::parse(&name).map_err(|e| unauthorized(format!("the caller's name claim {}", e.problem)))?;
    let locale = claimed.locale.and_then(|l| match LocaleTag::parse(&l.trim().replace('_', "-")) {
        Ok(tag) => Some(tag),
        Err(e) => {
            tracing::warn!(problem = %e.problem, "the token's locale claim is not a language tag; ignored");
            None
        }
    });
    Ok(Caller { person: Person { locale, ..Person::new(email, name) }, subject: claimed.subject })
}

#[cfg(feature = "dev")]
fn dev_headers(req: &Request) -> Result<Claimed, Problem> {
    let header = |name: &str| -> Result<Option<String>, Problem> {
        match req.headers().get(name) {
            None => Ok(None),
            Some(v) => {
                v.to_str().map(|s| Some(s.to_string())).map_err(|_| unauthorized(format!("{name} must be plain ASCII")))
            }
        }
    };
    let email = header(DEV_EMAIL_HEADER)?
        .ok_or_else(|| unauthorized(format!("AUTH_MODE=insecure-dev-headers: send the {DEV_EMAIL_HEADER} header")))?;
    Ok(Claimed { email, name: header(DEV_NAME_HEADER)?, subject: None, locale: None })
}

/// The claims API Gateway's JWT authorizer put in the request context
/// (API Gateway passes every claim as a string); the operator console
/// reads its callers' the same way.
pub fn claims_of(req: &Request) -> Option<&HashMap<String, String>> {
    match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => {
            ctx.authorizer.as_ref().and_then(|a| a.jwt.as_ref()).map(|jwt| &jwt.claims)
        }
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

fn jwt_claims(req: &Request) -> Result<Claimed, Problem> {
    let claims = claims_of(req).ok_or_else(|| unauthorized("no JWT authorizer claims in the request context"))?;
    let subject = claims
        .get("sub")
        .filter(|s| !s.trim().is_empty())
        .cloned()
        .ok_or_else(|| unauthorized("the token has no sub claim"))?;
    let email = claims.get("email").cloned().ok_or_else(|| unauthorized("the token has no email claim"))?;
    match claims.get("email_verified").map(|v| v.trim().to_ascii_lowercase()) {
        Some(v) if v == "true" => {}
        Some(_) => return Err(unauthorized("the token's email is not verified (email_verified is not true)")),
        None => return Err(unauthorized("the token has no email_verified claim; its email cannot be trusted")),
    }
    Ok(Claimed {
        email,
        name: claims.get("name").cloned(),
        subject: Some(subject),
        locale: claims.get("locale").cloned(),
    })
}
