//! A minimal OAuth authorization server on 127.0.0.1 for the resource-server tests: it
//! publishes RFC 8414 metadata naming its JWKS, and the JWKS of an ES256 key it made at
//! start; the test signs its own access tokens with that key (or with a stranger's key of
//! the same `kid`, which the issuer does not publish). Issues no tokens over HTTP.

use axum::Router;
use axum::routing::get;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

/// The key id the issuer's key has.
pub const KID: &str = "test-key-1";

pub struct Issuer {
    /// Its issuer identifier, `http://127.0.0.1:PORT`.
    pub url: String,
    key: EcdsaKeyPair,
    server: tokio::task::JoinHandle<()>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn new_key() -> EcdsaKeyPair {
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap()
}

impl Issuer {
    /// Listen on a free loopback port and serve the metadata and the JWKS.
    pub async fn start() -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let key = new_key();
        // The public key is 0x04 || x || y (uncompressed P-256 point).
        let point = key.public_key().as_ref();
        let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256",
            "kid": KID, "x": b64(&point[1..33]), "y": b64(&point[33..65])}]});
        let metadata = json!({"issuer": url, "jwks_uri": format!("{url}/jwks"),
            "authorization_endpoint": format!("{url}/authorize"),
            "token_endpoint": format!("{url}/token"),
            "response_types_supported": ["code"]});
        let app = Router::new()
            .route(
                "/.well-known/oauth-authorization-server",
                get(move || async move { axum::Json(metadata) }),
            )
            .route("/jwks", get(move || async move { axum::Json(jwks) }));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Issuer { url, key, server }
    }

    /// An ES256 JWT with `claims`, signed by the issuer's key.
    pub fn sign(&self, claims: &Value) -> String {
        sign_with(&self.key, claims)
    }

    /// The same, signed by a key the issuer does not publish (with the issuer's `kid`).
    pub fn sign_as_stranger(&self, claims: &Value) -> String {
        sign_with(&new_key(), claims)
    }
}

fn sign_with(key: &EcdsaKeyPair, claims: &Value) -> String {
    let header = json!({"alg": "ES256", "typ": "at+jwt", "kid": KID});
    let signed = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let sig = key.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
    format!("{signed}.{}", b64(sig.as_ref()))
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}
