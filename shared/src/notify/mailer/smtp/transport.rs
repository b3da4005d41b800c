//! The connection's TLS and its transport as lettre takes it.

use lettre::transport::smtp::client::AsyncTokioStream;

use super::config::SmtpConfig;
use crate::config::settings as S;
use crate::config::ConfigError;

/// The TLS of a connection to the configured host, trusting the public
/// roots plus `SMTP_CA_FILE`'s: the connector for implicit TLS and for
/// STARTTLS, both made here on a NODELAY socket.
pub(super) fn tls_for(
    config: &SmtpConfig,
) -> Result<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>), ConfigError> {
    let ca = |e: String| ConfigError::new(S::SMTP_CA_FILE.name, format!("holds no usable certificate: {e}"), "use PEM");
    let extra = match &config.extra_roots_pem {
        Some(pem) => crate::db::pem_certificates(pem).map_err(ca)?,
        None => Vec::new(),
    };
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for cert in extra {
        roots.add(cert).map_err(|e| ca(e.to_string()))?;
    }
    let host = |e: String| {
        ConfigError::new(
            S::SMTP_URL.name,
            format!("names a host TLS cannot check: {e}"),
            "use a DNS name or an IP address",
        )
    };
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::new(S::SMTP_URL.name, format!("cannot set up TLS: {e}"), "report this as a bug"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(config.host.clone()).map_err(|e| host(e.to_string()))?;
    Ok((tokio_rustls::TlsConnector::from(std::sync::Arc::new(client)), name))
}

/// A stream as lettre takes its transport: the implicit-TLS one made here
/// (and the tests' in-memory pipe), with the peer's address.
#[derive(Debug)]
pub(super) struct Transport<S>(pub(super) S, pub(super) std::net::SocketAddr);

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Transport<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Transport<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S> AsyncTokioStream for Transport<S>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Sync + Unpin + std::fmt::Debug,
{
    fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        Ok(self.1)
    }
}
