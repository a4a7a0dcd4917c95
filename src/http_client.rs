//! The HTTP(S) connector of the cloud APIs we call (EC2, vCenter), built from what kube already
//! builds (hyper-util's client, hyper-rustls, ring), and the helpers their retries share.

use std::sync::Arc;
use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use rustls::pki_types::CertificateDer;

/// HTTPS with the system's CA roots, and `extra_roots` when given (a private CA), or plain HTTP
/// (a local simulator); connecting bounded by `connect_timeout`. `service` names the API in the
/// warning given when no CA roots exist.
pub fn connector(
    connect_timeout: Duration,
    service: &str,
    extra_roots: &[CertificateDer<'static>],
) -> Result<HttpsConnector<HttpConnector>, rustls::Error> {
    // The crypto provider the rest of the program (kube, the metrics server) uses: no second
    // one is built (deny.toml).
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?;
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(native.certs);
    // Not fatal: most clusters never call this API, and where they do every call then fails
    // with a certificate error that is reported like any other.
    if added == 0 && extra_roots.is_empty() {
        let errors: Vec<String> = native.errors.iter().map(ToString::to_string).collect();
        tracing::warn!(errors = ?errors, service, "no system CA certificates: {service} cannot be verified");
    }
    roots.add_parsable_certificates(extra_roots.iter().cloned());
    let tls = builder.with_root_certificates(roots).with_no_client_auth();
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(connect_timeout));
    http.enforce_http(false);
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

/// Between half and all of `d`, so that replicas failing together do not retry together.
pub fn jittered(d: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|t| t.subsec_nanos())
        .unwrap_or_default();
    d.mul_f64(0.5 + f64::from(nanos % 1000) / 2000.0)
}

/// An error and all its sources, as one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut message = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}
