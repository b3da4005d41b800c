//! RFC 9457 `application/problem+json` error bodies.

use lambda_http::http::{header, StatusCode};
use lambda_http::{Body, Response};
use serde::Serialize;

/// One invalid field: its JSON path (`attendees[2].email`) and why.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct InvalidParam {
    pub name: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    #[serde(rename = "type")]
    pub kind: String,
    pub title: &'static str,
    pub status: u16,
    pub detail: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invalid_params: Vec<InvalidParam>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_version: Option<i32>,
    /// Seconds for the `Retry-After` header (429; 503 defaults to 1).
    #[serde(skip)]
    pub retry_after: Option<u64>,
}

impl Problem {
    pub fn new(status: StatusCode, slug: &str, title: &'static str, detail: impl Into<String>) -> Self {
        Self {
            kind: format!("/problems/{slug}"),
            title,
            status: status.as_u16(),
            detail: detail.into(),
            invalid_params: Vec::new(),
            current_version: None,
            retry_after: None,
        }
    }

    /// 422 naming every invalid field.
    pub fn invalid(params: Vec<InvalidParam>) -> Self {
        let detail = params.iter().map(|p| format!("{}: {}", p.name, p.reason)).collect::<Vec<_>>().join("; ");
        Self {
            invalid_params: params,
            ..Self::new(StatusCode::UNPROCESSABLE_ENTITY, "validation", "The request is invalid", detail)
        }
    }

    /// 422 for one field.
    pub fn field(name: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::invalid(vec![InvalidParam { name: name.into(), reason: reason.into() }])
    }

    pub fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "not-found", "Not found", "no such booking")
    }

    pub fn status(&self) -> StatusCode {
        StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    pub fn into_response(self) -> Response<Body> {
        let body = serde_json::to_string(&self).expect("problem serialises");
        let mut builder =
            Response::builder().status(self.status()).header(header::CONTENT_TYPE, "application/problem+json");
        let retry_after = match self.retry_after {
            Some(secs) => Some(secs),
            None if self.status == StatusCode::SERVICE_UNAVAILABLE.as_u16() => Some(1),
            None => None,
        };
        if let Some(secs) = retry_after {
            builder = builder.header(header::RETRY_AFTER, secs.to_string());
        }
        builder.body(Body::Text(body)).expect("valid response")
    }
}
