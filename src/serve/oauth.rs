//! OAuth 2.1 resource-server checks for `mcp-server --transport http` (`[mcp] oauth_*`): a
//! JWT access token is accepted when a key of the issuer's JWKS signed it (RS256, ES256 or
//! EdDSA; the algorithm must fit the key), it is in date, `iss` is the issuer, `aud` names
//! the audience and `scope` (or `scp`) holds every required scope. The JWKS is found from
//! the issuer's RFC 8414 metadata (else its OpenID configuration), fetched over HTTP and
//! kept for `KEYS_FRESH`; a token naming a key not in it fetches it again, at most once per
//! `REFETCH_AFTER`. Refusals carry `WWW-Authenticate` naming the RFC 9728 protected-resource
//! metadata this module also serves. Knows nothing of MCP.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use ring::signature::{self, UnparsedPublicKey};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::McpOAuth;

/// Where the protected-resource metadata is served (RFC 9728 §3), for the resource at `/mcp`.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// How long fetched keys are used before they are fetched again.
const KEYS_FRESH: Duration = Duration::from_secs(600);
/// The least time between two fetches of the keys.
const REFETCH_AFTER: Duration = Duration::from_secs(30);
/// Clock difference tolerated on `exp` and `nbf`.
const LEEWAY_SECS: u64 = 60;

/// The checks, with the issuer's keys as last fetched.
pub struct ResourceServer {
    oauth: McpOAuth,
    /// Where the metadata is, as `WWW-Authenticate` names it.
    metadata_url: String,
    http: reqwest::Client,
    keys: tokio::sync::Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    set: Vec<Jwk>,
    fetched: Option<Instant>,
}

/// One key of a JWKS (RFC 7517), the members the checks use.
#[derive(Debug, Clone, Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

#[derive(Deserialize)]
struct JwtHeader {
    alg: String,
    kid: Option<String>,
}

/// Why a token is refused.
enum Refusal {
    /// 401 `invalid_token`.
    Invalid(String),
    /// 403 `insufficient_scope`: the scopes missing.
    Scope(Vec<String>),
    /// 503: the keys could not be had.
    NoKeys(String),
}

/// Where clients are told to read the metadata: for a resource named by an http(s) URL (its
/// public address, which a reverse proxy may serve), that URL with the well-known path put
/// before its path (RFC 9728 §3.1); otherwise this server's own address.
fn metadata_url(audience: &str, local: SocketAddr) -> String {
    match reqwest::Url::parse(audience) {
        Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
            let path = url.path().trim_end_matches('/');
            format!(
                "{}{METADATA_PATH}{path}",
                url.origin().ascii_serialization()
            )
        }
        _ => format!("http://{local}{METADATA_PATH}"),
    }
}

impl ResourceServer {
    /// The checks for `oauth`, for a server listening on `local`.
    pub fn new(oauth: McpOAuth, local: SocketAddr) -> ResourceServer {
        ResourceServer {
            metadata_url: metadata_url(&oauth.audience, local),
            oauth,
            http: manus_actors::tls::client(),
            keys: tokio::sync::Mutex::new(Keys::default()),
        }
    }

    /// The protected-resource metadata (RFC 9728).
    pub fn metadata(&self) -> Value {
        json!({
            "resource": self.oauth.audience,
            "authorization_servers": [self.oauth.issuer],
            "scopes_supported": self.oauth.scopes,
            "bearer_methods_supported": ["header"],
        })
    }

    /// `None` when `token` (the bearer token given, if any) is accepted; else the refusal.
    pub async fn refusal(&self, token: Option<&str>) -> Option<Response> {
        let Some(token) = token else {
            return Some(
                self.refuse(Refusal::Invalid(
                    "this server needs `Authorization: Bearer <access token>` from its \
                 authorization server (see the resource metadata)"
                        .into(),
                )),
            );
        };
        match self.check(token).await {
            Ok(()) => None,
            Err(r) => Some(self.refuse(r)),
        }
    }

