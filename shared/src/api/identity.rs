//! Who is calling. In production API Gateway's JWT authorizer has verified
//! the token and put its claims in the request context; this module only
//! reads them. The organizer of a new booking is always this caller.

use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

use super::problem::Problem;
use crate::booking::domain::{DisplayName, EmailAddress, Person};
use super::config::AuthMode;
use lambda_http::http::StatusCode;

/// Local development only (`AUTH_MODE=insecure-dev-headers`, `dev` builds).
#[cfg(feature = "dev")]
pub const DEV_EMAIL_HEADER: &str = "x-dev-user-email";
#[cfg(feature = "dev")]
pub const DEV_NAME_HEADER: &str = "x-dev-user-name";

fn unauthorized(detail: impl Into<String>) -> Problem {
    Problem::new(StatusCode::UNAUTHORIZED, "unauthorized", "Not authenticated", detail)
}

pub fn caller(req: &Request, mode: AuthMode) -> Result<Person, Problem> {
    let (email, name) = match mode {
        AuthMode::Jwt => jwt_claims(req)?,
        // Claims a real authorizer put in the request win over the headers,
        // so a dev build behind API Gateway still acts as the token's owner.
        #[cfg(feature = "dev")]
        AuthMode::InsecureDevHeaders if has_jwt_claims(req) => jwt_claims(req)?,
        #[cfg(feature = "dev")]
        AuthMode::InsecureDevHeaders => dev_headers(req)?,
    };
    let email = EmailAddress::parse(&email)
        .map_err(|e| unauthorized(format!("the caller's email claim {e}")))?;
    let name = match name {
        Some(n) if !n.trim().is_empty() => n,
        _ => email.as_str().split('@').next().unwrap_or_default().to_string(),
    };
    let name = DisplayName::parse(&name).map_err(|e| unauthorized(format!("the caller's name claim {e}")))?;
    Ok(Person { email, name })
}

#[cfg(feature = "dev")]
fn dev_headers(req: &Request) -> Result<(String, Option<String>), Problem> {
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
    Ok((email, header(DEV_NAME_HEADER)?))
}

/// The claims API Gateway's JWT authorizer put in the request context.
fn claims_of(req: &Request) -> Option<&std::collections::HashMap<String, String>> {
    match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV2(ctx)) => {
            ctx.authorizer.as_ref().and_then(|a| a.jwt.as_ref()).map(|jwt| &jwt.claims)
        }
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

#[cfg(feature = "dev")]
fn has_jwt_claims(req: &Request) -> bool {
    claims_of(req).is_some_and(|c| !c.is_empty())
}

fn jwt_claims(req: &Request) -> Result<(String, Option<String>), Problem> {
    let claims = claims_of(req).ok_or_else(|| unauthorized("no JWT authorizer claims in the request context"))?;
    let email = claims
        .get("email")
        .cloned()
        .ok_or_else(|| unauthorized("the token has no email claim"))?;
    Ok((email, claims.get("name").cloned()))
}
