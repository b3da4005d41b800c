//! One trace per booking, across the outbox: the API's W3C trace context
//! (`traceparent`) is stored with each event it writes, in the same
//! transaction, and every later step names it.
//!
//! - The API takes Lambda's X-Ray trace (`Root=1-…;Parent=…;Sampled=…`,
//!   the same 128-bit id in X-Ray's spelling), else a new one; it runs the
//!   request in [`scope`], and [`current`] is what the outbox insert
//!   stores. A caller's own `traceparent` is never adopted (a caller could
//!   then file their requests and sends under someone else's trace): when
//!   valid, its trace id is logged with the request as `link_trace_id`.
//! - The poller's span for each send records the event's trace as
//!   `link_trace_id`: a link, not a parent, since one batch serves many
//!   requests. SES carries it back as the message tag `trace`, so the
//!   feedback handler logs it with each event about the message.
//! - Logs are JSON with the current span's fields, so every line of those
//!   spans carries the trace id: one query (CloudWatch Logs Insights, or
//!   X-Ray with `Tracing: Active`) finds the request and every send.

use std::fmt;

tokio::task_local! {
    static CURRENT: TraceContext;
}

/// A W3C trace context: `00-<trace id>-<parent id>-<flags>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    trace_id: String,
    parent_id: String,
    sampled: bool,
}

fn hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && s.bytes().any(|b| b != b'0')
}

fn random_hex(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes * 2);
    while out.len() < bytes * 2 {
        out.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    out.truncate(bytes * 2);
    out
}

impl TraceContext {
    /// A `traceparent` header (version 00), if it is a valid one.
    pub fn parse(header: &str) -> Option<Self> {
        let mut parts = header.trim().split('-');
        let (version, trace_id, parent_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        if version != "00" || parts.next().is_some() || !hex(trace_id, 32) || !hex(parent_id, 16) {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16).ok().filter(|_| flags.len() == 2)?;
        Some(Self { trace_id: trace_id.into(), parent_id: parent_id.into(), sampled: flags & 1 == 1 })
    }

    /// Lambda's X-Ray trace header (`Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1`).
    pub fn from_xray(header: &str) -> Option<Self> {
        let field = |name: &str| header.split(';').find_map(|kv| kv.trim().strip_prefix(name)?.strip_prefix('='));
        let root = field("Root")?;
        let mut parts = root.split('-');
        let (version, time, unique) = (parts.next()?, parts.next()?, parts.next()?);
        let trace_id = format!("{time}{unique}");
        if version != "1" || parts.next().is_some() || time.len() != 8 || !hex(&trace_id, 32) {
            return None;
        }
        let parent_id = field("Parent").filter(|p| hex(p, 16)).map(str::to_string).unwrap_or_else(|| random_hex(8));
        Some(Self { trace_id, parent_id, sampled: field("Sampled") == Some("1") })
    }

    /// A new trace (nothing upstream sent one).
    pub fn new_root() -> Self {
        Self { trace_id: random_hex(16), parent_id: random_hex(8), sampled: false }
    }

    /// Lambda's X-Ray trace, else a new one; never the caller's.
    pub fn of_request(xray: Option<&str>) -> Self {
        xray.and_then(Self::from_xray).unwrap_or_else(Self::new_root)
    }

    /// The 32 hex digits every step logs.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }
}

impl fmt::Display for TraceContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "00-{}-{}-{:02x}", self.trace_id, self.parent_id, u8::from(self.sampled))
    }
}

/// The trace id of a stored `traceparent`.
pub fn trace_id_of(traceparent: &str) -> Option<String> {
    TraceContext::parse(traceparent).map(|t| t.trace_id)
}

/// Runs `fut` with `trace` as the current trace context.
pub async fn scope<F: std::future::Future>(trace: TraceContext, fut: F) -> F::Output {
    CURRENT.scope(trace, fut).await
}

/// The current trace context's `traceparent`, inside [`scope`].
pub fn current() -> Option<String> {
    CURRENT.try_with(|t| t.to_string()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_read_only_when_valid() {
        let t = TraceContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(t.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(t.to_string(), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn an_xray_trace_is_the_same_id_in_w3c_spelling() {
        let t = TraceContext::from_xray("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
            .unwrap();
        assert_eq!(t.to_string(), "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01");
        assert_eq!(TraceContext::from_xray("Root=2-5759e988-bd862e3fe1be46a994272793"), None);
        let chosen = TraceContext::of_request(Some("Root=1-5759e988-bd862e3fe1be46a994272793"));
        assert_eq!(chosen.trace_id(), "5759e988bd862e3fe1be46a994272793");
        assert_eq!(TraceContext::of_request(None).trace_id().len(), 32);
    }
}