    fn refuse(&self, why: Refusal) -> Response {
        let meta = &self.metadata_url;
        let (status, challenge, message) = match why {
            Refusal::Invalid(m) => (
                StatusCode::UNAUTHORIZED,
                format!(
                    "Bearer error=\"invalid_token\", error_description=\"{}\", resource_metadata=\"{meta}\"",
                    m.replace(['"', '\\'], "'")
                ),
                m,
            ),
            Refusal::Scope(missing) => {
                let m = format!("the access token lacks the scope {}", missing.join(" "));
                let scope = self.oauth.scopes.join(" ");
                (
                    StatusCode::FORBIDDEN,
                    format!(
                        "Bearer error=\"insufficient_scope\", scope=\"{scope}\", resource_metadata=\"{meta}\""
                    ),
                    m,
                )
            }
            Refusal::NoKeys(m) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("Bearer resource_metadata=\"{meta}\""),
                m,
            ),
        };
        let body = json!({"error": {"status": status.as_u16(), "message": message}});
        let mut r = (status, axum::Json(body)).into_response();
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        r
    }

    async fn check(&self, token: &str) -> Result<(), Refusal> {
        let invalid = |m: &str| Refusal::Invalid(format!("the access token {m}"));
        let mut parts = token.split('.');
        let (Some(head), Some(body), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(invalid("is not a JWT (three base64url parts)"));
        };
        let header: JwtHeader = decode_json(head).ok_or_else(|| invalid("has no valid header"))?;
        let claims: Value = decode_json(body).ok_or_else(|| invalid("has no valid claims"))?;
        let sig = b64(sig).ok_or_else(|| invalid("has a signature that is not base64url"))?;
        let signed = &token[..head.len() + 1 + body.len()];
        let key = self.key_for(&header).await?;
        verify(&key, &header.alg, signed.as_bytes(), &sig)
            .map_err(|m| Refusal::Invalid(format!("the access token {m}")))?;
        self.check_claims(&claims)
    }

    /// The claims' dates, issuer, audience and scopes.
    fn check_claims(&self, claims: &Value) -> Result<(), Refusal> {
        let invalid = |m: String| Refusal::Invalid(format!("the access token {m}"));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let exp = claims["exp"]
            .as_u64()
            .ok_or_else(|| invalid("has no `exp`".into()))?;
        if exp + LEEWAY_SECS <= now {
            return Err(invalid(format!("expired {} s ago", now - exp)));
        }
        if claims["nbf"]
            .as_u64()
            .is_some_and(|nbf| nbf > now + LEEWAY_SECS)
        {
            return Err(invalid("is not valid yet (`nbf`)".into()));
        }
        if claims["iss"].as_str() != Some(&self.oauth.issuer) {
            return Err(invalid(format!(
                "was issued by {}, not by {}",
                claims["iss"], self.oauth.issuer
            )));
        }
        let audience = &self.oauth.audience;
        let for_us = match &claims["aud"] {
            Value::String(a) => a == audience,
            Value::Array(list) => list.iter().any(|a| a.as_str() == Some(audience)),
            _ => false,
        };
        if !for_us {
            return Err(invalid(format!(
                "is for {}, not for {audience}",
                claims["aud"]
            )));
        }
        let held: Vec<&str> = match (&claims["scope"], &claims["scp"]) {
            (Value::String(s), _) | (_, Value::String(s)) => s.split_whitespace().collect(),
            (_, Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        let missing: Vec<String> = self
            .oauth
            .scopes
            .iter()
            .filter(|s| !held.contains(&s.as_str()))
            .cloned()
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Refusal::Scope(missing))
        }
    }

    /// The key `header` names (by `kid`, else the one key that fits its algorithm), from
    /// the keys held or fetched again.
    async fn key_for(&self, header: &JwtHeader) -> Result<Jwk, Refusal> {
        let mut keys = self.keys.lock().await;
        let stale = keys.fetched.is_none_or(|t| t.elapsed() >= KEYS_FRESH);
        let unknown = pick(&keys.set, header).is_none()
            && keys.fetched.is_none_or(|t| t.elapsed() >= REFETCH_AFTER);
        if stale || unknown {
            match self.fetch_keys().await {
                Ok(set) => {
                    keys.set = set;
                    keys.fetched = Some(Instant::now());
                }
                Err(e) if keys.set.is_empty() => return Err(Refusal::NoKeys(e)),
                Err(e) => tracing::warn!("keeping the issuer's keys fetched before: {e}"),
            }
        }
        pick(&keys.set, header).cloned().ok_or_else(|| {
            Refusal::Invalid(match &header.kid {
                Some(kid) => format!(
                    "the access token names the key `{kid}`, which the issuer does not publish"
                ),
                None => format!(
                    "the access token names no key, and the issuer has no single {} key",
                    header.alg
                ),
            })
        })
    }

    /// The issuer's JWKS, through its metadata.
    async fn fetch_keys(&self) -> Result<Vec<Jwk>, String> {
        let issuer = reqwest::Url::parse(&self.oauth.issuer).map_err(|e| e.to_string())?;
        let path = issuer.path().trim_end_matches('/');
        let mut tried = vec![];
        for well_known in [
            format!("/.well-known/oauth-authorization-server{path}"),
            format!("{path}/.well-known/openid-configuration"),
        ] {
            let mut url = issuer.clone();
            url.set_path(&well_known);
            match self.get_json(url.as_str()).await {
                Ok(meta) => {
                    if meta["issuer"].as_str() != Some(&self.oauth.issuer) {
                        return Err(format!(
                            "the metadata at {url} names the issuer {}, not {}",
                            meta["issuer"], self.oauth.issuer
                        ));
                    }
                    let Some(jwks) = meta["jwks_uri"].as_str() else {
                        return Err(format!("the metadata at {url} names no jwks_uri"));
                    };
                    let set = self.get_json(jwks).await?;
                    return serde_json::from_value::<Vec<Jwk>>(set["keys"].clone())
                        .map_err(|e| format!("the JWKS at {jwks} is not a key set ({e})"));
                }
                Err(e) => tried.push(e),
            }
        }
        Err(format!(
            "the issuer's metadata could not be had: {}",
            tried.join("; ")
        ))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let r = self
            .http
            .get(url)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .and_then(|r| r.error_for_status())
            .map_err(|e| format!("GET {url}: {e}"))?;
        r.json()
            .await
            .map_err(|e| format!("GET {url}: not JSON ({e})"))
    }
}

