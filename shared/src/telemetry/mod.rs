//! Structured JSON logs for the Lambda functions (CloudWatch Logs
//! friendly), address masking for logs, and EMF metrics ([`emf`]).

/// Installs a JSON tracing subscriber; `RUST_LOG` filters (default `info`).
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
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

pub mod emf;
