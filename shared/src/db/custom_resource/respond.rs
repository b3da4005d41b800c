//! The answer's way back to CloudFormation: a PUT of its JSON to the
//! request's pre-signed `ResponseURL`.

use std::time::Duration;

/// PUTs `body` (the answer's JSON) to `url` (a pre-signed S3 URL: no
/// content type, which its signature does not cover); an error says why.
pub async fn put(url: &str, body: Vec<u8>) -> Result<(), String> {
    use bytes::Bytes;
    use http_body_util::Full;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    let err = |e: &dyn std::fmt::Display| e.to_string();
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(&e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector =
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
    // (Plain http is reachable only through a `dev` build's loopback Trust.)
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let request = hyper::Request::put(url)
        .header(hyper::header::CONTENT_LENGTH, body.len())
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| err(&e))?;
    let answer = tokio::time::timeout(Duration::from_secs(30), client.request(request))
        .await
        .map_err(|_| "no answer within 30 s".to_string())?
        .map_err(|e| err(&e))?;
    if !answer.status().is_success() {
        return Err(format!("HTTP {}", answer.status()));
    }
    Ok(())
}