/// The key for `header`: by `kid` when it names one, else the only signing key of the
/// algorithm's type.
fn pick<'a>(set: &'a [Jwk], header: &JwtHeader) -> Option<&'a Jwk> {
    let signing = set
        .iter()
        .filter(|k| k.usage.as_deref().is_none_or(|u| u == "sig"));
    match &header.kid {
        Some(kid) => set.iter().find(|k| k.kid.as_ref() == Some(kid)),
        None => {
            let mut fitting = signing.filter(|k| kty_of(&header.alg) == Some(k.kty.as_str()));
            let one = fitting.next();
            fitting.next().is_none().then_some(one).flatten()
        }
    }
}

/// The key type an algorithm needs; `None` for one not accepted (`none`, HMAC, …).
fn kty_of(alg: &str) -> Option<&'static str> {
    match alg {
        "RS256" => Some("RSA"),
        "ES256" => Some("EC"),
        "EdDSA" => Some("OKP"),
        _ => None,
    }
}

/// Check `sig` over `signed` with `key` under `alg`; what is wrong otherwise.
fn verify(key: &Jwk, alg: &str, signed: &[u8], sig: &[u8]) -> Result<(), String> {
    if kty_of(alg) != Some(key.kty.as_str()) || key.alg.as_deref().is_some_and(|a| a != alg) {
        return Err(format!(
            "is signed with {alg}, which its key ({} {}) does not take; accepted: RS256, ES256, EdDSA",
            key.kty,
            key.alg.as_deref().unwrap_or("")
        ));
    }
    let part = |v: &Option<String>| v.as_deref().and_then(b64).ok_or("its key is incomplete");
    let checked = match alg {
        "RS256" => signature::RsaPublicKeyComponents {
            n: part(&key.n)?,
            e: part(&key.e)?,
        }
        .verify(&signature::RSA_PKCS1_2048_8192_SHA256, signed, sig),
        "ES256" if key.crv.as_deref() == Some("P-256") => {
            let point = [vec![4], part(&key.x)?, part(&key.y)?].concat();
            UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(signed, sig)
        }
        "EdDSA" if key.crv.as_deref() == Some("Ed25519") => {
            UnparsedPublicKey::new(&signature::ED25519, part(&key.x)?).verify(signed, sig)
        }
        _ => return Err(format!("is signed with {alg} on a curve not accepted")),
    };
    checked.map_err(|_| "has a signature that does not verify".to_string())
}

