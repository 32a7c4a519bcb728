//! The TLS of every HTTP client the runtime builds: rustls with the platform's verifier, set
//! up as reqwest sets it up itself, except that the system's root certificates are read at
//! the first HTTPS handshake instead of when a client is built. Building a reqwest client
//! otherwise reads every file of the system's certificate directory (about 150 opens and
//! milliseconds of CPU per client), also in runs whose endpoints are all plain HTTP. The
//! roots are read once per process and shared by every client.

use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use rustls_platform_verifier::Verifier;

/// A reqwest client builder with the lazily rooted TLS (`reqwest::Client::builder()`
/// otherwise).
pub fn client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match config() {
        Some(tls) => builder.tls_backend_preconfigured(tls),
        None => builder,
    }
}

/// `reqwest::Client::new()` with the lazily rooted TLS.
pub fn client() -> reqwest::Client {
    client_builder()
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// The rustls configuration reqwest makes by default (every TLS version, the platform's
/// verifier, ALPN for HTTP/2 and HTTP/1.1, no client certificate), with the process's lazy
/// roots; `None` if rustls refuses the versions (then reqwest's own setup is used).
pub fn config() -> Option<rustls::ClientConfig> {
    static ROOTS: OnceLock<Arc<LazyRoots>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| Arc::new(LazyRoots::new(provider())));
    with_roots(roots.clone())
}

fn with_roots(roots: Arc<LazyRoots>) -> Option<rustls::ClientConfig> {
    let mut tls = rustls::ClientConfig::builder_with_provider(roots.provider.clone())
        .with_protocol_versions(rustls::ALL_VERSIONS)
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Some(tls)
}

/// The provider reqwest picks: the process's default if one was installed, else aws-lc-rs.
fn provider() -> Arc<CryptoProvider> {
    CryptoProvider::get_default()
        .cloned()
        .unwrap_or_else(|| Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
}

/// The platform's verifier, made (and the system's roots read) when a server's certificate
/// is first checked.
#[derive(Debug)]
struct LazyRoots {
    provider: Arc<CryptoProvider>,
    verifier: OnceLock<Result<Verifier, rustls::Error>>,
}

impl LazyRoots {
    fn new(provider: Arc<CryptoProvider>) -> Self {
        LazyRoots {
            provider,
            verifier: OnceLock::new(),
        }
    }

    fn get(&self) -> Result<&Verifier, rustls::Error> {
        self.verifier
            .get_or_init(|| Verifier::new(self.provider.clone()))
            .as_ref()
            .map_err(Clone::clone)
    }

    #[cfg(test)]
    fn loaded(&self) -> bool {
        self.verifier.get().is_some()
    }
}

impl ServerCertVerifier for LazyRoots {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.get()?
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.get()?.verify_tls13_signature(message, cert, dss)
    }

    /// What the platform's verifier offers (its WebPKI verifier's: the provider's
    /// algorithms), without reading the roots for it.
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offered_schemes_are_the_platform_verifiers() {
        let roots = LazyRoots::new(provider());
        let platform = Verifier::new(provider()).unwrap();
        assert_eq!(
            roots.supported_verify_schemes(),
            platform.supported_verify_schemes()
        );
        assert!(!roots.loaded());
    }

    /// Clients are built and plain HTTP is spoken without the roots; the first certificate
    /// to check reads them, and is checked by the platform's verifier.
    #[tokio::test]
    async fn the_roots_are_read_at_the_first_certificate_only() {
        let roots = Arc::new(LazyRoots::new(provider()));
        let tls = with_roots(roots.clone()).unwrap();
        assert_eq!(tls.alpn_protocols, [&b"h2"[..], &b"http/1.1"[..]]);
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .build()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf).await;
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
            conn.write_all(answer).await.unwrap();
        });
        let answer = http.get(&url).send().await.unwrap();
        assert_eq!(answer.text().await.unwrap(), "ok");
        assert!(!roots.loaded());

        let junk = CertificateDer::from(vec![1u8, 2, 3]);
        let name = ServerName::try_from("example.com").unwrap();
        let checked = roots.verify_server_cert(&junk, &[], &name, &[], UnixTime::now());
        assert!(roots.loaded());
        let platform = Verifier::new(provider()).unwrap();
        let expected = platform.verify_server_cert(&junk, &[], &name, &[], UnixTime::now());
        assert_eq!(checked.unwrap_err(), expected.unwrap_err());
    }
}
