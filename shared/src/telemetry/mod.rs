//! Structured JSON logs for the Lambda functions (CloudWatch Logs
//! friendly), address masking for logs, and EMF metrics ([`emf`]).

/// Installs a JSON tracing subscriber; `RUST_LOG` filters.
pub fn init() {
    use crate::config::settings::RUST_LOG;
    let directives = RUST_LOG.value().unwrap_or_else(|| RUST_LOG.default_value());
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(RUST_LOG.default_value::<String>()))
        // tokio-postgres logs statement parameters (addresses: PII) at
        // debug level; keep it at info whatever RUST_LOG says.
        .add_directive("tokio_postgres=info".parse().expect("static directive"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_target(false)
        .without_time() // CloudWatch stamps every line already
        .try_init();
}

/// Masks an address for logs (PII): `alice@example.com` → `a***@example.com`.
pub fn mask_email(email: &str) -> String {
    match email.split_once('@') {
        Some((local, domain)) => {
            let first: String = local.chars().take(1).collect();
            format!("{first}***@{domain}")
        }
        None => "***".to_string(),
    }
}

/// Masks every address inside free text (a provider's error message can
/// quote the recipient): `rejected alice@example.com` → `rejected a***@example.com`.
pub fn mask_emails_in(text: &str) -> String {
    let local = |c: char| c.is_alphanumeric() || "._%+-'!#$&*/=?^`{|}~".contains(c);
    let domain = |c: char| c.is_alphanumeric() || c == '.' || c == '-';
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '@' {
            // Take back the local part already copied, and mask the address.
            let mut start = i;
            while start > 0 && local(chars[start - 1]) {
                start -= 1;
            }
            let mut end = i + 1;
            while end < chars.len() && domain(chars[end]) {
                end += 1;
            }
            if start < i && end > i + 1 {
                let copied: usize = chars[start..i].iter().map(|c| c.len_utf8()).sum();
                out.truncate(out.len() - copied);
                let address: String = chars[start..end].iter().collect();
                out.push_str(&mask_email(&address));
                i = end;
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

pub mod emf;
pub mod trace;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_inside_provider_errors_are_masked() {
        assert_eq!(
            mask_emails_in("Email address is not verified: <Alice.B+x@example.com>, bob@mail.example.org."),
            "Email address is not verified: <A***@example.com>, b***@mail.example.org."
        );
        assert_eq!(mask_emails_in("no address @ all; a@ b"), "no address @ all; a@ b");
        assert_eq!(mask_emails_in("zoë@exämple.com"), "z***@exämple.com");
    }
}