fn b64(text: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .ok()
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Option<T> {
    serde_json::from_slice(&b64(part)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{self as lc, KeyPair};
    use aws_lc_rs::{rand::SystemRandom, rsa};

    /// The metadata's address follows the resource's public URL (behind a proxy too), and
    /// this server's own address for a resource named otherwise.
    #[test]
    fn the_metadata_is_named_at_the_resources_public_address() {
        let local: SocketAddr = "127.0.0.1:8765".parse().unwrap();
        for (audience, url) in [
            (
                "https://tools.example/mcp",
                "https://tools.example/.well-known/oauth-protected-resource/mcp",
            ),
            (
                "https://tools.example:8443/",
                "https://tools.example:8443/.well-known/oauth-protected-resource",
            ),
            (
                "http://127.0.0.1:9000/a/mcp/",
                "http://127.0.0.1:9000/.well-known/oauth-protected-resource/a/mcp",
            ),
            (
                "urn:example:tools",
                "http://127.0.0.1:8765/.well-known/oauth-protected-resource",
            ),
        ] {
            assert_eq!(metadata_url(audience, local), url, "{audience}");
        }
    }

    /// The modulus and exponent of an RFC 8017 RSAPublicKey (DER), without leading zeros.
    fn modulus_and_exponent(der: &[u8]) -> (Vec<u8>, Vec<u8>) {
        // One DER element: its contents and what follows it.
        fn element(b: &[u8]) -> (&[u8], &[u8]) {
            let (len, at) = if b[1] < 0x80 {
                (b[1] as usize, 2)
            } else {
                let k = (b[1] & 0x7f) as usize;
                let len = b[2..2 + k].iter().fold(0, |a, &x| a << 8 | x as usize);
                (len, 2 + k)
            };
            (&b[at..at + len], &b[at + len..])
        }
        let (sequence, _) = element(der);
        let (n, rest) = element(sequence);
        let (e, _) = element(rest);
        let trim = |v: &[u8]| v.iter().skip_while(|&&b| b == 0).copied().collect();
        (trim(n), trim(e))
    }

    fn b64url(bytes: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn rs256_signatures_verify_and_no_other_algorithm_takes_an_rsa_key() {
        let key = rsa::KeyPair::generate(rsa::KeySize::Rsa2048).unwrap();
        let (n, e) = modulus_and_exponent(key.public_key().as_ref());
        let jwk = Jwk {
            kty: "RSA".into(),
            kid: Some("k".into()),
            alg: Some("RS256".into()),
            usage: Some("sig".into()),
            crv: None,
            n: Some(b64url(&n)),
            e: Some(b64url(&e)),
            x: None,
            y: None,
        };
        let signed = b"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0";
        let mut sig = vec![0; key.public_modulus_len()];
        key.sign(
            &lc::RSA_PKCS1_SHA256,
            &SystemRandom::new(),
            signed,
            &mut sig,
        )
        .unwrap();
        assert_eq!(verify(&jwk, "RS256", signed, &sig), Ok(()));
        let mut changed = sig.clone();
        changed[20] ^= 1;
        assert_eq!(
            verify(&jwk, "RS256", signed, &changed),
            Err("has a signature that does not verify".into())
        );
        for alg in ["ES256", "HS256", "none", "EdDSA"] {
            let e = verify(&jwk, alg, signed, &sig).unwrap_err();
            assert!(
                e.contains("which its key (RSA RS256) does not take"),
                "{alg}: {e}"
            );
        }
    }
}
